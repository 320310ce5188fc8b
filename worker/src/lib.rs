//! Squadron worker: runs the tasks the coordinator sends and serves their
//! output streams to peers and to the coordinator.
//!
//! - `service/`: the gRPC surface (control: RunTask/StopTask/CleanUpJob;
//!   Flight: DoGet of task streams)
//! - `task/`: preparing, running and stopping tasks
//! - `metrics`: what workers record
//!
//! What a task's plan is made of lives in `squadron-exec`; channels to
//! peers and stream encoding in `squadron-net`.

pub mod metrics;
pub mod server;
pub mod service;
pub mod task;

pub use server::{spawn_worker, Worker, WorkerOptions};
