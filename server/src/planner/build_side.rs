//! Joins that emit build-side rows at the end must see the whole probe side.
//!
//! A CollectLeft hash join (or a nested-loop join) of type Left, LeftSemi,
//! LeftAnti, LeftMark or Full marks which build rows matched while probing
//! and emits the unmatched (or matched) ones when the *last* probe partition
//! finishes. In one process all probe partitions share that bitmap; split
//! into tasks, each task would hold its own copy and see only part of the
//! probe side. So the probe side of such a join is merged into one
//! partition first: the join then runs as a single task, and the merge
//! becomes an ordinary stage boundary.

use std::sync::Arc;

use datafusion::common::{JoinType, Result};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

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

/// Merges the probe side of `plan` into one partition when it must be.
pub fn gather_probe_side(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !needs_whole_probe_side(&plan) {
        return Ok(plan);
    }
    let children = plan.children();
    let probe = Arc::clone(children[1]);
    if probe.output_partitioning().partition_count() <= 1 {
        return Ok(plan);
    }
    let build = Arc::clone(children[0]);
    let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(probe));
    #[allow(deprecated)] // replace_children needs options we have no use for
    plan.with_new_children(vec![build, merged])
}
