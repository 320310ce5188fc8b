//! Results that differ from single-node DataFusion's because Squadron is
//! built to differ there (or because DataFusion itself errs on the file
//! tables Squadron keeps), recognised from the difference itself rather
//! than from a refusal of Squadron's (those are in `gaps.rs`). Each
//! becomes a note that `gaps.rs` lists as a known gap, never a pass.

use sqllogictest::TestErrorKind;

/// The three texts of a result mismatch, the only kind of difference
/// these checks look at.
pub struct Mismatch<'a> {
    pub sql: &'a str,
    pub expected: &'a str,
    pub actual: &'a str,
}

impl<'a> Mismatch<'a> {
    pub fn of(kind: &'a TestErrorKind) -> Option<Self> {
        match kind {
            TestErrorKind::QueryResultMismatch {
                sql,
                expected,
                actual,
            } => Some(Self {
                sql,
                expected,
                actual,
            }),
            _ => None,
        }
    }
}

/// A result mismatch, for tests of the checks.
#[cfg(test)]
pub fn mismatch(sql: &str, expected: &str, actual: &str) -> TestErrorKind {
    TestErrorKind::QueryResultMismatch {
        sql: sql.into(),
        expected: expected.into(),
        actual: actual.into(),
    }
}

/// Settings whose defaults Squadron changes on purpose (see
/// `coordinator_session_config` in the planner): dynamic filters and physical
/// scalar subqueries cannot cross a stage cut, broadcast thresholds and
/// round-robin repartitions are tuned for shuffles over the network, and
/// Parquet strings are read as plain strings.
const SQUADRON_DEFAULTS: &[&str] = &[
    "datafusion.optimizer.enable_dynamic_filter_pushdown",
    "datafusion.optimizer.enable_join_dynamic_filter_pushdown",
    "datafusion.optimizer.enable_topk_dynamic_filter_pushdown",
    "datafusion.optimizer.enable_aggregate_dynamic_filter_pushdown",
    "datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery",
    "datafusion.optimizer.enable_round_robin_repartition",
    "datafusion.optimizer.hash_join_single_partition_threshold",
    "datafusion.optimizer.hash_join_single_partition_threshold_rows",
    "datafusion.execution.parquet.schema_force_view_types",
];

