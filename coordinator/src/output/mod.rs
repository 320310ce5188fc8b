//! Streaming a job's result to the client.

pub mod encode;
pub mod job_output;
pub mod replay;
pub mod spool;

pub use encode::{encode_batches, rows_in, schema_message};
pub use job_output::{stream_output, AttemptEnd, OutputSender, OUTPUT_BUFFER};

/// What the client's `DoGet` sends: the result's Flight messages (schema
/// first), or its error.
pub type JobStream =
    futures::stream::BoxStream<'static, Result<arrow_flight::FlightData, tonic::Status>>;
