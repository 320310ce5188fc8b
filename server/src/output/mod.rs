//! Streaming a job's result to the client.

pub mod flight_batches;
pub mod job_output;

pub use job_output::{job_output, JobStream};
