//! Squadron's wire contract: task definitions, the worker gRPC service, task
//! status messages and the Flight tickets of task output streams.

pub mod v1 {
    tonic::include_proto!("squadron.v1");
}

mod ticket;
mod version;

pub use ticket::StreamKey;

/// The Flight action type of a `v1::StreamFilter`.
pub const FILTER_STREAM_ACTION: &str = "squadron.filter_stream";
pub use version::PROTOCOL_VERSION;
