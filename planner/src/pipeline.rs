//! The distributed planner, in order: what happens to a plan, from SQL to
//! the job graph the scheduler runs. One list, read top to bottom:
//!
//! 1. **The planning session's rules** (`context.rs`): DataFusion's logical
//!    and physical optimizers with Squadron's rules in their places:
//!    `CheckedScalarSubqueries` first among the logical rules;
//!    `FileStatisticsAsBounds` first among the physical ones; then, after
//!    DataFusion's distribution rules and before its `SanityCheckPlan`,
//!    `PairedInputsHashRouted`, `NoShuffleAfterOnePartition` and
//!    `PrunedScanRanges`. DataFusion's `EXPLAIN VERBOSE` shows the plan after
//!    each of them. The session's query planner orders inner joins first
//!    (`join_order`) and, on DataFusion's optimized plan, splits joins and
//!    aggregates on a key the files are ordered by (`key_range_splits`).
//! 2. **For clients** (`client_types::for_clients`): answers cast to the
//!    types Flight SQL clients read (a statement's rows; not a write's).
//! 3. **Here or distributed** (`local.rs`, asked by the coordinator's
//!    `runs_here`): a plan that reads no table, or little under
//!    `squadron.coordinator_scan_limit`, runs on the coordinator and stops
//!    here.
//! 4. **The distributed passes** (`DISTRIBUTED_PASSES` below), each a
//!    rewrite of the whole plan, in this order; `EXPLAIN VERBOSE` shows the
//!    plan after each (`distributed_plan after <name>`).
//! 5. **Cutting** (`cut::cut_into_stages`): producer stages at shuffles and
//!    merges, the channels of each stage's readers (`readers`).
//!
//! Steps 4 and 5 keep one invariant, checked here for every pass rather
//! than remembered by each (`volatile`): a volatile expression runs as
//! often as in DataFusion's plan. A pass that would break it is left out
//! for that plan; a cut that would is made again without shared shuffles;
//! a plan no cut keeps it for is refused (`VolatileRefusal`) and runs on
//! the coordinator instead.
//! 6. **Encoding** (`encode::encode_stages`): each stage's plan as bytes
//!    once, sent with every task of the stage.
//!
//! A statement that differs from an earlier one only in its constants skips
//! 1-2 and re-uses its plan (`templates`), pruned again for its constants
//! (`pruned_scan_ranges::prune_scan_ranges`), and goes on from 3.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use squadron_exec::squadron_options::SquadronOptions;

use crate::cut::{cut_into_stages, without_output_merge};
use crate::job_graph::JobGraph;
use crate::reduced_shuffles::reduce_shuffles;
use crate::subset_key_shuffles::merge_subset_key_shuffles;
use crate::volatile::{VolatileEvaluations, VolatileRefusal};

/// A rewrite of a whole plan, under the session's `squadron.*` settings.
pub type PlanRewrite =
    fn(Arc<dyn ExecutionPlan>, &SquadronOptions) -> Result<Arc<dyn ExecutionPlan>>;

/// One rewrite of a whole plan on its way to stages.
pub struct DistributedPass {
    /// As `EXPLAIN VERBOSE` shows it.
    pub name: &'static str,
    pub rewrite: PlanRewrite,
}

/// The passes a distributed plan goes through before it is cut, in order.
/// They apply only across processes: in one process each would cost more
/// than it saves (a shared build side would run twice, a repartition that
/// is cheap there becomes a stage boundary here).
pub const DISTRIBUTED_PASSES: &[DistributedPass] = &[
    // The job output merges the final tasks' streams itself.
    DistributedPass {
        name: "WithoutOutputMerge",
        rewrite: |plan, _| without_output_merge(plan),
    },
    // A hash shuffle whose keys a shuffle below already holds is folded
    // into that one: one exchange instead of two (below
    // `squadron.subset_key_max_rows` rows read).
    DistributedPass {
        name: "MergeSubsetKeyShuffles",
        rewrite: |plan, options| {
            let max_rows = usize::try_from(options.subset_key_max_rows).unwrap_or(usize::MAX);
            merge_subset_key_shuffles(plan, max_rows)
        },
    },
    // A selective build side reduces the shuffles below its join
    // (`squadron.reduced_shuffles`).
    DistributedPass {
        name: "ReduceShuffles",
        rewrite: |plan, options| match options.reduced_shuffles {
            true => reduce_shuffles(plan),
            false => Ok(plan),
        },
    },
];

/// Cuts `plan` into a job graph: the distributed passes, then the cut.
pub fn build_job_graph(
    plan: Arc<dyn ExecutionPlan>,
    options: &SquadronOptions,
) -> Result<JobGraph> {
    distribute(plan, options, None)
}

