//! Task output streams: bounded channels, routing, and the registry of
//! streams waiting for their consumer.

pub mod channel;
pub mod encoder;
pub mod end_marker;
pub mod fetch;
pub mod flight_batches;
pub mod ipc_header;
pub mod manager;
pub mod secret;
pub mod writer;

pub use channel::{output_channels, OutputReader, OutputWriter};
pub use manager::{PendingStream, StreamManager};
pub use secret::StreamSecret;
pub use writer::{write_output, Router};
