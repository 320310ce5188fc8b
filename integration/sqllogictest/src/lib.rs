//! What both of Squadron's differential testers share: the cluster they run
//! against (`cluster`), the two engines behind one interface (`engines`),
//! and one rendering of answers (`format`). The corpus runner is the
//! `squadron-slt` binary here; the query fuzzer is `integration/fuzz`.

pub mod cluster;
pub mod engines;
pub mod format;
