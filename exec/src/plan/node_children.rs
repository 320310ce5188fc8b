//! What every Squadron plan node with one input does the same way when
//! DataFusion gives it new children.

use std::sync::Arc;

use datafusion::common::{internal_err, Result};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::ExecutionPlan;

/// The one child in `children`, for `node` (named in the error) that has
/// one input.
pub fn one_input(
    children: Vec<Arc<dyn ExecutionPlan>>,
    node: &str,
) -> Result<Arc<dyn ExecutionPlan>> {
    match <[Arc<dyn ExecutionPlan>; 1]>::try_from(children) {
        Ok([input]) => Ok(input),
        Err(children) => internal_err!("{node} has one input, not {}", children.len()),
    }
}

/// `plan` with `children`, its properties computed again: what DataFusion's
/// `with_new_children` asks of a node that implements `replace_children`.
pub fn recomputed<T: ExecutionPlan + 'static>(
    plan: Arc<T>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.replace_children(
        children,
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )
}
