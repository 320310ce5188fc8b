//! Plans the coordinator answers itself: those that read no table, and
//! those that read little.
//!
//! `SELECT 1`, `SELECT now()`, a `VALUES` list: their only inputs are
//! constants written in the statement, so there is nothing for a worker to
//! read and sending them out would cost two extra round trips for no work.
//! Anything that scans a table or generates rows (`generate_series`,
//! `range`, which can be made arbitrarily large) goes to the workers.
//!
//! A recursive CTE over constants stays too: its work table holds only
//! rows derived from them. One over a table goes to a worker, where it
//! runs whole inside one task (its work table lives in one process).
//!
//! Catalog views (`information_schema`, hence `SHOW TABLES`, `SHOW
//! COLUMNS`) are streams over the coordinator's catalog: only it has them,
//! and they are small, so they run here too.
//!
//! A query whose only table inputs are Parquet scans that read at most a
//! few row groups, by the footers the coordinator holds (a lookup by a
//! sorted key, a small dimension table), runs here as well: a worker would
//! spend less on the scan than the hops to it and back cost (the plan's
//! encoding and decoding, a task RPC, a stream each way). The limit is the
//! compressed size of the row groups read, every column counted
//! (`--coordinator-scan-limit`; 0 sends every table read to the workers).
//! Reading little is not computing little: a cross join of small tables
//! can run for hours, on the process that plans every client's queries
//! (such a plan over constants runs on the execution runtime,
//! `scheduler::local_run`, so it cannot stall the RPCs, but it shares the
//! cores). So only table-reading plans
//! whose operators each produce at most the rows they consume, at a cost
//! about in proportion, run here (filters, projections, aggregates, sorts,
//! limits, unions, merges); joins, unnesting and windows go to the
//! workers.

use std::cell::OnceCell;
use std::sync::Arc;

use datafusion::datasource::memory::{DataSourceExec, MemorySourceConfig};
use datafusion::datasource::physical_plan::{FileGroup, ParquetSource};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::work_table::WorkTableExec;
use datafusion::physical_plan::ExecutionPlan;

use super::cached_footers::{CachedFooters, ScanPruning, MAX_RANGES_CHECKED};

pub use squadron_exec::squadron_options::DEFAULT_COORDINATOR_SCAN_LIMIT;

/// Whether every input of `plan` is a constant of the statement.
pub fn reads_no_table(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let children = plan.children();
    if children.is_empty() {
        return is_constant(plan);
    }
    children.into_iter().all(reads_no_table)
}

/// Whether `plan` reads at most `limit` bytes of Parquet row groups, by the
/// footers in `footers`, and nothing else but constants. False with a
/// limit of 0.
pub fn reads_little(plan: &Arc<dyn ExecutionPlan>, footers: &CachedFooters, limit: u64) -> bool {
    limit > 0 && parquet_bytes_read(plan, footers, limit).is_some()
}

/// Operators that produce at most the rows they consume, at a cost about
/// in proportion to them.
const IN_PROPORTION: &[&str] = &[
    "AggregateExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "FilterExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "ProjectionExec",
    "RepartitionExec",
    "SortExec",
    "SortPreservingMergeExec",
    "UnionExec",
];

fn in_proportion(plan: &Arc<dyn ExecutionPlan>) -> bool {
    // Some names carry a variant: "SortExec(TopK)".
    let name = plan.name().split('(').next().unwrap_or_default();
    IN_PROPORTION.contains(&name)
}

/// Whether each operator of `plan` produces at most the rows it consumes:
/// its work is bounded by what its leaves hold.
pub fn computes_in_proportion(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let children = plan.children();
    children.is_empty() || (in_proportion(plan) && children.into_iter().all(computes_in_proportion))
}

/// The compressed bytes of the row groups `plan`'s Parquet scans read, if
/// at most `budget`; `None` when they are more (counting stops there, as
/// this runs for every statement), when it reads anything else, what a
/// scan reads is not known, or an operator may compute more than in
/// proportion to what it reads.
fn parquet_bytes_read(
    plan: &Arc<dyn ExecutionPlan>,
    footers: &CachedFooters,
    budget: u64,
) -> Option<u64> {
    let children = plan.children();
    if !children.is_empty() {
        if !in_proportion(plan) {
            return None;
        }
        // Each child's bytes are within what the others left it.
        return children.into_iter().try_fold(0, |read, child| {
            Some(read + parquet_bytes_read(child, footers, budget - read)?)
        });
    }
    if is_constant(plan) {
        return Some(0);
    }
    let (config, parquet) = plan
        .downcast_ref::<DataSourceExec>()?
        .downcast_to_file_source::<ParquetSource>()?;
    if config.file_groups.iter().map(FileGroup::len).sum::<usize>() > MAX_RANGES_CHECKED {
        return None;
    }
    // Built only for ranges whose reads were not found at planning
    // (`PrunedScanRanges` attaches them): building it costs about as much
    // as pruning a range.
    let pruning = OnceCell::new();
    let mut files = config.file_groups.iter().flat_map(|group| group.iter());
    files.try_fold(0, |read, file| {
        let reads = match CachedFooters::known_reads(file) {
            Some(known) => known,
            None => footers.reads(
                file,
                pruning
                    .get_or_init(|| ScanPruning::of(config, parquet))
                    .as_ref(),
            )?,
        };
        let read = read + reads.bytes;
        (read <= budget).then_some(read)
    })
}

