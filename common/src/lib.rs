//! Squadron's shared foundation, the lowest layer above the wire types:
//! nothing here knows about plans, tasks or clients.
//!
//! - `error`: DataFusion, Arrow and object store errors as gRPC statuses
//! - `config`: command line, environment and TOML settings files, layered
//! - `logging`: the tracing subscriber every binary installs
//! - `shutdown`: termination signals, graceful drains, byte sizes
//! - `metrics`: the Prometheus exporter every process serves
//! - `spill_dir`: --spill-dir/--spill-limit, each process's own directory
//! - `version`: the engine build both sides of a task must share

pub mod config;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod shutdown;
pub mod spill_dir;
pub mod traces;
pub mod version;
