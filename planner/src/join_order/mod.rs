//! Join order from statistics. DataFusion joins tables in the order the
//! query lists them; for TPC-H q5 that joins every customer to a year of
//! orders and all of lineitem before the region's filter removes four
//! nations in five. Before physical planning, each region of inner
//! equi-joins (`region`) is costed from its leaves' statistics
//! (`estimate`: Parquet row counts and key ranges, narrowed by filters),
//! the cheapest order is searched (`search`), and it replaces the written
//! one when it is expected to make clearly fewer intermediate rows.
//! `SET squadron.join_reorder = false` keeps the written order; EXPLAIN
//! shows both orders with their estimates (`describe`).

mod estimate;
mod region;
mod sample;
mod search;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::execution::context::QueryPlanner;
use std::collections::HashSet;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{internal_datafusion_err, Column};
use datafusion::logical_expr::{Expr, LogicalPlan, Projection};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use futures::future::BoxFuture;
use futures::FutureExt;
use squadron_exec::squadron_options::SquadronOptions;

use region::{build, leaf_name, Region, Shape};
use search::Model;

/// A new order replaces the written one only when its estimated
/// intermediate rows are at most this share of the written order's:
/// estimates are rough, and a near tie is not worth a different plan.
const REQUIRED_SAVING: f64 = 0.7;

/// DataFusion's physical planner, given logical plans whose inner joins
/// were reordered by their statistics (unless `squadron.join_reorder` is
/// off).
#[derive(Debug, Default)]
pub struct JoinOrderPlanner;

#[async_trait]
impl QueryPlanner for JoinOrderPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let planner = DefaultPhysicalPlanner::default();
        if !SquadronOptions::of(session.config_options()).join_reorder {
            return planner.create_physical_plan(plan, session).await;
        }
        // A region the rewrite cannot rebuild keeps the written order
        // rather than failing the query.
        let reordered = match reorder_joins(plan, session, &mut vec![]).await {
            Ok(reordered) => reordered,
            Err(e) => {
                tracing::warn!(error = %e, "join order kept as written");
                plan.clone()
            }
        };
        if &reordered == plan {
            return planner.create_physical_plan(plan, session).await;
        }
        match planner.create_physical_plan(&reordered, session).await {
            Ok(physical) => Ok(physical),
            Err(e) => {
                tracing::warn!(error = %e, "reordered joins not planned; written order kept");
                planner.create_physical_plan(plan, session).await
            }
        }
    }
}

/// What the planner decided about each join region of `plan` (EXPLAIN's
/// `join_order` row): the written and chosen orders with their
/// estimated intermediate rows.
pub async fn describe(plan: &LogicalPlan, session: &dyn Session) -> Result<Vec<String>> {
    let mut decisions = vec![];
    if SquadronOptions::of(session.config_options()).join_reorder {
        reorder_joins(plan, session, &mut decisions).await?;
    }
    Ok(decisions)
}

/// `plan` with each join region in its cheapest order; `decisions`
/// collects a line per region considered.
pub async fn reorder_joins(
    plan: &LogicalPlan,
    session: &dyn Session,
    decisions: &mut Vec<String>,
) -> Result<LogicalPlan> {
    rewrite(plan, true, session, decisions).await
}

