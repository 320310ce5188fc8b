//! Joins that emit build-side rows at the end must see the whole probe side.
//!
//! A CollectLeft hash join (or a nested-loop join) of type Left, LeftSemi,
//! LeftAnti, LeftMark or Full marks which build rows matched while probing
//! and emits the unmatched (or matched) ones when the *last* probe partition
//! finishes. In one process all probe partitions share that bitmap; split
//! into tasks, each task would hold its own copy and see only part of the
//! probe side. Three ways out, cheapest first:
//!
//! - **Reduce the probe side** (LeftSemi, LeftAnti, LeftMark with keys:
//!   `EXISTS` / `NOT EXISTS`): every task of the probe side first keeps
//!   only its probe rows that match some build row (a RightSemi join on the
//!   broadcast build side: it streams, no bitmap), and the join itself
//!   runs once over those rows merged. Probe rows that match nothing cannot
//!   change a semi, anti or mark join's answer, so it is the same answer.
//!   Without a join filter only the keys matter, so each task sends its
//!   distinct matching keys: at most one row per build key whatever the
//!   size of the probe side. The build side is computed once and read by
//!   both joins. TPC-H q4, q21 and q22 probe a fact table with a small
//!   build side: this ships the few matching rows instead of shuffling the
//!   whole fact table.
//! - **Partition** (Left and Full joins with keys, and the rest): both
//!   sides hash-shuffled on the join keys, so each task owns every probe
//!   row that can match its build rows and its bitmap is complete for them.
//!   A left join's probe side is usually a fact table whose every row
//!   matches (`customer LEFT JOIN orders`): reducing it would funnel the
//!   whole table into one task.
//! - **Merge** (joins without keys, null-aware anti joins, which must see
//!   every probe NULL): the probe side merged into one partition, the join
//!   run as a single task.

use std::sync::Arc;

use datafusion::common::{JoinType, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::utils::JoinOn;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

fn emits_build_rows_at_end(join_type: &JoinType) -> bool {
    matches!(
        join_type,
        JoinType::Left
            | JoinType::LeftAnti
            | JoinType::LeftSemi
            | JoinType::LeftMark
            | JoinType::Full
    )
}

fn needs_whole_probe_side(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return *join.partition_mode() == PartitionMode::CollectLeft
            && emits_build_rows_at_end(join.join_type());
    }
    if let Some(join) = plan.downcast_ref::<NestedLoopJoinExec>() {
        return emits_build_rows_at_end(join.join_type());
    }
    false
}

/// The collected build side without its merge: a hash shuffle reads every
/// partition anyway, and a merge first would funnel the build side through
/// one task (a stage and a hop for nothing).
fn unmerged(build: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    match build.downcast_ref::<CoalescePartitionsExec>() {
        Some(merge) if merge.fetch().is_none() => Arc::clone(merge.input()),
        _ => build,
    }
}

/// A join rewritten to see its whole probe side, and the build side it
/// shares between two joins when it did.
pub struct ProbeSide {
    pub plan: Arc<dyn ExecutionPlan>,
    /// Read by both the reducing join and the join itself: cut once, so
    /// it is computed once (see `Cutter`).
    pub shared_build: Option<Arc<dyn ExecutionPlan>>,
}

/// Rewrites `plan` when it is a join that must see its whole probe side:
/// see the module comment for the three ways.
pub fn gather_probe_side(plan: Arc<dyn ExecutionPlan>) -> Result<ProbeSide> {
    let unchanged = |plan| ProbeSide {
        plan,
        shared_build: None,
    };
    if !needs_whole_probe_side(&plan) {
        return Ok(unchanged(plan));
    }
    let children = plan.children();
    let probe = Arc::clone(children[1]);
    let partitions = probe.output_partitioning().partition_count();
    if partitions <= 1 {
        return Ok(unchanged(plan));
    }
    let build = Arc::clone(children[0]);
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        if !join.null_aware && !join.on().is_empty() {
            if reduces_probe_side(join.join_type()) && is_merge(&build) {
                return reduce_probe_side(join, build, probe);
            }
            return partition_both_sides(join, build, probe, partitions).map(unchanged);
        }
    }
    let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(probe));
    #[allow(deprecated)] // replace_children needs options we have no use for
    plan.with_new_children(vec![build, merged]).map(unchanged)
}

