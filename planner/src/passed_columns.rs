//! Columns an operator passes up unchanged from its only input.
//!
//! Rewrites that move work below an operator (a reduction below a shuffle,
//! a shuffle's keys onto another shuffle) follow a column down the plan:
//! each row above carries the value its input row had in that column.

use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlan;

/// The column of `node`'s only input whose values column `index` of its
/// output carries: through a repartition, a filter (and its projection), a
/// projection of a plain column, an aggregation's plain group column (one
/// grouping set: with several, a group column may be NULL for a row that
/// had a value). `None` for any other operator or column.
pub fn source_column(node: &dyn ExecutionPlan, index: usize) -> Option<usize> {
    if node.is::<RepartitionExec>() {
        return Some(index);
    }
    if let Some(filter) = node.downcast_ref::<FilterExec>() {
        return match filter.projection() {
            Some(projection) => projection.get(index).copied(),
            None => Some(index),
        };
    }
    if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
        let expr = &projection.expr().get(index)?.expr;
        return expr.downcast_ref::<Column>().map(Column::index);
    }
    let aggregate = node.downcast_ref::<AggregateExec>()?;
    let groups = aggregate.group_expr();
    if !groups.is_single() {
        return None;
    }
    let (expr, _) = groups.expr().get(index)?;
    expr.downcast_ref::<Column>().map(Column::index)
}