fn rewrite<'a>(
    plan: &'a LogicalPlan,
    may_root: bool,
    session: &'a dyn Session,
    decisions: &'a mut Vec<String>,
) -> BoxFuture<'a, Result<LogicalPlan>> {
    async move {
        if may_root {
            // A projection right above a region tells which of its
            // columns are used: the joins need not carry the others.
            let (join, over) = match plan {
                LogicalPlan::Join(join) => (Some(join), None),
                LogicalPlan::Projection(projection) => match projection.input.as_ref() {
                    LogicalPlan::Join(join) => (Some(join), Some(projection)),
                    _ => (None, None),
                },
                _ => (None, None),
            };
            if let Some(region) = join.and_then(Region::of) {
                let output: Vec<Column> = match over {
                    Some(projection) => {
                        let used: HashSet<&Column> = projection
                            .expr
                            .iter()
                            .flat_map(|e| e.column_refs())
                            .collect();
                        join.into_iter()
                            .flat_map(|j| j.schema.columns())
                            .filter(|c| used.contains(c))
                            .collect()
                    }
                    None => plan.schema().columns(),
                };
                if let Some(joined) = reorder(region, &output, session, decisions).await? {
                    let exprs = match over {
                        Some(projection) => projection.expr.clone(),
                        None => output.into_iter().map(Expr::Column).collect(),
                    };
                    return Ok(LogicalPlan::Projection(Projection::try_new(exprs, joined)?));
                }
                // Kept as written: the region's own joins are not roots
                // of regions of their own, its leaves may hold some.
                return rewrite_children(plan, true, session, decisions).await;
            }
        }
        rewrite_children(plan, !may_root, session, decisions).await
    }
    .boxed()
}

/// `plan` with its children rewritten; when `plan` is inside a join
/// region kept as written, so are its children that are joins of it.
async fn rewrite_children(
    plan: &LogicalPlan,
    inside_region: bool,
    session: &dyn Session,
    decisions: &mut Vec<String>,
) -> Result<LogicalPlan> {
    let inputs = plan.inputs();
    if inputs.is_empty() {
        return Ok(plan.clone());
    }
    let mut changed = false;
    let mut children = Vec::with_capacity(inputs.len());
    for child in inputs {
        let may_root = !(inside_region && region::in_region(child));
        let new = rewrite(child, may_root, session, decisions).await?;
        changed |= &new != child;
        children.push(new);
    }
    if !changed {
        return Ok(plan.clone());
    }
    // The same node over the new children, in the order `inputs` gave.
    let mut children = children.into_iter();
    let rebuilt = plan
        .clone()
        .map_children(|_| {
            children
                .next()
                .map(Transformed::yes)
                .ok_or_else(|| internal_datafusion_err!("fewer children than inputs"))
        })?
        .data;
    Ok(rebuilt)
}

/// `region` joined in its cheapest order, its output cut to `output`;
/// `None` when the written order stays.
async fn reorder(
    mut region: Region,
    output: &[Column],
    session: &dyn Session,
    decisions: &mut Vec<String>,
) -> Result<Option<Arc<LogicalPlan>>> {
    let mut estimates = Vec::with_capacity(region.leaves.len());
    for leaf in &region.leaves {
        match estimate::estimate_leaf(leaf, session).await {
            Some(e) => estimates.push(e),
            None => return Ok(None),
        }
    }
    let names: Vec<String> = region.leaves.iter().map(leaf_name).collect();
    let leaf_rows: Vec<String> = names
        .iter()
        .zip(&estimates)
        .map(|(name, e)| format!("{name} {:.0}", e.rows))
        .collect();
    let model = Model::new(&region, estimates);
    let (_, written_cost) = model.cost_of(&region.written);
    let Some((chosen, chosen_cost, rows)) = model.cheapest() else {
        return Ok(None);
    };
    let take = chosen != region.written && chosen_cost <= written_cost * REQUIRED_SAVING;
    decisions.push(format!(
        "rows: {}; written: {} (estimated intermediate rows {:.0}); {}: {} ({:.0})",
        leaf_rows.join(", "),
        render(&region.written, &names),
        written_cost,
        if take { "chosen" } else { "kept, the cheapest" },
        render(&chosen, &names),
        chosen_cost,
    ));
    if !take {
        return Ok(None);
    }
    for leaf in region.leaves.iter_mut() {
        *leaf = rewrite(leaf, true, session, decisions).await?;
    }
    let rows_of = |set: u32| rows.get(&set).copied().unwrap_or(f64::MAX);
    build(&region, &chosen, &rows_of, output).map(Some)
}

fn render(shape: &Shape, names: &[String]) -> String {
    match shape {
        Shape::Leaf(i) => names[*i].clone(),
        Shape::Join(l, r) => format!("({} ⋈ {})", render(l, names), render(r, names)),
    }
}
