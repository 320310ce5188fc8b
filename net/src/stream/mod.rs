//! Task streams on the wire: Flight encoding of batches, the end-of-stream
//! marker, fetching a task's stream from a peer, and the secrets that let
//! only the job's own tasks read it.

pub mod decode;
pub mod encoder;
pub mod end_marker;
pub mod fetch;
pub mod flight_batches;
pub mod ipc_header;
pub mod secret;

pub use secret::StreamSecret;
