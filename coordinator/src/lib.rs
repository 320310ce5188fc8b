//! Squadron's coordinator side below the client protocol: what happens to
//! a statement once it is SQL in a session.
//!
//! - `statements`: plans statements (locally or as a job graph), admits,
//!   supervises and records them; EXPLAIN
//! - `scheduler/`: admission, task placement, dispatch (RunTask), retries,
//!   plans run on the coordinator itself
//! - `output/`: the job output merging the final stage's streams
//! - `cluster/`: where the workers are (`WorkerResolver`) and which answer
//! - `session`: a client's catalog, schema, changed settings and plan
//!   templates
//! - `queries`: the live queries `system.queries` shows
//! - `metrics`: what the coordinator records

pub mod cluster;
pub mod metrics;
pub mod output;
pub mod queries;
pub mod scheduler;
pub mod session;
pub mod statements;

pub use statements::{Coordinator, JobLimits};
