//! A join's filter that DataFusion pushed into a scan below another join
//! also drops the scan's rows.
//!
//! A Parquet scan uses its predicate to skip row groups and pages; rows
//! only when `datafusion.execution.parquet.pushdown_filters` is on (off:
//! slower for TPC-H q6 and q19). Where the scan is the join's own probe
//! input that loses nothing, the join drops the rows itself. Where a join
//! lies between them, every row the filter would drop is first hashed and
//! probed by the join below: TPC-H q21 at SF10 with `lineitem` and
//! `orders` split by key range runs `supplier ⋈ (orders ⋈ l1)` in one task,
//! and the supplier join's filter (4,010 supplier keys) pruned no row group
//! of `l1` while the join below probed all its 38 M rows. A `FilterExec`
//! over such a scan applies the filter on trial (`trial`): given up when it
//! keeps nearly every row.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::datasource::memory::DataSourceExec;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec};
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};

use super::trial::TrialFilter;

/// `probe` (a join's probe side) with its scans below another join that
/// hold the filter `id` filtering their rows by it.
pub fn filter_scans_below_joins(
    probe: &Arc<dyn ExecutionPlan>,
    id: u64,
) -> Result<Arc<dyn ExecutionPlan>> {
    visit(probe, id, false)
}

fn visit(
    node: &Arc<dyn ExecutionPlan>,
    id: u64,
    below_join: bool,
) -> Result<Arc<dyn ExecutionPlan>> {
    if node.is::<DataSourceExec>() {
        return match below_join.then(|| row_filter(node, id)).transpose()? {
            Some(Some(filter)) => Ok(Arc::new(FilterExec::try_new(filter, Arc::clone(node))?)),
            _ => Ok(Arc::clone(node)),
        };
    }
    let is_join = node.is::<HashJoinExec>()
        || node.is::<SortMergeJoinExec>()
        || node.is::<NestedLoopJoinExec>();
    let children = node
        .children()
        .into_iter()
        .map(|child| visit(child, id, below_join || is_join))
        .collect::<Result<Vec<_>>>()?;
    replace_children_if_necessary(Arc::clone(node), children)
}

/// The filter `id` held in `scan`'s predicate, on trial, over the scan's
/// output columns; `None` when the scan holds none or does not output
/// every column it reads.
fn row_filter(scan: &Arc<dyn ExecutionPlan>, id: u64) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let mut held = None;
    scan.apply_expressions(&mut |root| {
        root.apply(|expr| {
            if expr.expression_id() == Some(id) {
                held = Some(Arc::clone(expr));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
    })?;
    let Some(held) = held else {
        return Ok(None);
    };
    // The scan's predicate names the table's columns by their place in
    // the table; its output is a projection of them.
    let schema = scan.schema();
    let mut missing = false;
    let remapped = Arc::clone(&held).transform_down(|expr| {
        let Some(column) = expr.downcast_ref::<Column>() else {
            return Ok(Transformed::no(expr));
        };
        match schema.index_of(column.name()) {
            Ok(index) => Ok(Transformed::yes(
                Arc::new(Column::new(column.name(), index)) as Arc<dyn PhysicalExpr>,
            )),
            Err(_) => {
                missing = true;
                Ok(Transformed::no(expr))
            }
        }
    })?;
    if missing {
        return Ok(None);
    }
    Ok(Some(Arc::new(TrialFilter::new(remapped.data))))
}
