//! Decimal arithmetic in 64 bits where a batch's values allow it
//! (`NarrowDecimalExpr`), wired into a task's plan just before it runs.
//!
//! The plan the coordinator sends is DataFusion's own; each task, on the
//! worker, replaces the decimal `+`, `-` and `*` of its projections and of
//! its aggregates' arguments (where TPC-H computes `price * (1 - discount)`
//! over every line item) with the narrow form. Nothing on the wire
//! changes, and a batch whose values are too large is computed as planned.

mod expr;

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;

pub use expr::NarrowDecimalExpr;

/// `plan` with the decimal arithmetic of its projections and aggregate
/// arguments computed narrow where the values allow.
pub fn with_narrow_decimals(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let narrowed = if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            narrow_projection(projection)?
        } else if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
            narrow_aggregate(aggregate)?
        } else {
            None
        };
        Ok(match narrowed {
            Some(narrowed) => Transformed::yes(narrowed),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

fn narrow_projection(projection: &ProjectionExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let schema = projection.input().schema();
    let mut changed = false;
    let exprs = projection
        .expr()
        .iter()
        .map(|e| {
            let narrowed = narrow(&e.expr, &schema)?;
            changed |= narrowed.transformed;
            Ok(ProjectionExpr {
                expr: narrowed.data,
                alias: e.alias.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if !changed {
        return Ok(None);
    }
    // Keeps any metadata the planned projection gave its output.
    let narrowed = ProjectionExec::try_new_with_schema_metadata(
        exprs,
        Arc::clone(projection.input()),
        &projection.schema(),
    )?;
    Ok(Some(Arc::new(narrowed)))
}

fn narrow_aggregate(aggregate: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // Only the first phase evaluates the arguments on input rows; a final
    // phase reads partial states.
    if !matches!(
        aggregate.mode(),
        AggregateMode::Partial | AggregateMode::Single | AggregateMode::SinglePartitioned
    ) {
        return Ok(None);
    }
    let schema = aggregate.input_schema();
    let mut changed = false;
    let mut functions = Vec::with_capacity(aggregate.aggr_expr().len());
    for function in aggregate.aggr_expr() {
        let expressions = function.all_expressions();
        let mut args = Vec::with_capacity(expressions.args.len());
        let mut narrowed_here = false;
        for arg in &expressions.args {
            let narrowed = narrow(arg, &schema)?;
            narrowed_here |= narrowed.transformed;
            args.push(narrowed.data);
        }
        let rewritten = narrowed_here
            .then(|| function.with_new_expressions(args, expressions.order_by_exprs))
            .flatten();
        match rewritten {
            Some(rewritten) => {
                changed = true;
                functions.push(Arc::new(rewritten));
            }
            None => functions.push(Arc::clone(function)),
        }
    }
    if !changed {
        return Ok(None);
    }
    Ok(Some(Arc::new(aggregate.with_new_aggr_exprs(functions))))
}

/// `expr` with each decimal `+`, `-`, `*` in it computed narrow.
fn narrow(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    Arc::clone(expr).transform_up(|e| {
        let Some(binary) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        Ok(match NarrowDecimalExpr::try_wrap(binary, &e, schema)? {
            Some(narrow) => Transformed::yes(Arc::new(narrow) as Arc<dyn PhysicalExpr>),
            None => Transformed::no(e),
        })
    })
}

#[cfg(test)]
mod tests;
