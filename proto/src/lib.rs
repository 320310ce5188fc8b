//! Squadron's wire contract: task definitions, the worker gRPC service, task
//! status messages and the Flight tickets of task output streams.

pub mod v1 {
    tonic::include_proto!("squadron.v1");
}

mod ticket;
mod version;

pub use ticket::StreamKey;
pub use version::PROTOCOL_VERSION;
