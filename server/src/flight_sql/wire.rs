//! Flight SQL's wire shapes shared by the handlers: metadata answers as
//! FlightInfos and streams, DoPut parameter batches, schemas as IPC bytes.

use std::pin::Pin;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::ProstMessageExt;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_flight::{IpcMessage, SchemaAsIpc};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{Stream, TryStreamExt};
use prost::Message;
use tonic::{Response, Status};

use squadron_coordinator::output::encode_batches;

/// What a DoGet answers with.
pub type FlightDataStream =
    Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

/// Describes a metadata answer computed on the coordinator: its ticket
/// is the command itself, answered again by DoGet.
pub(super) fn command_info(
    command: impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(command.as_any().encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor)
        .with_total_records(-1);
    Ok(Response::new(info))
}

/// The Flight RPC action that cancels a FlightInfo's query.
pub(super) const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The parameter batches of a DoPut.
pub(super) async fn read_batches(
    stream: PeekableFlightDataStream,
) -> Result<Vec<RecordBatch>, Status> {
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(|e| Status::invalid_argument(format!("reading the parameter batches: {e}")))
}

/// A metadata answer as a DoGet stream.
pub(super) fn batch_stream(batch: RecordBatch) -> Response<FlightDataStream> {
    let schema = batch.schema();
    Response::new(encode_batches(
        schema,
        futures::stream::once(async { Ok(batch) }),
    ))
}

/// A schema as the IPC bytes Flight SQL carries in prepared statement
/// results; none at all for an empty schema (a statement without rows or
/// without parameters), which every client reads as "no columns".
pub(super) fn schema_bytes(schema: &SchemaRef) -> Result<prost::bytes::Bytes, Status> {
    if schema.fields().is_empty() {
        return Ok(Default::default());
    }
    let message: IpcMessage = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(message.0)
}
