//! Where Squadron's tables live, below the plan nodes that read and write
//! them:
//!
//! - `object_stores`: remote stores (S3, GCS, Azure, HTTP), built from the
//!   URL a plan names and the process's own environment
//! - `format`: the created tables' part files, their layout and naming,
//!   and what a write reports for its commit
//! - `managed_table`: a created table as exactly the part files its last
//!   commit names
//!
//! The plan nodes that write part files (`TableWriteExec`) travel with a
//! stage's plan, so they live in `squadron_exec::write`.

pub mod format;
pub mod managed_table;
pub mod object_stores;

/// Parquet footers (with their page indexes) a process keeps parsed, in
/// DataFusion's file metadata cache (its default is 50 MiB). TPC-H SF10's
/// `lineitem` alone (3,662 row groups) did not fit the default: the
/// coordinator then planned without it (no pruned ranges, no key range
/// splits), and every worker task scanning it read and parsed its 7 MB
/// footer again (110-150 ms a task).
pub const FOOTER_CACHE_BYTES: usize = 256 * 1024 * 1024;
