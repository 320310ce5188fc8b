//! Joins that emit build-side rows at the end must see the whole probe side.
//!
//! A CollectLeft hash join (or a nested-loop join) of type Left, LeftSemi,
//! LeftAnti, LeftMark or Full marks which build rows matched while probing
//! and emits the unmatched (or matched) ones when the *last* probe partition
//! finishes. In one process all probe partitions share that bitmap; split
//! into tasks, each task would hold its own copy and see only part of the
//! probe side. So such a hash join becomes a *partitioned* one: both sides
//! hash-shuffled on the join keys, so each task owns every probe row that
//! can match its build rows and its bitmap is complete for them. (Merging
//! the probe side into one task, the earlier fix, ran the join on one core
//! and shipped a whole fact table to it: TPC-H q21 1.7× single node.)
//! Joins without keys (nested loop) and null-aware anti joins (`NOT IN`,
//! which must see every probe NULL) still merge their probe side into one
//! partition: the join then runs as a single task.

use std::sync::Arc;

use datafusion::common::{JoinType, Result};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
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

/// Rewrites `plan` when it is a join that must see its whole probe side:
/// partitioned on its keys when it has any, else with the probe side
/// merged into one partition.
pub fn gather_probe_side(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !needs_whole_probe_side(&plan) {
        return Ok(plan);
    }
    let children = plan.children();
    let probe = Arc::clone(children[1]);
    let partitions = probe.output_partitioning().partition_count();
    if partitions <= 1 {
        return Ok(plan);
    }
    let build = Arc::clone(children[0]);
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        if !join.null_aware && !join.on().is_empty() {
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
            return join
                .builder()
                .with_partition_mode(PartitionMode::Partitioned)
                .with_new_children(vec![build, probe])?
                .build_exec();
        }
    }
    let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(probe));
    #[allow(deprecated)] // replace_children needs options we have no use for
    plan.with_new_children(vec![build, merged])
}
