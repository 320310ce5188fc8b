//! What is not compared, and why. Everything else in the corpus runs on
//! both engines.
//!
//! Files that read data the package does not ship (`../../testing/…`)
//! still run: the records needing that data fail on both engines alike
//! and count as baseline failures, and the rest of the file — often most
//! of it — is compared.

use std::path::Path;

/// Files left out entirely, with the reason.
const SKIPPED_FILES: &[(&str, &str)] = &[
    (
        "spark/",
        "Spark dialect and functions: the datafusion-spark crate is not in Squadron's build",
    ),
    (
        "avro.slt",
        "Avro files: DataFusion's `avro` feature is not in Squadron's build",
    ),
    (
        "explain.slt",
        "single-node EXPLAIN text; Squadron's plans are cut into stages",
    ),
    (
        "explain_tree.slt",
        "single-node EXPLAIN tree rendering; Squadron's plans are cut into stages",
    ),
    ("explain_analyze.slt", "single-node EXPLAIN ANALYZE metrics"),
];

/// Why `file` (relative to `test_files/`) is skipped, if it is.
pub fn skipped_file(file: &Path) -> Option<&'static str> {
    let name = file.to_string_lossy();
    SKIPPED_FILES
        .iter()
        .find(|(pattern, _)| {
            if pattern.ends_with('/') {
                name.starts_with(pattern)
            } else {
                name == *pattern
            }
        })
        .map(|(_, reason)| *reason)
}

/// Records left out on both engines: plan text is the single-node
/// planner's, which Squadron's staged plans do not reproduce line by line.
pub fn skipped_record(sql: &str) -> Option<&'static str> {
    let first = sql.split_whitespace().next().unwrap_or("");
    first
        .eq_ignore_ascii_case("explain")
        .then_some("EXPLAIN: single-node plan text")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_name_their_files() {
        assert!(skipped_file(Path::new("spark/math/abs.slt")).is_some());
        assert!(skipped_file(Path::new("explain.slt")).is_some());
        assert!(skipped_file(Path::new("explain_dummy.slt")).is_none());
        assert!(skipped_file(Path::new("joins.slt")).is_none());
        assert!(skipped_record("  EXPLAIN SELECT 1").is_some());
        assert!(skipped_record("select explain from t").is_none());
    }
}
