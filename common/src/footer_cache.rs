//! How much parsed Parquet metadata a process keeps.

/// Parquet footers (with their page indexes) a process keeps parsed, in
/// DataFusion's file metadata cache (its default is 50 MiB). TPC-H SF10's
/// `lineitem` alone (3,662 row groups) did not fit the default: the
/// coordinator then planned without it (no pruned ranges, no key range
/// splits), and every worker task scanning it read and parsed its 7 MB
/// footer again (110-150 ms a task).
pub const FOOTER_CACHE_BYTES: usize = 256 * 1024 * 1024;
