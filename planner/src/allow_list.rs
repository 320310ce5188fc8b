//! Which operators may be split across tasks.
//!
//! Splitting a stage runs each of its output partitions as a separate task
//! in its own plan instance. That is only correct for operators whose
//! partition `p` depends on nothing but what the job graph gives that task:
//! partition `p` of their inputs (or the whole input, for the collected
//! build sides, merges and unions `readers` knows). Operators that share
//! state across partitions in one process (a recursive query's work table,
//! a dynamic filter, an extension we have never seen) would silently lose
//! rows when split. So this is an allow-list: an operator not on it runs
//! with its whole subtree inside one task when it has one output partition,
//! and the query is refused with UNIMPLEMENTED naming it otherwise.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// Operators known to compute partition `p` from what their task is given.
/// `StageReadExec` is ours; the rest are DataFusion's (by `name()`).
const PARTITION_LOCAL: &[&str] = &[
    "AggregateExec",
    "AsyncFuncExec",
    "BoundedWindowAggExec",
    "BufferExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "CrossJoinExec",
    "DataSourceExec",
    "EmptyExec",
    "FilterExec",
    "GlobalLimitExec",
    "HashJoinExec",
    "InterleaveExec",
    "LazyMemoryExec",
    "LocalLimitExec",
    "NestedLoopJoinExec",
    "OrderUnknownExec",
    "PartialSortExec",
    "PartitionedTopKExec",
    "PlaceholderRowExec",
    "ProjectionExec",
    "RepartitionExec",
    "SinkWriteExec",
    "SortExec",
    "SortMergeJoinExec",
    "SortPreservingMergeExec",
    "StageReadExec",
    "TableWriteExec",
    "SymmetricHashJoinExec",
    "UnionExec",
    "UnnestExec",
    "WindowAggExec",
];

/// How the cutter treats one operator.
#[derive(Debug, PartialEq, Eq)]
pub enum Split {
    /// Partition-local: cut below it as usual.
    Allowed,
    /// Not known to be partition-local, but it has one output partition:
    /// it runs with its whole subtree, uncut, inside one task.
    WholeInOneTask,
}

/// Decides how `plan` may be distributed; an error names the operator.
pub fn split_rule(plan: &Arc<dyn ExecutionPlan>) -> Result<Split> {
    // Some names carry a variant: "SortExec(TopK)".
    let name = plan.name().split('(').next().unwrap_or_default();
    if PARTITION_LOCAL.contains(&name) {
        return Ok(Split::Allowed);
    }
    if plan.output_partitioning().partition_count() <= 1 {
        return Ok(Split::WholeInOneTask);
    }
    Err(DataFusionError::NotImplemented(format!(
        "distributing {}: the operator is not known to be partition-local and has {} \
         output partitions (set target_partitions = 1 to run such a query in one task)",
        plan.name(),
        plan.output_partitioning().partition_count()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::{DisplayAs, DisplayFormatType, PlanProperties};
    use std::fmt;

    /// An operator the planner has never heard of.
    #[derive(Debug)]
    struct Mystery(Arc<dyn ExecutionPlan>);

    impl DisplayAs for Mystery {
        fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "MysteryExec")
        }
    }

    impl ExecutionPlan for Mystery {
        fn name(&self) -> &str {
            "MysteryExec"
        }
        fn properties(&self) -> &Arc<PlanProperties> {
            self.0.properties()
        }
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![&self.0]
        }
        fn with_new_children(
            self: Arc<Self>,
            children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            Ok(Arc::new(Mystery(Arc::clone(&children[0]))))
        }
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            )
                -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }
        fn execute(
            &self,
            partition: usize,
            context: Arc<datafusion::execution::TaskContext>,
        ) -> Result<datafusion::physical_plan::SendableRecordBatchStream> {
            self.0.execute(partition, context)
        }
    }

    fn source(partitions: usize) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::empty());
        let empty = EmptyExec::new(schema).with_partitions(partitions);
        Arc::new(empty)
    }

    #[test]
    fn known_operators_are_split() {
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(source(3)));
        assert_eq!(split_rule(&plan).unwrap(), Split::Allowed);
    }

    #[test]
    fn an_unknown_single_partition_operator_runs_whole_in_one_task() {
        let plan: Arc<dyn ExecutionPlan> = Arc::new(Mystery(source(1)));
        assert_eq!(split_rule(&plan).unwrap(), Split::WholeInOneTask);
    }

    #[test]
    fn an_unknown_multi_partition_operator_is_refused_by_name() {
        let plan: Arc<dyn ExecutionPlan> = Arc::new(Mystery(source(4)));
        let err = split_rule(&plan).unwrap_err();
        assert!(matches!(err, DataFusionError::NotImplemented(_)));
        assert!(err.to_string().contains("MysteryExec"), "{err}");
        let graph = crate::build_job_graph(plan, &Default::default()).unwrap_err();
        assert!(graph.to_string().contains("MysteryExec"), "{graph}");
    }
}
