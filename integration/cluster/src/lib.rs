//! What the cluster tests and the benchmark share: embedded workers
//! started in this process (`in_process_workers`), answers compared with
//! the single-node oracle's (`answers`), figures read back from EXPLAIN
//! ANALYZE (`explained`), and what the operating system says about a
//! process (`process_stats`). Dev-only: no product crate depends on
//! this one.

pub mod answers;
pub mod explained;
mod in_process_workers;
pub mod process_stats;

pub use in_process_workers::{workers, InProcessWorkers};
