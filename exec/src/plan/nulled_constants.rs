//! Outputs where DataFusion 55 keeps a constant that its operator makes
//! NULL are read through an `OrderUnknownExec`.
//!
//! A filter `k = 2` makes `k` a constant of its input's equivalence
//! properties, and DataFusion carries that constant through two operators
//! that output `k` NULL on some rows: an aggregate over grouping sets (the
//! sets without `k`, finding 15) and an outer join (the rows its
//! NULL-filled side did not match, finding 17). Its sort rules then drop
//! `k` from an `ORDER BY k, …` (a constant sorts nothing), and the NULL
//! rows come out among the others: single-node DataFusion answers so too,
//! so the fuzzer's comparison with it could not see it. Above
//! `OrderUnknownExec` nothing is known of order or constants; applied
//! where the coordinator plans (`planner::nulled_constants`), before
//! DataFusion's sort rules.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, Result};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::joins::{
    HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use super::OrderUnknownExec;

/// `plan` with each output that may hold a NULL where DataFusion keeps a
/// constant read through an `OrderUnknownExec`.
pub fn nulled_constants_unordered(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if !nulls_a_constant(&node) {
            return Ok(Transformed::no(node));
        }
        let unordered: Arc<dyn ExecutionPlan> = Arc::new(OrderUnknownExec::new(node));
        Ok(Transformed::yes(unordered))
    })
    .map(|t| t.data)
}

/// Whether `node` outputs NULL in a column its input holds constant: an
/// aggregate over grouping sets (a grouping column may be constant, every
/// set without it makes it NULL), or an outer join whose NULL-filled side
/// has a constant.
fn nulls_a_constant(node: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
        return aggregate.group_expr().has_grouping_set();
    }
    let Some(join_type) = join_type(node) else {
        return false;
    };
    let children = node.children();
    let [left, right] = children.as_slice() else {
        return false;
    };
    let has_constants =
        |side: &Arc<dyn ExecutionPlan>| !side.equivalence_properties().constants().is_empty();
    match join_type {
        JoinType::Left => has_constants(right),
        JoinType::Right => has_constants(left),
        JoinType::Full => has_constants(left) || has_constants(right),
        _ => false,
    }
}

fn join_type(node: &Arc<dyn ExecutionPlan>) -> Option<JoinType> {
    if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        return Some(*join.join_type());
    }
    if let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() {
        return Some(*join.join_type());
    }
    if let Some(join) = node.downcast_ref::<SortMergeJoinExec>() {
        return Some(join.join_type());
    }
    node.downcast_ref::<SymmetricHashJoinExec>()
        .map(|join| *join.join_type())
}
