//! Final aggregates over grouping sets run as if their input had no
//! order: DataFusion 55 would otherwise answer some grouping sets wrong.
//!
//! A grouping column that a filter holds constant (`WHERE k = 2 GROUP BY
//! GROUPING SETS ((s, k), (s))`) is still constant in DataFusion's view
//! of the partial aggregate's output, though the sets without it give it
//! NULL there. The final aggregate above then takes the column as sorted
//! and emits a group as soon as the column changes (`ordering_mode=
//! PartiallySorted`): where rows of one group arrive with rows of another
//! set between them, the group comes out twice and its sums split. In one
//! process the rows happened to arrive in an order that hid it; across a
//! shuffle they did not (fuzzer, seed 12001, query 4990: 7 or 8 rows for
//! 6, in every mode). A final aggregate is rebuilt here over its input
//! with no order or constant known, which makes it `Linear`: always
//! right, at the memory cost of holding its groups to the end.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, InputOrderMode,
    PlanProperties, SendableRecordBatchStream,
};

use super::node_children::one_input;

/// The name DataFusion gives the grouping set id column a partial
/// aggregate over grouping sets adds to its groups.
const GROUPING_ID: &str = "__grouping_id";

/// `plan` with each final aggregate over grouping sets that DataFusion
/// would run as sorted rebuilt to run `Linear`.
pub fn grouping_sets_unordered(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if !plan.exists(|node| Ok(over_grouping_sets_sorted(node)))? {
        return Ok(plan);
    }
    plan.transform_up(|node| {
        if !over_grouping_sets_sorted(&node) {
            return Ok(Transformed::no(node));
        }
        let input = Arc::clone(node.children()[0]);
        let unordered: Arc<dyn ExecutionPlan> = Arc::new(OrderUnknownExec::new(input));
        #[allow(deprecated)] // replace_children needs options we have no use for
        let rebuilt = node.with_new_children(vec![unordered])?;
        Ok(Transformed::yes(rebuilt))
    })
    .map(|t| t.data)
}

/// A final aggregate whose groups include a grouping set id, run as
/// (partly) sorted.
fn over_grouping_sets_sorted(node: &Arc<dyn ExecutionPlan>) -> bool {
    let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
        return false;
    };
    let finals = matches!(
        aggregate.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    );
    finals
        && *aggregate.input_order_mode() != InputOrderMode::Linear
        && aggregate
            .group_expr()
            .expr()
            .iter()
            .any(|(_, name)| name == GROUPING_ID)
}

/// Its input's rows as they are, with nothing known of their order or
/// constants (its partitioning is kept).
#[derive(Debug)]
pub struct OrderUnknownExec {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl OrderUnknownExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            input.output_partitioning().clone(),
            input.pipeline_behavior(),
            input.boundedness(),
        );
        Self {
            input,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for OrderUnknownExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "OrderUnknownExec")
    }
}

impl ExecutionPlan for OrderUnknownExec {
    fn name(&self) -> &str {
        "OrderUnknownExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
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

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(one_input(
            children,
            "OrderUnknownExec",
        )?)))
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
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::SessionContext;

    use super::*;

    /// `k` held constant by the filter, and NULL in the sets without it.
    const SQL: &str = "SELECT s, k, count(*) AS n FROM \
        (SELECT value % 3 AS s, CAST(2 AS BIGINT) AS k FROM generate_series(1, 300)) t \
        WHERE k = 2 GROUP BY GROUPING SETS ((s, k), (s), ())";

    #[tokio::test]
    async fn a_final_aggregate_over_grouping_sets_runs_linear() {
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_target_partitions(3),
        );
        let plan = ctx
            .sql(SQL)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        // What DataFusion plans: the final aggregate taken as sorted.
        assert!(shown.contains("ordering_mode=PartiallySorted"), "{shown}");
        let repaired = grouping_sets_unordered(plan).unwrap();
        let shown = displayable(repaired.as_ref()).indent(true).to_string();
        assert!(!shown.contains("ordering_mode="), "{shown}");
        assert!(shown.contains("OrderUnknownExec"), "{shown}");
        let rows: usize = collect(repaired, ctx.task_ctx())
            .await
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum();
        // 3 values of s with k, 3 without, and the empty set.
        assert_eq!(rows, 7);
    }

    #[tokio::test]
    async fn other_aggregates_are_left_as_planned() {
        let ctx = SessionContext::new();
        let sql = "SELECT value % 3 AS s, count(*) FROM generate_series(1, 30) GROUP BY value % 3";
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let repaired = grouping_sets_unordered(Arc::clone(&plan)).unwrap();
        assert!(Arc::ptr_eq(&plan, &repaired));
    }
}
