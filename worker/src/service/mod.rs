//! The worker's gRPC services.

pub mod control;
pub mod flight;

pub use control::WorkerControl;
pub use flight::WorkerFlight;
