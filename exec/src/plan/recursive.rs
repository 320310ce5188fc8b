//! Recursive queries on the wire.
//!
//! A `WorkTableExec` (the rows of the recursion so far) may carry a
//! projection pushed into it, and has no accessor for it: encoded with its
//! projected schema alone, it would decode into a work table that yields
//! every column under a narrower schema. Before encoding, each projected
//! work table becomes the whole work table under a `ProjectionExec` of the
//! same columns (found by name: a CTE's columns have distinct names).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{not_impl_err, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::work_table::WorkTableExec;
use datafusion::physical_plan::ExecutionPlan;

/// `plan` with every projected work table made whole under a projection.
pub fn unprojected_work_tables(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(query) = node.downcast_ref::<RecursiveQueryExec>() else {
            return Ok(Transformed::no(node));
        };
        let whole = query.schema();
        let recursive_term = Arc::clone(query.recursive_term()).transform_up(|inner| {
            let Some(table) = inner.downcast_ref::<WorkTableExec>() else {
                return Ok(Transformed::no(inner));
            };
            if table.name() != query.name() || table.schema() == whole {
                return Ok(Transformed::no(inner));
            }
            let columns = table
                .schema()
                .fields()
                .iter()
                .map(|field| {
                    let mut same_name = whole
                        .fields()
                        .iter()
                        .enumerate()
                        .filter(|(_, f)| f.name() == field.name());
                    match (same_name.next(), same_name.next()) {
                        (Some((index, _)), None) => Ok(ProjectionExpr::new(
                            Arc::new(Column::new(field.name(), index)),
                            field.name().clone(),
                        )),
                        _ => not_impl_err!(
                            "a recursive query whose work table has no single column named {}",
                            field.name()
                        ),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let table = WorkTableExec::new(table.name().to_string(), Arc::clone(&whole), None)?;
            let projected = ProjectionExec::try_new(columns, Arc::new(table))?;
            Ok(Transformed::yes(
                Arc::new(projected) as Arc<dyn ExecutionPlan>
            ))
        })?;
        if !recursive_term.transformed {
            return Ok(Transformed::no(node));
        }
        let rebuilt = RecursiveQueryExec::try_new(
            query.name().to_string(),
            whole,
            Arc::clone(query.static_term()),
            recursive_term.data,
            query.is_distinct(),
        )?;
        Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}
