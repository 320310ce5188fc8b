//! The terms of a task's filters evaluated in the order their batches show
//! is cheapest (`AdaptiveConjunction`), wired into a task's plan just
//! before it runs; the plan on the wire is DataFusion's own.

mod expr;

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NotExpr,
    TryCastExpr,
};
use datafusion::physical_expr::split_conjunction;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::ExecutionPlan;

use crate::like_substrings::SubstringsLikeExpr;

pub use expr::AdaptiveConjunction;

/// `plan` with each filter of two or more terms, none of which can fail,
/// evaluating them in an adaptive order.
pub fn with_adaptive_conjunctions(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(filter) = node.downcast_ref::<FilterExec>() else {
            return Ok(Transformed::no(node));
        };
        let terms: Vec<Arc<dyn PhysicalExpr>> = split_conjunction(filter.predicate())
            .into_iter()
            .cloned()
            .collect();
        if terms.len() < 2 || !terms.iter().all(cannot_fail) {
            return Ok(Transformed::no(node));
        }
        let adaptive = FilterExecBuilder::from(filter)
            .with_predicate(Arc::new(AdaptiveConjunction::new(terms)))
            .build()?;
        Ok(Transformed::yes(
            Arc::new(adaptive) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// Whether `expr` gives a value for every row without an error: columns,
/// constants, comparisons, `AND`/`OR`/`NOT`, `IN` lists, `LIKE`, null
/// tests, and `TRY_CAST` of those. Arithmetic (overflow, division by
/// zero), casts and functions are not.
pub fn cannot_fail(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let mut safe = true;
    // `apply` visits every node; one unsafe node settles it.
    let _ = expr.apply(|node| {
        safe = is_safe_node(node);
        Ok(if safe {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    safe
}

fn is_safe_node(node: &Arc<dyn PhysicalExpr>) -> bool {
    if let Some(binary) = node.downcast_ref::<BinaryExpr>() {
        return matches!(
            binary.op(),
            Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
                | Operator::And
                | Operator::Or
                | Operator::IsDistinctFrom
                | Operator::IsNotDistinctFrom
                | Operator::LikeMatch
                | Operator::ILikeMatch
                | Operator::NotLikeMatch
                | Operator::NotILikeMatch
        );
    }
    node.downcast_ref::<Column>().is_some()
        || node.downcast_ref::<Literal>().is_some()
        || node.downcast_ref::<InListExpr>().is_some()
        || node.downcast_ref::<LikeExpr>().is_some()
        || node.downcast_ref::<IsNullExpr>().is_some()
        || node.downcast_ref::<IsNotNullExpr>().is_some()
        || node.downcast_ref::<NotExpr>().is_some()
        || node.downcast_ref::<TryCastExpr>().is_some()
        || node.downcast_ref::<SubstringsLikeExpr>().is_some()
}

#[cfg(test)]
mod tests;
