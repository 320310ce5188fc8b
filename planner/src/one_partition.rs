//! No shuffle after a one-partition input on the way to the result.
//!
//! DataFusion repartitions a one-partition input (a join against a scalar
//! subquery, a small table) to `target_partitions` so that the operators
//! above it run in parallel: in one process that costs a channel send. For
//! Squadron each such repartition is a stage boundary: one more round of
//! tasks and a cross-process shuffle of rows one task could finish itself
//! (TPC-H q22 ran seven stages, three of them after its one-partition
//! join). On the chain of single-input operators from the result down, this
//! rule takes such repartitions out: one partition satisfies every
//! distribution an operator can require. Below an operator with several
//! inputs (joins, unions) partition counts must agree, so it stops there.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    replace_children_if_necessary, ExecutionPlan, ExecutionPlanProperties,
};
use squadron_exec::squadron_options::SquadronOptions;

#[derive(Debug, Default)]
pub struct NoShuffleAfterOnePartition;

impl PhysicalOptimizerRule for NoShuffleAfterOnePartition {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !SquadronOptions::of(config).one_partition_tails {
            return Ok(plan);
        }
        without_one_partition_shuffles(plan)
    }

    fn name(&self) -> &str {
        "NoShuffleAfterOnePartition"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn without_one_partition_shuffles(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let [child] = plan.children()[..] else {
        return Ok(plan);
    };
    let mut new_child = Arc::clone(child);
    while let Some(input) = one_partition_input(&new_child) {
        new_child = input;
    }
    let new_child = without_one_partition_shuffles(new_child)?;
    if Arc::ptr_eq(&new_child, child) {
        return Ok(plan);
    }
    replace_children_if_necessary(plan, vec![new_child])
}

/// The input of a repartition that reads one partition.
fn one_partition_input(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let repartition = plan.downcast_ref::<RepartitionExec>()?;
    (repartition.input().output_partitioning().partition_count() == 1)
        .then(|| Arc::clone(repartition.input()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// A one-partition table (round-robin repartitions off, as the
    /// coordinator plans) that DataFusion hash-repartitions between the
    /// partial and the final aggregate.
    async fn context() -> SessionContext {
        let mut config = SessionConfig::new().with_target_partitions(4);
        config
            .options_mut()
            .optimizer
            .enable_round_robin_repartition = false;
        let ctx = SessionContext::new_with_config(config);
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values((0..1000).map(|i| i % 7))),
                Arc::new(Int64Array::from_iter_values(0..1000)),
            ],
        )
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        ctx
    }

    const QUERY: &str = "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k ORDER BY k";

    #[tokio::test]
    async fn removes_the_shuffle_and_keeps_the_answer() {
        let ctx = context().await;
        let df = ctx.sql(QUERY).await.unwrap();
        let plan = df.create_physical_plan().await.unwrap();
        let shuffles = |plan: &Arc<dyn ExecutionPlan>| {
            displayable(plan.as_ref())
                .indent(true)
                .to_string()
                .matches("RepartitionExec")
                .count()
        };
        let rewritten = NoShuffleAfterOnePartition
            .optimize(Arc::clone(&plan), &ConfigOptions::default())
            .unwrap();
        assert!(
            shuffles(&rewritten) < shuffles(&plan),
            "{}",
            displayable(rewritten.as_ref()).indent(true)
        );
        let expected = collect(plan, ctx.task_ctx()).await.unwrap();
        let got = collect(rewritten, ctx.task_ctx()).await.unwrap();
        assert_eq!(
            pretty_format_batches(&got).unwrap().to_string(),
            pretty_format_batches(&expected).unwrap().to_string()
        );
    }
}