/// `build_job_graph`, with the plan after each pass, named as `EXPLAIN
/// VERBOSE` shows it.
pub fn build_job_graph_verbose(
    plan: Arc<dyn ExecutionPlan>,
    options: &SquadronOptions,
) -> Result<(JobGraph, Vec<(String, String)>)> {
    let mut steps = vec![];
    let graph = distribute(plan, options, Some(&mut steps))?;
    Ok((graph, steps))
}

/// The passes and the cut, each result kept only where it evaluates every
/// volatile expression as often as `plan` does (`volatile`): a pass that
/// would not is left out for this plan, and the cut shares no identical
/// shuffles. `steps` receives the plan after each pass.
fn distribute(
    plan: Arc<dyn ExecutionPlan>,
    options: &SquadronOptions,
    mut steps: Option<&mut Vec<(String, String)>>,
) -> Result<JobGraph> {
    let volatile = VolatileEvaluations::of_plan(&plan)?;
    let keeps = |plan: &Arc<dyn ExecutionPlan>| -> Result<bool> {
        Ok(volatile.is_empty() || VolatileEvaluations::of_plan(plan)? == volatile)
    };
    let mut plan = plan;
    for pass in DISTRIBUTED_PASSES {
        let rewritten = (pass.rewrite)(Arc::clone(&plan), options)?;
        let mut name = format!("distributed_plan after {}", pass.name);
        if keeps(&rewritten)? {
            plan = rewritten;
        } else {
            name.push_str(LEFT_OUT);
        }
        if let Some(steps) = steps.as_deref_mut() {
            let shown = displayable(plan.as_ref()).indent(true).to_string();
            steps.push((name, shown));
        }
    }
    let graph = cut_into_stages(Arc::clone(&plan), options.shared_shuffles)?;
    if volatile.is_empty() || VolatileEvaluations::of_graph(&graph)? == volatile {
        return Ok(graph);
    }
    let graph = cut_into_stages(plan, false)?;
    let cut = VolatileEvaluations::of_graph(&graph)?;
    if cut == volatile {
        return Ok(graph);
    }
    Err(VolatileRefusal {
        planned: volatile.to_string(),
        distributed: cut.to_string(),
    }
    .into())
}

/// How `EXPLAIN VERBOSE` names a pass left out for a plan.
const LEFT_OUT: &str = " (left out: it would change how often a volatile expression runs)";

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use squadron_exec::rewrites::{of_phase, Phase};

    use crate::test_tables::{key_value_table, physical_plan};

    /// The list of every rewrite (`squadron_exec::rewrites`) names these
    /// passes, in this order.
    #[test]
    fn the_passes_run_in_their_listed_order() {
        let names: Vec<&str> = DISTRIBUTED_PASSES.iter().map(|p| p.name).collect();
        let listed: Vec<&str> = of_phase(Phase::DistributedPass).map(|r| r.name).collect();
        assert_eq!(names, listed);
    }

    async fn aggregate_plan() -> Arc<dyn ExecutionPlan> {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let rows: Vec<_> = (0..20).map(|i| (Some(i % 6), i)).collect();
        ctx.register_table("t", Arc::new(key_value_table(&rows, 2)))
            .unwrap();
        physical_plan(&ctx, "SELECT k, count(*) FROM t GROUP BY k").await
    }

    #[tokio::test]
    async fn the_output_merge_pass_leaves_the_merge_to_the_job_output() {
        let plan = aggregate_plan().await;
        let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(plan));
        let rewritten = without_output_merge(Arc::clone(&merged)).unwrap();
        assert!(!rewritten.is::<CoalescePartitionsExec>());
        // With a limit the merge is the limit, and stays.
        let limited: Arc<dyn ExecutionPlan> =
            Arc::new(CoalescePartitionsExec::new(rewritten).with_fetch(Some(3)));
        let kept = without_output_merge(Arc::clone(&limited)).unwrap();
        assert!(Arc::ptr_eq(&kept, &limited));
    }

    #[tokio::test]
    async fn verbose_shows_the_plan_after_every_pass_and_cuts_the_same_graph() {
        let plan = aggregate_plan().await;
        let (graph, steps) =
            build_job_graph_verbose(Arc::clone(&plan), &SquadronOptions::default()).unwrap();
        let names: Vec<&str> = steps.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            DISTRIBUTED_PASSES
                .iter()
                .map(|p| format!("distributed_plan after {}", p.name))
                .collect::<Vec<_>>()
        );
        assert!(steps
            .iter()
            .all(|(_, shown)| shown.contains("AggregateExec")));
        let plain = build_job_graph(plan, &SquadronOptions::default()).unwrap();
        assert_eq!(graph.to_string(), plain.to_string());
    }
}
