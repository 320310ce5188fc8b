//! A node that stops DataFusion's pushdown rules at a point of a plan,
//! present only while such a rule runs (`filter_pushdown_fence`,
//! `projection_pushdown_fence`): where DataFusion 55 remaps expressions
//! by column name or into the wrong index space, the rule is run with a
//! fence there and the fences are taken out after.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use squadron_exec::plan::node_children::one_input;

/// `run` over `plan` with a fence above every node `fence_above` picks,
/// then without the fences.
pub fn fenced(
    plan: Arc<dyn ExecutionPlan>,
    fence_above: fn(&Arc<dyn ExecutionPlan>) -> bool,
    run: impl FnOnce(Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if !plan.exists(|node| Ok(fence_above(node)))? {
        return run(plan);
    }
    let fenced = plan
        .transform_up(|node| {
            if fence_above(&node) {
                Ok(Transformed::yes(Arc::new(Fence { input: node }) as _))
            } else {
                Ok(Transformed::no(node))
            }
        })?
        .data;
    run(fenced)?
        .transform_up(|node| match node.downcast_ref::<Fence>() {
            Some(fence) => Ok(Transformed::yes(Arc::clone(&fence.input))),
            None => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
}

/// Accepts no filter and swaps with no projection from above: what
/// DataFusion gives an operator that implements neither.
#[derive(Debug)]
struct Fence {
    input: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for Fence {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "PushdownFence")
    }
}

impl ExecutionPlan for Fence {
    fn name(&self) -> &str {
        "PushdownFence"
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

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_input(children, "PushdownFence")?;
        Ok(Arc::new(Fence { input }))
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
