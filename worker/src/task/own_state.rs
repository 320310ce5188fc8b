//! A task's own operator state where its copy of the plan would run a
//! shared operator again.
//!
//! The tasks of a stage on this worker share one decoded plan
//! (`stage_plans`) and each executes its own partition of it, as
//! single-node DataFusion executes the partitions of one plan: an operator
//! keeps state across its partitions (a broadcast join builds once, and a
//! full or right join emits its unmatched build rows once, in the last of
//! its partitions to finish) on the promise that each partition is
//! executed once.
//!
//! Binding a task's stage reads and its per-task rewrites copy the
//! operators above them, and a copy executes its shared inputs again: a
//! broadcast join copied in every task collects its whole build side in
//! every task. Where that build side holds a full join, the second task
//! to run it found its build rows already emitted, by the first, and its
//! answer lost them (fuzzer finding 14). So below a task's own operators a
//! shared operator stays shared only where the task executes just its own
//! partition of it; elsewhere the task gets a fresh copy, state reset. The
//! task's own copies there are reset too: a copy may hold its original's
//! state (finding 16).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    replace_children_if_necessary, ExecutionPlan, ExecutionPlanProperties,
};

/// `task_plan` (a task's copy of its stage's plan, of which it executes
/// one partition) with a fresh copy of every operator of `decoded` (the
/// stage's shared plan) that the task would execute for a partition other
/// than its own.
pub fn own_state_where_run_again(
    task_plan: Arc<dyn ExecutionPlan>,
    decoded: &Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut shared = HashSet::new();
    let _ = decoded.apply(|node| {
        shared.insert(address(node));
        Ok(TreeNodeRecursion::Continue)
    });
    visit(task_plan, true, &shared)
}

/// `node`, one of the task's own operators; `aligned` when the task
/// executes only its own partition of it.
fn visit(
    node: Arc<dyn ExecutionPlan>,
    aligned: bool,
    shared: &HashSet<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if shared.contains(&address(&node)) {
        // The plan's root, uncopied: every task executes its own partition.
        return Ok(node);
    }
    let children = node
        .children()
        .into_iter()
        .enumerate()
        .map(|(index, child)| {
            let child_aligned = aligned && partition_wise(&node, index, child);
            match (shared.contains(&address(child)), child_aligned) {
                (true, true) => Ok(Arc::clone(child)),
                (true, false) => reset_plan_states(Arc::clone(child)),
                (false, _) => visit(Arc::clone(child), child_aligned, shared),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let node = replace_children_if_necessary(node, children)?;
    match aligned {
        true => Ok(node),
        // A copy made through `with_new_children` keeps the original's
        // state (DataFusion's joins hand their build side's once-cell to
        // the copy): every task's copy of a null-aware anti join below a
        // collected build side emitted its unmatched rows from one shared
        // count of finished partitions, in the first task only (finding 16).
        false => node.reset_state(),
    }
}

/// Whether `node` executes partition `p` of its child `index` only for its
/// own partition `p`, the same child partition no other task's copy does.
/// Not so for a merge or repartition (they read every input partition),
/// nor for the collected side of a join.
fn partition_wise(
    node: &Arc<dyn ExecutionPlan>,
    index: usize,
    child: &Arc<dyn ExecutionPlan>,
) -> bool {
    let same_count = child.output_partitioning().partition_count()
        == node.output_partitioning().partition_count();
    let merges = node.is::<CoalescePartitionsExec>()
        || node.is::<SortPreservingMergeExec>()
        || node.is::<RepartitionExec>();
    let collected = index == 0
        && (node.is::<CrossJoinExec>()
            || node.is::<NestedLoopJoinExec>()
            || node
                .downcast_ref::<HashJoinExec>()
                .is_some_and(|join| *join.partition_mode() == PartitionMode::CollectLeft));
    same_count && !merges && !collected
}

fn address(node: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(node) as *const () as usize
}

#[cfg(test)]
#[path = "own_state_tests.rs"]
mod tests;
