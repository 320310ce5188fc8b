//! Squadron worker: runs the tasks the coordinator sends and serves their
//! output streams to peers and to the coordinator.
//!
//! - `service/`: the gRPC surface (control: RunTask/StopTask/CleanUpJob;
//!   Flight: DoGet of task streams)
//! - `task/`: preparing, running and stopping tasks
//! - `stream/`: output channels with bounded buffers, and batch routing
//! - `plan/`: `StageReadExec` and the datafusion-proto extension codec
//! - `client`: cached channels to peers
//! - `object_stores`: remote tables' stores, built from the environment
//! - `write/`: part files of created tables, written by the tasks
//! - `squadron_options`: the `squadron.*` session settings

pub mod client;
pub mod config;
pub mod configured_functions;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod object_stores;
pub mod plan;
pub mod server;
pub mod service;
pub mod shutdown;
pub mod single_row;
pub mod squadron_options;
pub mod stream;
pub mod task;
pub mod tls;
pub mod version;
pub mod write;

pub use server::{spawn_worker, Worker, WorkerOptions};