/// A leaf whose rows are constants of the statement (or the catalog's).
fn is_constant(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<PlaceholderRowExec>()
        || plan.is::<EmptyExec>()
        || plan.is::<StreamingTableExec>()
        // a recursive query's rows so far: constants, if the rest are
        || plan.is::<WorkTableExec>()
        || plan
            .downcast_ref::<DataSourceExec>()
            .is_some_and(|scan| scan.data_source().is::<MemorySourceConfig>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_tables::{physical_plan as plan, sorted_table};
    use datafusion::prelude::{ParquetReadOptions, SessionContext};

    #[tokio::test]
    async fn constants_stay_and_tables_and_generators_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_information_schema(true),
        );
        ctx.sql(&format!(
            "COPY (SELECT 1 AS a) TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
        ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        for sql in [
            "SELECT 1",
            "SELECT 1 WHERE false",
            "SELECT sum(column1) FROM (VALUES (1), (2)) GROUP BY column1 % 2",
            "SHOW TABLES",
            "SELECT column_name FROM information_schema.columns WHERE table_name = 't'",
        ] {
            assert!(reads_no_table(&plan(&ctx, sql).await), "{sql}");
        }
        for sql in [
            "SELECT a FROM t",
            "SELECT * FROM generate_series(1, 10)",
            "SELECT 1 FROM t UNION ALL SELECT 2",
        ] {
            assert!(!reads_no_table(&plan(&ctx, sql).await), "{sql}");
        }
        // Over constants, but the work is not bounded by them.
        for (sql, bounded) in [
            ("SELECT 1", true),
            (
                "SELECT column1 FROM (VALUES (2), (1)) ORDER BY 1 LIMIT 1",
                true,
            ),
            (
                "SELECT x FROM (VALUES (1), (2)) a(x), (VALUES (3), (4)) b(y) WHERE x < y",
                false,
            ),
            (
                "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r",
                false,
            ),
        ] {
            let plan = plan(&ctx, sql).await;
            assert!(reads_no_table(&plan), "{sql}");
            let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true);
            assert_eq!(computes_in_proportion(&plan), bounded, "{sql}\n{shown}");
        }
    }

    #[tokio::test]
    async fn only_scans_of_a_few_row_groups_read_little() {
        let dir = tempfile::tempdir().unwrap();
        // A planning context: it caches the file's footer.
        let ctx = crate::context::planning_context(
            datafusion::prelude::SessionConfig::new(),
            Arc::new(datafusion::execution::runtime_env::RuntimeEnv::default()),
        );
        let file_size = sorted_table(&ctx, dir.path()).await;
        let footers = CachedFooters::new(ctx.runtime_env().cache_manager.get_file_metadata_cache());
        // Room for two of the eight row groups, not for all of them.
        let limit = file_size / 3;
        for (sql, little) in [
            ("SELECT v FROM t WHERE k = 4321", true),
            ("SELECT k, v FROM t WHERE k > 7500 ORDER BY k", true),
            (
                "SELECT k, v FROM t WHERE k > 7500 ORDER BY v DESC LIMIT 3",
                true,
            ),
            ("SELECT count(*) FROM t WHERE k > 100000", true),
            (
                "SELECT k FROM t WHERE k < 5 UNION ALL SELECT k FROM t WHERE k > 7995",
                true,
            ),
            // Small inputs, but a join may multiply them.
            (
                "SELECT a.v FROM t a JOIN t b ON a.k = b.k WHERE a.k < 10 AND b.k < 10",
                false,
            ),
            ("SELECT a.v FROM t a, t b WHERE a.k = 1 AND b.k < 10", false),
            ("SELECT v FROM t", false),
            ("SELECT v FROM t WHERE v % 7 = 3", false),
            (
                "SELECT k FROM t WHERE k = 1 UNION ALL SELECT value FROM generate_series(1, 3)",
                false,
            ),
        ] {
            let plan = plan(&ctx, sql).await;
            assert_eq!(reads_little(&plan, &footers, limit), little, "{sql}");
            assert!(!reads_little(&plan, &footers, 0), "{sql}: off at 0");
        }
        // A footer the coordinator does not hold is not known to be small.
        let cold = CachedFooters::new(Arc::new(
            datafusion::execution::cache::default_cache::DefaultCache::new(1 << 20),
        ));
        let lookup = plan(&ctx, "SELECT v FROM t WHERE k = 4321").await;
        assert!(!reads_little(&lookup, &cold, limit));
    }
}