/// Marks `SHOW ALL` output that differs only in `SQUADRON_DEFAULTS`.
pub fn squadron_defaults(kind: &TestErrorKind) -> Option<String> {
    let Mismatch {
        sql,
        expected,
        actual,
    } = Mismatch::of(kind)?;
    if !sql.trim().to_ascii_lowercase().starts_with("show all") {
        return None;
    }
    let expected: Vec<&str> = expected.lines().map(str::trim_end).collect();
    let actual: Vec<&str> = actual.lines().map(str::trim_end).collect();
    if expected.len() != actual.len() {
        return None;
    }
    let key = |line: &str| {
        line.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let by_design = expected
        .iter()
        .zip(&actual)
        .filter(|(e, a)| e != a)
        .all(|(e, a)| key(e) == key(a) && SQUADRON_DEFAULTS.contains(&key(e).as_str()));
    by_design.then(|| {
        "Squadron's own defaults: SHOW ALL differs only in settings Squadron changes on purpose"
            .into()
    })
}

/// Marks a listing of the catalog (`information_schema`, `SHOW TABLES`)
/// that has every expected row plus only rows of Squadron's `system`
/// schema (`system.workers`, `system.queries`), or copies of expected rows
/// (a projection that leaves out the schema name, e.g. `catalog_name`).
pub fn system_schema_listed(kind: &TestErrorKind) -> Option<String> {
    let Mismatch {
        sql,
        expected,
        actual,
    } = Mismatch::of(kind)?;
    let lower = sql.to_ascii_lowercase();
    if !lower.contains("information_schema") && !lower.contains("show tables") {
        return None;
    }
    let mut missing: Vec<&str> = expected.lines().map(str::trim_end).collect();
    let mut extra = vec![];
    for line in actual.lines().map(str::trim_end) {
        match missing.iter().position(|e| *e == line) {
            Some(at) => {
                missing.swap_remove(at);
            }
            None => extra.push(line),
        }
    }
    let expected_lines: Vec<&str> = expected.lines().map(str::trim_end).collect();
    // Copies of expected rows show up as `extra` only when the expected
    // copy was consumed already; count them apart from `system` rows.
    let is_system = |line: &str| line.split_whitespace().any(|word| word == "system");
    let listed = missing.is_empty()
        && extra
            .iter()
            .all(|line| is_system(line) || expected_lines.contains(line));
    listed.then(|| {
        "the system schema listed: the rows expected, plus Squadron's own system schema".into()
    })
}

/// Marks a result that differs only in the type names of Parquet columns
/// that single-node DataFusion reads as views (`schema_force_view_types`)
/// and Squadron as plain strings and binaries (the types the file holds:
/// views ship badly between processes, and many clients cannot read them).
pub fn plain_parquet_types(kind: &TestErrorKind) -> Option<String> {
    let Mismatch {
        expected, actual, ..
    } = Mismatch::of(kind)?;
    let plain = |text: &str| -> Vec<String> {
        text.lines()
            .map(|line| {
                line.split_whitespace()
                    .map(|word| match word {
                        "BinaryView" | "LargeBinary" => "Binary",
                        "Utf8View" | "LargeUtf8" => "Utf8",
                        other => other,
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let views = |text: &str| text.contains("View");
    (views(expected) && plain(expected) == plain(actual)).then(|| {
        "plain Parquet types: the same values, typed as the file holds them, not as views".into()
    })
}

/// Marks an overflow from a query whose `LIMIT` has no `ORDER BY`: which
/// rows such a query reads is unspecified, single-node DataFusion reads its
/// first partition's first, Squadron those of the task that answers first,
/// and an expression over the rows read can overflow on some rows only
/// (math.slt's `abs(c) … LIMIT 1` over a table holding -128).
pub fn limit_read_other_rows(kind: &TestErrorKind) -> Option<String> {
    let TestErrorKind::Fail { sql, err, .. } = kind else {
        return None;
    };
    let lower = sql.to_ascii_lowercase();
    let unordered_limit = lower.contains(" limit ") && !lower.contains("order by");
    (unordered_limit && err.to_string().contains("overflow")).then(|| {
        format!(
            "a LIMIT without ORDER BY read other rows, one of which overflows ⏎ {}",
            err.to_string().lines().next().unwrap_or_default()
        )
    })
}

/// Marks DataFusion's own sanity-check failure of apache/datafusion#20194
/// on file tables: a filter `nvl(c, '0') = '0'` makes the literal and the
/// `nvl` (as `CASE WHEN c IS NOT NULL …`) equivalent, and the sort under a
/// window gets the `CASE` substituted into its keys, which the window's
/// requirement (with the literal) then does not recognise. Fixed in
/// DataFusion 55 for in-memory tables only: single-node DataFusion fails
/// the same statement over Parquet files with nullable columns, which is
/// what Squadron's created tables are.
pub fn upstream_sort_key_substitution(kind: &TestErrorKind) -> Option<String> {
    let TestErrorKind::Fail { err, .. } = kind else {
        return None;
    };
    let err = err.to_string();
    let (required, child_order) = err.split_once("does not satisfy order requirements")?;
    let substituted =
        child_order
            .split_once("Child-0 order")
            .is_some_and(|(requirement, order)| {
                !requirement.contains("IS NOT NULL THEN") && order.contains("IS NOT NULL THEN")
            });
    (required.contains("SanityCheckPlan") && substituted).then(|| {
        "DataFusion's sort key substitution (apache/datafusion#20194) on file tables".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_all_may_differ_only_in_squadrons_own_defaults() {
        let expected = "datafusion.execution.batch_size 8192\n\
                        datafusion.optimizer.enable_round_robin_repartition true";
        let ours = "datafusion.execution.batch_size 8192\n\
                    datafusion.optimizer.enable_round_robin_repartition false";
        assert!(squadron_defaults(&mismatch("SHOW ALL", expected, ours)).is_some());
        let other = "datafusion.execution.batch_size 4096\n\
                     datafusion.optimizer.enable_round_robin_repartition false";
        assert!(squadron_defaults(&mismatch("SHOW ALL", expected, other)).is_none());
        assert!(squadron_defaults(&mismatch("SELECT 1", expected, ours)).is_none());
    }

    #[test]
    fn parquet_columns_may_be_typed_plain_instead_of_as_views() {
        let sql = "SELECT arrow_typeof(b), b FROM t";
        let ours = "Binary 616161\nLargeBinary 626262";
        let expected = "BinaryView 616161\nBinaryView 626262";
        assert!(plain_parquet_types(&mismatch(sql, expected, ours)).is_some());
        assert!(plain_parquet_types(&mismatch(sql, expected, "Binary 616161\nBinary 0")).is_none());
        assert!(plain_parquet_types(&mismatch(sql, "Int32 1", "Int64 1")).is_none());
    }

    fn fail(sql: &str, err: &str) -> TestErrorKind {
        TestErrorKind::Fail {
            sql: sql.into(),
            err: std::sync::Arc::new(std::io::Error::other(err.to_string())),
            kind: sqllogictest::RecordKind::Query,
        }
    }

    #[test]
    fn datafusions_sort_key_substitution_is_recognised_by_its_signature() {
        let substituted = "SanityCheckPlan caused by Plan: [...] does not satisfy order \
            requirements: [CASE WHEN c@2 = 0 THEN 1 ELSE 0 END ASC]. Child-0 order: [[CASE WHEN \
            c@2 = CASE WHEN c@2 IS NOT NULL THEN c@2 ELSE 0 END THEN 1 ELSE 0 END ASC]]";
        assert!(upstream_sort_key_substitution(&fail("SELECT …", substituted)).is_some());
        let other = "SanityCheckPlan caused by Plan: [...] does not satisfy order requirements: \
            [a@0 ASC]. Child-0 order: [[b@1 ASC]]";
        assert!(upstream_sort_key_substitution(&fail("SELECT …", other)).is_none());
    }

    #[test]
    fn only_an_overflow_under_an_unordered_limit_is_a_row_choice() {
        let overflow = "Arrow error: Compute error: Int8Array overflow on abs(-128)";
        assert!(limit_read_other_rows(&fail("select abs(c1) from t limit 1", overflow)).is_some());
        let ordered = "select abs(c1) from t order by c1 limit 1";
        assert!(limit_read_other_rows(&fail(ordered, overflow)).is_none());
        assert!(limit_read_other_rows(&fail("select abs(c1) from t", overflow)).is_none());
        assert!(
            limit_read_other_rows(&fail("select x from t limit 1", "no such column")).is_none()
        );
    }

    #[test]
    fn listings_may_add_only_the_system_schema() {
        let sql = "SELECT * FROM information_schema.schemata";
        let expected = "datafusion public";
        let ours = "datafusion public\ndatafusion system";
        assert!(system_schema_listed(&mismatch(sql, expected, ours)).is_some());
        let names = "SELECT catalog_name FROM information_schema.schemata";
        assert!(
            system_schema_listed(&mismatch(names, "datafusion", "datafusion\ndatafusion"))
                .is_some()
        );
        // A missing row or another extra row is a real difference.
        assert!(system_schema_listed(&mismatch(sql, expected, "datafusion system")).is_none());
        assert!(system_schema_listed(&mismatch(
            sql,
            expected,
            "datafusion public\ndatafusion other"
        ))
        .is_none());
        assert!(system_schema_listed(&mismatch("SELECT 1", expected, ours)).is_none());
    }
}
