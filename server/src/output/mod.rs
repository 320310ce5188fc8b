//! Streaming a job's result to the client.

pub mod job_output;

pub use job_output::{stream_output, AttemptEnd, OutputSender, OUTPUT_BUFFER};

/// What the client's `DoGet` reads: the job's batches, or its error.
pub type JobStream = tokio_stream::wrappers::ReceiverStream<
    Result<datafusion::arrow::record_batch::RecordBatch, tonic::Status>,
>;
