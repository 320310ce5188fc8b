//! The worker's gRPC services.

pub mod control;
pub mod flight;
pub mod zero_copy_do_get;

pub use control::WorkerControl;
pub use flight::WorkerFlight;
