//! Rebuilding a plan node over rewritten children.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

/// `plan` over its children rewritten by `rewrite`, in order; `plan`
/// itself when every child came back unchanged (so that callers can tell,
/// by pointer, that nothing below changed).
pub fn with_children_rewritten(
    plan: Arc<dyn ExecutionPlan>,
    mut rewrite: impl FnMut(&Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let children = plan.children();
    let mut new_children = Vec::with_capacity(children.len());
    let mut changed = false;
    for child in children {
        let new_child = rewrite(child)?;
        changed |= !Arc::ptr_eq(child, &new_child);
        new_children.push(new_child);
    }
    if !changed {
        return Ok(plan);
    }
    #[allow(deprecated)] // replace_children needs options we have no use for
    plan.with_new_children(new_children)
}
