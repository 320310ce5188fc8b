//! A task's output: bounded channels, routing of its batches to them, and
//! the registry of streams waiting for their consumer.

pub mod channel;
pub mod filter;
pub mod manager;
pub mod spill;
pub mod writer;

pub use channel::{
    output_channels, output_channels_with, OutputMode, OutputReader, OutputWriter, RetainedMemory,
};
pub use manager::{PendingStream, StreamManager};
pub use writer::{batch_bytes, write_output, OutputCount, Router};