/// Join types whose answer only depends on whether a build row has a
/// matching probe row (a left join also emits the probe rows, a full join
/// the unmatched ones too).
fn reduces_probe_side(join_type: &JoinType) -> bool {
    matches!(
        join_type,
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark
    )
}

/// A merge of the build side's partitions: cut as one producer stage, it
/// can feed two consumer stages. (A build side of one partition has no
/// merge to share and would be computed twice: partitioning is used.)
fn is_merge(build: &Arc<dyn ExecutionPlan>) -> bool {
    match build.downcast_ref::<CoalescePartitionsExec>() {
        Some(merge) => merge.fetch().is_none(),
        None => build
            .downcast_ref::<SortPreservingMergeExec>()
            .is_some_and(|merge| merge.fetch().is_none()),
    }
}

/// `join(build, probe)` as `join(build, merge(right_semi(build, probe)))`,
/// or over the distinct matching keys when the join has no filter.
fn reduce_probe_side(
    join: &HashJoinExec,
    build: Arc<dyn ExecutionPlan>,
    probe: Arc<dyn ExecutionPlan>,
) -> Result<ProbeSide> {
    // Same keys, filter and null handling: a probe row is kept exactly
    // when the join would match it to at least one build row.
    let matching = join
        .builder()
        .with_type(JoinType::RightSemi)
        .with_projection(None)
        .with_fetch(None)
        .with_new_children(vec![Arc::clone(&build), probe])?
        .reset_state()
        .recompute_properties()
        .build_exec()?;
    let (matching, on) = match join.filter() {
        Some(_) => (matching, join.on().to_vec()),
        None => matching_keys(join, matching)?,
    };
    let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(matching));
    let plan = join
        .builder()
        .with_on(on)
        .with_new_children(vec![Arc::clone(&build), merged])?
        .reset_state()
        .recompute_properties()
        .build_exec()?;
    Ok(ProbeSide {
        plan,
        shared_build: Some(build),
    })
}

/// The probe keys of `matching`, distinct per task (a partial aggregation:
/// it may pass duplicates through when they are rare, which a semi or anti
/// join does not mind), and the join keys that read them.
fn matching_keys(
    join: &HashJoinExec,
    matching: Arc<dyn ExecutionPlan>,
) -> Result<(Arc<dyn ExecutionPlan>, JoinOn)> {
    let keys: Vec<(PhysicalExprRef, String)> = join
        .on()
        .iter()
        .enumerate()
        .map(|(i, (_, probe_key))| (Arc::clone(probe_key), format!("__squadron_key_{i}")))
        .collect();
    let on = join
        .on()
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(i, ((build_key, _), (_, name)))| {
            let key: PhysicalExprRef = Arc::new(Column::new(name, i));
            (Arc::clone(build_key), key)
        })
        .collect();
    let schema = matching.schema();
    let distinct = AggregateExec::try_new(
        AggregateMode::Partial,
        PhysicalGroupBy::new_single(keys),
        vec![],
        vec![],
        matching,
        schema,
    )?;
    Ok((Arc::new(distinct), on))
}

