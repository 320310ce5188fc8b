//! The planning session: DataFusion's, with Squadron's rules in their
//! places, and the settings a plan split over processes needs.

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use squadron_exec::session_names::session_name_functions;

use crate::current_user::current_user_functions;
use squadron_exec::single_row::scalar_subquery_value;

use crate::file_group_partitions::PairedInputsHashRouted;
use crate::filter_pushdown_fence::with_fenced_filter_pushdown;
use crate::float_top_k::NoTopKAggregationOverFloats;
use crate::key_range_splits::KeyRangeSplitPlanner;
use crate::nan_safe_pruning::NanSafePruning;
use crate::nulled_constants::NulledConstantsUnordered;
use crate::one_partition::NoShuffleAfterOnePartition;
use crate::projection_pushdown_fence::with_fenced_projection_pushdown;
use crate::pruned_scan_ranges::PrunedScanRanges;
use crate::scalar_subquery::CheckedScalarSubqueries;
use crate::statistics_bounds::FileStatisticsAsBounds;

/// Largest estimated build side a join broadcasts to every task.
pub const BROADCAST_BUILD_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Most estimated build rows a join broadcasts to every task.
pub const BROADCAST_BUILD_MAX_ROWS: usize = 1_000_000;

/// The coordinator's context: DataFusion's, with the rule that keeps scalar
/// subqueries' one-row check ahead of DataFusion's own rewrites, the
/// function that check calls, file statistics taken as bounds
/// (`planner::statistics_bounds`), joins of file-grouped inputs hashed
/// as their partners are (`planner::file_group_partitions`), inner joins
/// ordered by statistics (`planner::join_order`), inputs split by key
/// range where their files allow (`planner::key_range_splits`), and
/// filters pushed down only where column names are unambiguous
/// (`planner::filter_pushdown_fence`).
pub fn planning_context(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionContext {
    let mut rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> =
        vec![Arc::new(CheckedScalarSubqueries)];
    rules.extend(Optimizer::new().rules);
    let mut physical_rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> = vec![
        Arc::new(FileStatisticsAsBounds),
        // Before DataFusion's sort rules take a column for constant.
        Arc::new(NulledConstantsUnordered),
    ];
    // DataFusion's filter pushdown remaps by column name: fenced off nodes
    // whose output repeats one (`filter_pushdown_fence`).
    physical_rules.extend(with_fenced_projection_pushdown(
        with_fenced_filter_pushdown(PhysicalOptimizer::new().rules),
    ));
    // Right after DataFusion's top-k of groups, which panics on NaN.
    if let Some(top_k) = physical_rules
        .iter()
        .position(|rule| rule.name() == "LimitAggregation")
    {
        physical_rules.insert(top_k + 1, Arc::new(NoTopKAggregationOverFloats));
    }
    // After DataFusion's distribution rules, before its final sanity check.
    let sanity_check = physical_rules
        .iter()
        .position(|rule| rule.name() == "SanityCheckPlan")
        .unwrap_or(physical_rules.len());
    physical_rules.insert(sanity_check, Arc::new(PairedInputsHashRouted));
    physical_rules.insert(sanity_check, Arc::new(NoShuffleAfterOnePartition));
    // Before anything prunes by a scan's predicate: NaN hidden from it.
    physical_rules.insert(sanity_check + 2, Arc::new(NanSafePruning));
    // Last: it sees the partitioning the rules above settled on.
    let footers = runtime.cache_manager.get_file_metadata_cache();
    physical_rules.insert(sanity_check + 3, Arc::new(PrunedScanRanges::new(footers)));
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_optimizer_rules(rules)
        .with_physical_optimizer_rules(physical_rules)
        .with_query_planner(Arc::new(KeyRangeSplitPlanner))
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_udf(scalar_subquery_value().as_ref().clone());
    for udf in session_name_functions()
        .into_iter()
        .chain(current_user_functions())
    {
        ctx.register_udf(udf.as_ref().clone());
    }
    ctx
}

/// The planning session: DataFusion's defaults, less what a plan split over
/// processes cannot honour.
pub fn coordinator_session_config(partitions: usize) -> SessionConfig {
    let mut config = SessionConfig::new()
        .with_target_partitions(partitions)
        .with_information_schema(true);
    let optimizer = &mut config.options_mut().optimizer;
    // Dynamic filters are filled in at run time by one operator (a join's
    // build side, a TopK) for another; once the two run in different tasks
    // the filter can never arrive.
    optimizer.enable_dynamic_filter_pushdown = false;
    optimizer.enable_join_dynamic_filter_pushdown = false;
    optimizer.enable_topk_dynamic_filter_pushdown = false;
    optimizer.enable_aggregate_dynamic_filter_pushdown = false;
    // A ScalarSubqueryExec feeds its subquery results to expressions in
    // other operators, which a stage cut can separate from it; rewriting
    // uncorrelated scalar subqueries to joins keeps every stage self-contained.
    optimizer.enable_physical_uncorrelated_scalar_subquery = false;
    // A collected (broadcast) build side is copied to every task, but a
    // partitioned join ships both inputs through a shuffle, encoding and
    // decoding every probe row; across processes that costs far more than
    // in one, so builds of up to 16 MiB / 1 M rows are broadcast rather
    // than the single-node 1 MiB / 128 K (TPC-H SF1 total 1.34-1.38 ->
    // 1.22-1.28 of DataFusion, q5 1.65 -> 1.0-1.07; docs/history/benchmarks-2026-12.md).
    // A round-robin repartition spreads a one-partition input (a small
    // file, a global aggregate, a nested-loop join) over more partitions.
    // In one process that is a cheap hand-off; here it is a stage boundary,
    // a shuffle over the network for rows one task already holds.
    optimizer.enable_round_robin_repartition = false;
    optimizer.hash_join_single_partition_threshold = BROADCAST_BUILD_MAX_BYTES;
    optimizer.hash_join_single_partition_threshold_rows = BROADCAST_BUILD_MAX_ROWS;
    // Parquet strings as Utf8, not Utf8View: a slice or `take` of a view
    // array keeps every data buffer of the original, and Arrow IPC ships
    // them whole, so a shuffle or a client stream of view columns carried
    // several times the data; many clients cannot read view types either.
    config
        .options_mut()
        .execution
        .parquet
        .schema_force_view_types = false;
    config
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::execution::runtime_env::RuntimeEnv;
    use squadron_exec::rewrites::{of_phase, Phase};

    use super::*;

    /// The rules the planning session adds to DataFusion's (or puts in
    /// place of one of them) are the ones the list of every rewrite
    /// (`squadron_exec::rewrites`) names, in its order.
    #[test]
    fn the_added_rules_are_the_listed_ones() {
        let ctx = planning_context(
            coordinator_session_config(2),
            Arc::new(RuntimeEnv::default()),
        );
        let state = ctx.state();
        let datafusion_logical: HashSet<String> = Optimizer::new()
            .rules
            .iter()
            .map(|rule| rule.name().to_string())
            .collect();
        let added_logical: Vec<&str> = state
            .optimizers()
            .iter()
            .map(|rule| rule.name())
            .filter(|name| !datafusion_logical.contains(*name))
            .collect();
        let listed: Vec<&str> = of_phase(Phase::LogicalRule).map(|r| r.name).collect();
        assert_eq!(added_logical, listed);

        // The fenced FilterPushdown keeps DataFusion's name (so EXPLAIN
        // VERBOSE reads alike): it is listed, and found by its place.
        let datafusion_physical: HashSet<String> = PhysicalOptimizer::new()
            .rules
            .iter()
            .map(|rule| rule.name().to_string())
            .collect();
        let names: Vec<&str> = state
            .physical_optimizers()
            .iter()
            .map(|rule| rule.name())
            .collect();
        let listed: Vec<&str> = of_phase(Phase::PhysicalRule).map(|r| r.name).collect();
        let in_list_order: Vec<&str> = names
            .iter()
            .copied()
            .filter(|name| listed.contains(name) || !datafusion_physical.contains(*name))
            .collect();
        // DataFusion runs FilterPushdown twice (pre and post optimization):
        // the first is the fenced one, the second a task's (not planned here).
        let mut seen = HashSet::new();
        let in_list_order: Vec<&str> = in_list_order
            .into_iter()
            .filter(|name| seen.insert(*name))
            .collect();
        assert_eq!(in_list_order, listed);
    }
}
