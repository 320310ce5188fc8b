//! Which consumer tasks read each merge-mode input, and so how many
//! channels its producer stage writes.
//!
//! Task `t` of a stage executes partition `t` of the stage plan. Walking the
//! plan from the root, we track which tasks execute each partition of each
//! operator: most operators pass partition `p` to partition `p` of their
//! input; a union splits its partitions among its inputs; a merge, and the
//! build side of a collected join, are executed whole by every task that
//! executes them. A merge read then knows its readers: one reader means a
//! single output channel, several mean every upstream task broadcasts its
//! output, one channel per reader. A channel nobody reads would fill up and
//! stall its producer, so there is never one.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{internal_err, Result};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use squadron_exec::plan::StageReadExec;
use squadron_proto::v1::ReadMode;

use super::job_graph::{Stage, StageOutput};

/// Sets the readers of every merge read, and the channel count of the
/// stages they read. A stage read by several consumer stages (a build side
/// two joins share) writes one range of channels per consumer, in stage
/// order.
pub fn assign_readers(stages: &mut [Stage]) -> Result<()> {
    let mut channels: BTreeMap<u32, u32> = BTreeMap::new();
    for stage in stages.iter_mut() {
        // What the stage's tasks execute.
        let root = Arc::clone(stage.task_plan());
        let executed_by: Vec<Vec<u32>> = (0..stage.tasks as u32).map(|t| vec![t]).collect();
        let mut readers = vec![];
        collect(&root, &executed_by, &mut readers)?;
        if readers.is_empty() {
            continue;
        }
        // Each read its own range, also two reads of one input in this
        // stage (a shared build side read by two joins the stage runs).
        let mut reads = vec![];
        for (input, tasks) in readers {
            let next = channels.entry(input).or_insert(0);
            let first = *next;
            *next += tasks.len().max(1) as u32;
            reads.push((input, tasks, first));
        }
        stage.plan = with_readers(Arc::clone(&stage.plan), reads)?;
    }
    for (input, channels) in channels {
        stages[input as usize].set_output(StageOutput::Broadcast {
            channels: channels as usize,
        })?;
    }
    Ok(())
}

/// The merge reads under `plan`, in the order of the plan's leaves, with
/// the tasks that execute each.
fn collect(
    plan: &Arc<dyn ExecutionPlan>,
    executed_by: &[Vec<u32>],
    readers: &mut Vec<(u32, Vec<u32>)>,
) -> Result<()> {
    let everyone = union_of(executed_by);
    if let Some(read) = plan.downcast_ref::<StageReadExec>() {
        if read.mode() == ReadMode::Merge {
            readers.push((read.stage_id(), everyone));
        }
        return Ok(());
    }
    let children = plan.children();
    let mut offset = 0;
    for (i, child) in children.iter().enumerate() {
        let n = child.output_partitioning().partition_count();
        let child_executed_by: Vec<Vec<u32>> = if executed_whole(plan, i) {
            vec![everyone.clone(); n]
        } else if plan.is::<UnionExec>() {
            (offset..offset + n)
                .map(|p| executed_by.get(p).cloned().unwrap_or_default())
                .collect()
        } else if n == executed_by.len() {
            executed_by.to_vec()
        } else {
            // An operator that maps partitions in a way we do not know:
            // assume every task may execute every input partition.
            vec![everyone.clone(); n]
        };
        offset += n;
        collect(child, &child_executed_by, readers)?;
    }
    Ok(())
}

/// Whether each task that executes `plan` executes its input `child` whole.
fn executed_whole(plan: &Arc<dyn ExecutionPlan>, child: usize) -> bool {
    if plan.is::<CoalescePartitionsExec>() || plan.is::<SortPreservingMergeExec>() {
        return true;
    }
    let collected_build_side = match plan.downcast_ref::<HashJoinExec>() {
        Some(join) => *join.partition_mode() == PartitionMode::CollectLeft,
        None => plan.is::<NestedLoopJoinExec>() || plan.is::<CrossJoinExec>(),
    };
    collected_build_side && child == 0
}

fn union_of(sets: &[Vec<u32>]) -> Vec<u32> {
    let mut all: Vec<u32> = sets.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The plan with each merge read given its readers and first channel:
/// `reads` in the order of the plan's leaves (`collect`), which a
/// post-order walk meets in the same order.
fn with_readers(
    plan: Arc<dyn ExecutionPlan>,
    reads: Vec<(u32, Vec<u32>, u32)>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut reads = reads.into_iter();
    plan.transform_up(|node| {
        let Some(read) = node.downcast_ref::<StageReadExec>() else {
            return Ok(Transformed::no(node));
        };
        if read.mode() != ReadMode::Merge {
            return Ok(Transformed::no(node));
        }
        match reads.next() {
            Some((stage, tasks, first)) if stage == read.stage_id() => {
                let read: Arc<dyn ExecutionPlan> = Arc::new(read.with_readers(tasks, first));
                Ok(Transformed::yes(read))
            }
            _ => internal_err!("merge reads met out of order"),
        }
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build_job_graph;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion::datasource::memory::MemorySourceConfig;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    fn source(partitions: usize) -> Arc<dyn ExecutionPlan> {
        MemorySourceConfig::try_new_exec(&vec![vec![]; partitions], schema(), None).unwrap()
    }

    fn merge_reads_of(stage: &Stage) -> Vec<(u32, Vec<u32>)> {
        let mut found = vec![];
        let executed_by: Vec<Vec<u32>> = (0..stage.tasks as u32).map(|t| vec![t]).collect();
        collect(&stage.plan, &executed_by, &mut found).unwrap();
        found
    }

    fn merge_read_of(stage: &Stage) -> Vec<u32> {
        merge_reads_of(stage).remove(0).1
    }

    /// One merge read twice by one stage (a build side two joins of the
    /// stage share): each read takes channels of its own.
    #[test]
    fn two_reads_of_one_merge_in_one_stage_take_their_own_channels() {
        let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source(4)));
        let plan = UnionExec::try_new(vec![Arc::clone(&merged), merged]).unwrap();
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        let final_stage = graph.final_stage();
        assert_eq!(merge_reads_of(final_stage).len(), 2, "{graph}");
        assert_eq!(
            graph.stages[0].output(),
            StageOutput::Broadcast { channels: 2 }
        );
        let shown = graph.to_string();
        assert!(
            shown.contains("first_channel=1") || shown.contains("readers=[1]"),
            "{shown}"
        );
    }

    #[test]
    fn a_merge_under_a_union_is_read_by_the_one_task_executing_it() {
        // Union partitions: 0..3 from the left input, 3 from the merge.
        let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source(4)));
        let plan = UnionExec::try_new(vec![source(3), merged]).unwrap();
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        let final_stage = graph.final_stage();
        assert_eq!(final_stage.tasks, 4);
        assert_eq!(merge_read_of(final_stage), vec![3]);
        assert_eq!(
            graph.stages[0].output(),
            StageOutput::Broadcast { channels: 1 }
        );
    }

    #[test]
    fn a_collected_build_side_is_read_by_every_task() {
        let build: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source(4)));
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CrossJoinExec::new(build, source(3)));
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        let final_stage = graph.final_stage();
        assert_eq!(final_stage.tasks, 3);
        assert_eq!(merge_read_of(final_stage), vec![0, 1, 2]);
        assert_eq!(
            graph.stages[0].output(),
            StageOutput::Broadcast { channels: 3 }
        );
    }
}
