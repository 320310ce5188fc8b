//! Known gaps: statements that pass on single-node DataFusion and are
//! refused by Squadron on purpose or for a reason bigger than one fix,
//! recognised by the error Squadron gives. Anything else that differs is a
//! difference to fix, and fails `--check`.

const RUNNER_REGISTERED: &str = "a catalog or schema DataFusion's runner registers in Rust code \
     (`test_context.rs`: information_schema_columns.slt's `my_catalog.my_schema`, cte.slt's \
     strict schema provider), which no SQL statement can create";

/// (text in Squadron's error, why).
const GAPS: &[(&str, &str)] = &[
    (
        "cannot run on workers yet",
        "an operator Squadron cannot yet send to workers (no encoding): refused with UNIMPLEMENTED",
    ),
    (
        "distributing PiecewiseMergeJoinExec",
        "an operator Squadron cannot yet send to workers (no encoding): refused with UNIMPLEMENTED",
    ),
    (
        "is a server setting a client cannot change",
        "a setting that belongs to the operator (memory, caches, catalogs): PERMISSION_DENIED by design",
    ),
    (
        "not supported yet: Prepare",
        "SQL PREPARE/EXECUTE/DEALLOCATE: Squadron has Flight SQL prepared statements instead",
    ),
    (
        "not supported yet: Execute",
        "SQL PREPARE/EXECUTE/DEALLOCATE: Squadron has Flight SQL prepared statements instead",
    ),
    (
        "not supported yet: Deallocate",
        "SQL PREPARE/EXECUTE/DEALLOCATE: Squadron has Flight SQL prepared statements instead",
    ),
    (
        "the statement has parameters",
        "SQL PREPARE/EXECUTE/DEALLOCATE: Squadron has Flight SQL prepared statements instead",
    ),
    (
        "Physical plan does not support logical expression ScalarSubquery",
        "uncorrelated scalar subqueries outside SELECT and WHERE: the coordinator turns them into joins (so stages stay self-contained), which DataFusion does only there",
    ),
    (
        "unordered result: the same rows in another order",
        "a query without ORDER BY answered with the same rows in another order: SQL gives such results no order, and Squadron's follows which task answers first",
    ),
    (
        "decoded column: the same values, sent decoded",
        "a dictionary or run-end encoded result column reaches clients decoded (as Flight encoders send it), so its type letter is its values' type, not `?`",
    ),
    (
        "there is no catalog \"my_catalog\"",
        RUNNER_REGISTERED,
    ),
    (
        "has no schema \"my_schema\"",
        RUNNER_REGISTERED,
    ),
    (
        "has no schema \"strict_schema\"",
        RUNNER_REGISTERED,
    ),
    (
        "Squadron's own defaults:",
        "SHOW ALL lists the settings Squadron plans with on purpose (dynamic filters off, broadcast thresholds, plain Parquet strings; see `by_design.rs`)",
    ),
    (
        "plain Parquet types:",
        "Squadron reads Parquet strings and binaries as the plain types the file holds, not as views (views ship badly between processes; many clients cannot read them)",
    ),
    (
        "a LIMIT without ORDER BY read other rows",
        "which rows a LIMIT without ORDER BY reads is unspecified (Squadron's are the first task's to answer), and an expression overflowed on one that single-node DataFusion did not read",
    ),
    (
        "DataFusion's sort key substitution",
        "a DataFusion 55 bug (apache/datafusion#20194, fixed for in-memory tables only): single-node DataFusion fails the same statement over Parquet files with nullable columns, which Squadron's created tables are",
    ),
    (
        "the system schema listed:",
        "catalog listings include Squadron's own `system` schema (`system.workers`, `system.queries`)",
    ),
    (
        "a dictionary of dictionaries cannot be stored",
        "created tables are stored as files, and no file format holds a dictionary of dictionaries",
    ),
    (
        "writing Parquet: NYI",
        "created tables are stored as Parquet, which cannot hold every Arrow type (intervals)",
    ),
];

/// The known gap `difference` (the runner's message) falls under.
pub fn known_gap(difference: &str) -> Option<&'static str> {
    GAPS.iter()
        .find(|(pattern, _)| difference.contains(pattern))
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_recognised_by_their_error_and_nothing_else_is() {
        let refused = "statement failed: DataFusion error: datafusion.runtime.memory_limit is a \
                       server setting a client cannot change";
        assert!(known_gap(refused).is_some());
        assert!(known_gap("query result mismatch: [Diff] -1 +2").is_none());
    }
}
