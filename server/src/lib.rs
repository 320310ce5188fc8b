//! Squadron server: the Flight SQL service clients connect to, on top of
//! the coordinator (`squadron-coordinator`), which plans statements into
//! stages, runs their tasks on workers and streams the final stage back.
//!
//! - `flight_sql/`: the client-facing service, statement handles, errors
//! - `security/`: client TLS, logins, tokens, signed tickets
//! - `catalog/`: tables from the command line, TPC-H sample data, Delta
//!   tables, system tables, the catalog's entries
//! - `warehouse/`: where created tables and the catalog live; commits
//! - `updates/`: DDL, DML and bulk ingest, run against `engine`
//! - `local_workers`: the embedded workers, as child processes
//! - `health_check`: the `health-check` subcommand
//!
//! The crates below, and the life of a query through them:
//! docs/architecture.md.

pub mod admin;
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
pub use squadron_common::spill_dir::SpillSettings;
pub use squadron_coordinator::{Coordinator, JobLimits};
