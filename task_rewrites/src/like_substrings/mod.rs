//! A task's filters match `LIKE` patterns of several literals separated by
//! `%` by searching the literals in order (`SubstringsLikeExpr`), wired
//! into a task's plan just before it runs; the plan on the wire is
//! DataFusion's own.

mod expr;

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::physical_expr::expressions::{LikeExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::ExecutionPlan;

pub use expr::{Parts, SubstringsLikeExpr};

/// `plan` with the `LIKE`s of its filters whose patterns allow it matched
/// by substring search.
pub fn with_substring_likes(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(filter) = node.downcast_ref::<FilterExec>() else {
            return Ok(Transformed::no(node));
        };
        let predicate = Arc::clone(filter.predicate()).transform_up(|e| {
            Ok(match substrings_like(&e) {
                Some(like) => Transformed::yes(Arc::new(like) as Arc<dyn PhysicalExpr>),
                None => Transformed::no(e),
            })
        })?;
        if !predicate.transformed {
            return Ok(Transformed::no(node));
        }
        let rewritten = FilterExecBuilder::from(filter)
            .with_predicate(predicate.data)
            .build()?;
        Ok(Transformed::yes(
            Arc::new(rewritten) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// `expr` as a substring search, if it is a case-sensitive `LIKE` of a
/// constant pattern of several literals separated by `%`.
fn substrings_like(expr: &Arc<dyn PhysicalExpr>) -> Option<SubstringsLikeExpr> {
    let like = expr.downcast_ref::<LikeExpr>()?;
    if like.case_insensitive() {
        return None;
    }
    let pattern = match like.pattern().downcast_ref::<Literal>()?.value() {
        ScalarValue::Utf8(Some(p))
        | ScalarValue::Utf8View(Some(p))
        | ScalarValue::LargeUtf8(Some(p)) => p.clone(),
        _ => return None,
    };
    let parts = Parts::of(&pattern)?;
    Some(SubstringsLikeExpr::new(
        Arc::clone(expr),
        Arc::clone(like.expr()),
        parts,
        like.negated(),
    ))
}

#[cfg(test)]
mod tests;
