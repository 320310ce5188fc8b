//! Task output streams: registration, routing and the bounded buffers.

pub mod manager;
pub mod writer;

pub use manager::{BatchResult, PendingStream, StreamManager};
pub use writer::{write_output, Router};
