//! Results the coordinator computes itself (EXPLAIN, constant queries),
//! encoded as the Flight messages a `DoGet` sends; and the schema message
//! that starts a forwarded job output.

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, SchemaAsIpc};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, StreamExt, TryStreamExt};
use squadron_worker::stream::flight_batches::{for_flight, NO_ENCODER_SPLIT};
use tonic::Status;

use super::JobStream;

/// The schema message every `DoGet` answer starts with. Workers encode
/// with the same (default) IPC options, so their batches follow it.
pub fn schema_message(schema: &SchemaRef) -> FlightData {
    SchemaAsIpc::new(schema, &IpcWriteOptions::default()).into()
}

/// Encodes batches computed on the coordinator, cut for Flight.
pub fn encode_batches<S>(schema: SchemaRef, batches: S) -> JobStream
where
    S: Stream<Item = Result<RecordBatch, Status>> + Send + 'static,
{
    let pieces = batches
        .map_ok(|batch| futures::stream::iter(for_flight(batch).into_iter().map(Ok::<_, Status>)))
        .try_flatten();
    FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_max_flight_data_size(NO_ENCODER_SPLIT)
        .build(pieces.map_err(FlightError::from))
        .map_err(Status::from)
        .boxed()
}