fn partition_both_sides(
    join: &HashJoinExec,
    build: Arc<dyn ExecutionPlan>,
    probe: Arc<dyn ExecutionPlan>,
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let (build_keys, probe_keys) = join
        .on()
        .iter()
        .map(|(b, p)| (Arc::clone(b), Arc::clone(p)))
        .unzip();
    let build = Arc::new(RepartitionExec::try_new(
        unmerged(build),
        Partitioning::Hash(build_keys, partitions),
    )?);
    let probe = Arc::new(RepartitionExec::try_new(
        probe,
        Partitioning::Hash(probe_keys, partitions),
    )?);
    join.builder()
        .with_partition_mode(PartitionMode::Partitioned)
        .with_new_children(vec![build, probe])?
        .build_exec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};
    use squadron_exec::plan::StageReadExec;

    use crate::job_graph::{Stage, StageOutput};
    use crate::test_tables::{key_value_table, physical_plan, sorted_lines};

    /// A session with tables `b` (build side) and `p` (probe side), two
    /// partitions each.
    fn tables(b: &[(Option<i64>, i64)], p: &[(Option<i64>, i64)]) -> SessionContext {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        ctx.register_table("b", Arc::new(key_value_table(b, 2)))
            .unwrap();
        ctx.register_table("p", Arc::new(key_value_table(p, 2)))
            .unwrap();
        ctx
    }

    #[tokio::test]
    async fn a_reduced_probe_side_gives_the_single_node_answer() {
        let small: Vec<_> = (0..6)
            .map(|i| (Some(i % 4), i))
            .chain([(None, 9)])
            .collect();
        let big: Vec<_> = (0..40)
            .map(|i| (Some(i % 7), i % 5))
            .chain([(None, 1), (None, 2)])
            .collect();
        let ctx = tables(&small, &big);
        let queries = [
            // LeftSemi / LeftAnti with a filter over both sides.
            "SELECT * FROM b WHERE EXISTS (SELECT 1 FROM p WHERE p.k = b.k AND p.v <> b.v)",
            "SELECT * FROM b WHERE NOT EXISTS (SELECT 1 FROM p WHERE p.k = b.k AND p.v > b.v)",
            // Without a filter: the distinct matching keys.
            "SELECT * FROM b WHERE EXISTS (SELECT 1 FROM p WHERE p.k = b.k)",
            "SELECT * FROM b WHERE NOT EXISTS (SELECT 1 FROM p WHERE p.k = b.k)",
            // LeftMark: EXISTS under an OR.
            "SELECT * FROM b WHERE b.v > 4 OR EXISTS (SELECT 1 FROM p WHERE p.k = b.k)",
        ];
        for sql in queries {
            let plan = physical_plan(&ctx, sql).await;
            let expected = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
            let rewritten = plan
                .transform_up(|node| {
                    let side = gather_probe_side(Arc::clone(&node))?;
                    Ok(match side.shared_build {
                        Some(_) => Transformed::yes(side.plan),
                        None => Transformed::no(node),
                    })
                })
                .unwrap()
                .data;
            let shown = displayable(rewritten.as_ref()).indent(true).to_string();
            assert!(shown.contains("join_type=RightSemi"), "{sql}:\n{shown}");
            // Without a join filter only the distinct keys travel.
            let filtered = sql.contains(" AND ");
            assert_eq!(
                shown.contains("as __squadron_key_0]"),
                !filtered,
                "{sql}:\n{shown}"
            );
            let actual = collect(rewritten, ctx.task_ctx()).await.unwrap();
            assert_eq!(
                sorted_lines(&actual),
                sorted_lines(&expected),
                "{sql}:\n{shown}"
            );
        }
    }

    #[tokio::test]
    async fn a_shared_build_side_is_one_stage_read_by_both_joins() {
        let small: Vec<_> = (0..6).map(|i| (Some(i), i)).collect();
        let big: Vec<_> = (0..40).map(|i| (Some(i % 7), i)).collect();
        let ctx = tables(&small, &big);
        let sql = "SELECT * FROM b WHERE NOT EXISTS (SELECT 1 FROM p WHERE p.k = b.k)";
        let plan = physical_plan(&ctx, sql).await;
        let graph = crate::build_job_graph(plan, &Default::default()).unwrap();
        let shown = graph.to_string();
        // The build side: 2 channels for the reducing join's 2 tasks, one
        // for the task of the anti join itself.
        let shared: Vec<_> = graph
            .stages
            .iter()
            .filter(|s| s.output() == StageOutput::Broadcast { channels: 3 })
            .collect();
        assert_eq!(shared.len(), 1, "{shown}");
        let reads = |stage: &Stage| {
            let mut firsts = vec![];
            stage
                .plan
                .apply(|node| {
                    if let Some(read) = node.downcast_ref::<StageReadExec>() {
                        if read.stage_id() as usize == shared[0].id {
                            firsts.push((read.readers().to_vec(), read.first_channel()));
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
                .unwrap();
            firsts
        };
        let mut all: Vec<_> = graph.stages.iter().flat_map(reads).collect();
        all.sort();
        assert_eq!(all, vec![(vec![0], 2), (vec![0, 1], 0)], "{shown}");
    }
}
