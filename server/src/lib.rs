//! Squadron coordinator: serves Arrow Flight SQL to clients, plans each
//! statement into stages, runs the stages' tasks on workers and streams the
//! final stage back.
//!
//! - `flight_sql/`: the client-facing service, statement handles, errors
//! - `planner/`: physical plan → job graph (stages)
//! - `scheduler/`: admission, task placement, dispatch (RunTask), retries
//! - `output/`: the job output merging the final stage's streams
//! - `cluster/`: where the workers are (`WorkerResolver`) and which answer
//! - `catalog/`: tables from the command line, TPC-H sample data, created
//!   tables (`ManagedTable`) and the catalog's entries
//! - `warehouse/`: where created tables and the catalog live; commits
//! - `updates/`: DDL, DML and bulk ingest
//! - `session`: a client's catalog, schema and changed settings

pub mod catalog;
pub mod engine;
pub mod flight_sql;
pub mod health_check;
pub mod local_workers;
pub mod security;
mod server;
pub mod updates;
pub mod warehouse;

pub use server::{
    start, Launcher, RunningServer, ServerOptions, CLIENT_MESSAGE_BYTES,
    DEFAULT_MAX_QUERIES_PER_USER,
};
pub use squadron_coordinator::{Coordinator, JobLimits};
