//! Results the coordinator computes itself (EXPLAIN, constant queries),
//! encoded as the Flight messages a `DoGet` sends; and the schema message
//! that starts a forwarded job output.

use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, StreamExt, TryStreamExt};
use squadron_net::stream::encoder::{self, flight_data};
use squadron_net::stream::flight_batches::for_flight;
use tonic::Status;

use super::JobStream;

/// The schema message every `DoGet` answer starts with. Workers encode
/// with the same (default) IPC options, so their batches follow it.
pub fn schema_message(schema: &SchemaRef) -> FlightData {
    encoder::schema_message(&encoder::without_dictionaries(schema))
}

/// Encodes batches computed on the coordinator, cut for Flight.
pub fn encode_batches<S>(schema: SchemaRef, batches: S) -> JobStream
where
    S: Stream<Item = Result<RecordBatch, Status>> + Send + 'static,
{
    let pieces = batches
        .map_ok(|batch| futures::stream::iter(for_flight(batch).into_iter().map(Ok::<_, Status>)))
        .try_flatten();
    flight_data(schema, pieces.map_err(FlightError::from))
        .map_err(Status::from)
        .boxed()
}

/// The rows a Flight message carries: the length of its record batch.
pub fn rows_in(data: &FlightData) -> u64 {
    datafusion::arrow::ipc::root_as_message(&data.data_header)
        .ok()
        .and_then(|message| message.header_as_record_batch())
        .map_or(0, |batch| batch.length().max(0) as u64)
}
