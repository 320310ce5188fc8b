//! Uncorrelated scalar subqueries that still fail on more than one row.
//!
//! The coordinator has DataFusion rewrite uncorrelated scalar subqueries to
//! joins (`enable_physical_uncorrelated_scalar_subquery = false`, see
//! `coordinator_session_config`). A join returns one output row per
//! subquery row, where single-node DataFusion fails with "Scalar subquery
//! returned more than one row". This rule runs before that rewrite and
//! wraps each such subquery so it always yields one row and checks the
//! count itself:
//!
//! `(SELECT v FROM t)` → `(SELECT squadron_scalar_subquery_value(n, v)
//! FROM (SELECT count(*) AS n, first_value(v) AS v FROM t))`
//!
//! An empty subquery still gives NULL (`first_value` of no rows).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::functions_aggregate::expr_fn::{count, first_value};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{lit, Expr, LogicalPlan, LogicalPlanBuilder, Subquery};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use squadron_exec::single_row::{scalar_subquery_value, NAME};

const ROWS: &str = "__squadron_rows";
const VALUE: &str = "__squadron_value";

/// The optimizer rule; put it before DataFusion's own rules.
#[derive(Debug, Default)]
pub struct CheckedScalarSubqueries;

impl OptimizerRule for CheckedScalarSubqueries {
    fn name(&self) -> &str {
        "squadron_checked_scalar_subqueries"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.map_expressions(|expr| {
            expr.transform_up(|e| match e {
                Expr::ScalarSubquery(subquery)
                    if subquery.outer_ref_columns.is_empty() && !is_checked(&subquery) =>
                {
                    Ok(Transformed::yes(Expr::ScalarSubquery(checked(subquery)?)))
                }
                other => Ok(Transformed::no(other)),
            })
        })
    }
}

fn checked(subquery: Subquery) -> Result<Subquery> {
    let plan = Arc::unwrap_or_clone(subquery.subquery);
    let (qualifier, field) = plan.schema().qualified_field(0);
    let name = field.name().clone();
    let value = Expr::Column(Column::new(qualifier.cloned(), name.clone()));
    let plan = LogicalPlanBuilder::from(plan)
        .aggregate(
            Vec::<Expr>::new(),
            vec![
                count(lit(1)).alias(ROWS),
                first_value(value, vec![]).alias(VALUE),
            ],
        )?
        .project(vec![Expr::ScalarFunction(ScalarFunction::new_udf(
            scalar_subquery_value(),
            vec![
                Expr::Column(Column::from_name(ROWS)),
                Expr::Column(Column::from_name(VALUE)),
            ],
        ))
        .alias(name)])?
        .build()?;
    Ok(Subquery {
        subquery: Arc::new(plan),
        ..subquery
    })
}

/// Whether the subquery is already wrapped (optimizer rules run more than
/// once).
fn is_checked(subquery: &Subquery) -> bool {
    match subquery.subquery.as_ref() {
        LogicalPlan::Projection(projection) => projection
            .expr
            .iter()
            .any(|e| matches!(e.clone().unalias(), Expr::ScalarFunction(f) if f.name() == NAME)),
        _ => false,
    }
}
