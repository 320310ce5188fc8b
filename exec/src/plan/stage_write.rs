//! The write side of a stage boundary: the root of every stage's plan,
//! saying where its tasks' rows go. With `StageReadExec` below, a stage's
//! plan describes the whole stage, and it travels with the plan.
//!
//! It does not route rows itself: a worker takes the stage's output from
//! it (`StageOutput`) and writes what the plan below produces into that
//! many output channels (`stream::write_output`). Executed in one process
//! it passes its input through.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::repartition::RepartitionExec;

use super::node_children::{one_input, recomputed};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

/// How a stage's tasks split their output into channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageOutput {
    /// Read by the coordinator's job output: one channel per task.
    JobOutput,
    /// The input is the `RepartitionExec` the stage was cut at; rows go to
    /// channels by its partitioning (hash or round robin). `channels` is a
    /// multiple of its partitions: a shuffle that several consumers read
    /// (one subtree planned twice, as TPC-H q15's CTE) writes each
    /// partition `p` to channels `p`, `p + n`, `p + 2n`, … one range of `n`
    /// per consumer.
    Repartition { channels: usize },
    /// Every task's output goes whole to each of `channels` consumer tasks
    /// (one channel, `channels == 1`, when a single task consumes it).
    Broadcast { channels: usize },
}

impl fmt::Display for StageOutput {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            StageOutput::JobOutput => write!(f, "job-output"),
            StageOutput::Repartition { channels } => write!(f, "repartition({channels})"),
            StageOutput::Broadcast { channels: 1 } => write!(f, "single"),
            StageOutput::Broadcast { channels } => write!(f, "broadcast({channels})"),
        }
    }
}

/// The root of a stage's plan: its input, and where its rows go.
#[derive(Debug)]
pub struct StageWriteExec {
    input: Arc<dyn ExecutionPlan>,
    output: StageOutput,
}

impl StageWriteExec {
    /// `input` writing as `output` says; a repartitioning output needs the
    /// `RepartitionExec` it routes by as its input.
    pub fn try_new(input: Arc<dyn ExecutionPlan>, output: StageOutput) -> Result<Self> {
        if let StageOutput::Repartition { channels } = output {
            let Some(repartition) = input.downcast_ref::<RepartitionExec>() else {
                return internal_err!("a repartitioning stage writes a RepartitionExec's rows");
            };
            let partitions = repartition.partitioning().partition_count();
            if partitions == 0 || channels == 0 || !channels.is_multiple_of(partitions) {
                return internal_err!(
                    "a repartition to {partitions} partitions written to {channels} channels"
                );
            }
        }
        Ok(Self { input, output })
    }

    pub fn output(&self) -> StageOutput {
        self.output
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// What each task executes: the input, or for a repartitioning stage
    /// the input of the `RepartitionExec` (its rows are routed by it).
    pub fn task_plan(&self) -> &Arc<dyn ExecutionPlan> {
        match self.output {
            StageOutput::Repartition { .. } => self.input.children()[0],
            _ => &self.input,
        }
    }
}

impl DisplayAs for StageWriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match (self.output, self.input.downcast_ref::<RepartitionExec>()) {
            (StageOutput::Repartition { channels }, Some(repartition))
                if channels > repartition.partitioning().partition_count() =>
            {
                let partitions = repartition.partitioning().partition_count();
                write!(
                    f,
                    "StageWriteExec: output=repartition({partitions}) x{} consumers",
                    channels / partitions
                )
            }
            _ => write!(f, "StageWriteExec: output={}", self.output),
        }
    }
}

impl ExecutionPlan for StageWriteExec {
    fn name(&self) -> &str {
        "StageWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_input(children, "StageWriteExec")?;
        Ok(Arc::new(Self::try_new(input, self.output)?))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        recomputed(self, children)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::Partitioning;

    #[test]
    fn a_repartitioning_write_needs_its_repartition_and_routes_below_it() {
        let empty: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::new(Schema::empty())));
        let repartition: Arc<dyn ExecutionPlan> = Arc::new(
            RepartitionExec::try_new(Arc::clone(&empty), Partitioning::RoundRobinBatch(3)).unwrap(),
        );
        let write = StageWriteExec::try_new(
            Arc::clone(&repartition),
            StageOutput::Repartition { channels: 3 },
        )
        .unwrap();
        assert!(Arc::ptr_eq(write.task_plan(), &empty));
        assert!(StageWriteExec::try_new(
            Arc::clone(&repartition),
            StageOutput::Repartition { channels: 2 }
        )
        .is_err());
        assert!(StageWriteExec::try_new(
            Arc::clone(&empty),
            StageOutput::Repartition { channels: 3 }
        )
        .is_err());
        let broadcast =
            StageWriteExec::try_new(Arc::clone(&empty), StageOutput::Broadcast { channels: 4 })
                .unwrap();
        assert!(Arc::ptr_eq(broadcast.task_plan(), &empty));
        let shown = datafusion::physical_plan::displayable(&broadcast)
            .one_line()
            .to_string();
        assert_eq!(shown.trim(), "StageWriteExec: output=broadcast(4)");
    }

    #[test]
    fn every_output_survives_the_wire() {
        let empty: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::new(Schema::empty())));
        let repartition: Arc<dyn ExecutionPlan> = Arc::new(
            RepartitionExec::try_new(Arc::clone(&empty), Partitioning::RoundRobinBatch(3)).unwrap(),
        );
        let ctx = TaskContext::default();
        for (input, output) in [
            (&empty, StageOutput::JobOutput),
            (&empty, StageOutput::Broadcast { channels: 1 }),
            (&empty, StageOutput::Broadcast { channels: 5 }),
            (&repartition, StageOutput::Repartition { channels: 3 }),
        ] {
            let write = StageWriteExec::try_new(Arc::clone(input), output).unwrap();
            let bytes = crate::plan::encode_plan(Arc::new(write)).unwrap();
            let decoded = crate::plan::decode_plan(&bytes, &ctx).unwrap();
            let decoded = decoded.downcast_ref::<StageWriteExec>().unwrap();
            assert_eq!(decoded.output(), output);
            assert_eq!(decoded.input().name(), input.name());
        }
    }
}
