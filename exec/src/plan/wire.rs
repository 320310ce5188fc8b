//! Rewrites that make a plan survive datafusion-proto unchanged.
//!
//! datafusion-proto (55) encodes a `generate_series`/`range` scan as its
//! arguments plus the scan's *projected* schema, and decodes it into a
//! generator over that schema. A scan projected to no columns (`SELECT
//! count(*) FROM generate_series(…)`, the unused side of a cross join)
//! then decodes into a generator whose `value` column does not fit its
//! empty schema, and every batch fails ("number of columns(1) must match
//! number of fields(0)"). Such a scan is sent unprojected, under an empty
//! projection that keeps only the row counts.
//!
//! Projected work tables of recursive queries: see `recursive`.
//!
//! What cannot be avoided before encoding is repaired after decoding
//! (`repaired`).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{not_impl_err, Result};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::functions_table::generate_series::{GenericSeriesState, TimestampValue};
use datafusion::physical_plan::aggregates::{AggregateExec, PhysicalGroupBy};
use datafusion::physical_plan::memory::LazyMemoryExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::windows::{
    BoundedWindowAggExec, StandardWindowExpr, WindowAggExec, WindowExpr, WindowUDFExpr,
};
use datafusion::physical_plan::ExecutionPlan;

/// `plan` with every column-less series scan replaced as described above,
/// or NotImplemented for what datafusion-proto would silently change.
pub fn encodable(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    refuse_lossy_windows(&plan)?;
    refuse_virtual_columns(&plan)?;
    let plan = super::recursive::unprojected_work_tables(plan)?;
    plan.transform_up(|node| {
        let Some(scan) = node.downcast_ref::<LazyMemoryExec>() else {
            return Ok(Transformed::no(node));
        };
        if !scan.schema().fields().is_empty() {
            return Ok(Transformed::no(node));
        }
        let [generator] = scan.generators().as_slice() else {
            return Ok(Transformed::no(node));
        };
        let Some(value_type) = series_type(generator.read().as_any()) else {
            return Ok(Transformed::no(node));
        };
        let schema = Arc::new(Schema::new(vec![Field::new("value", value_type, false)]));
        let whole = LazyMemoryExec::try_new(schema, vec![Arc::clone(generator)])?;
        let rows_only = ProjectionExec::try_new(Vec::<ProjectionExpr>::new(), Arc::new(whole))?;
        Ok(Transformed::yes(
            Arc::new(rows_only) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// datafusion-proto (55) sends window functions such as `first_value`,
/// `last_value` and `nth_value` without their `IGNORE NULLS` (it writes
/// `false` for every user-defined window function): the workers would
/// answer as if it were not there. Refused instead of answered wrongly.
fn refuse_lossy_windows(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    plan.apply(|node| {
        let exprs = if let Some(window) = node.downcast_ref::<BoundedWindowAggExec>() {
            window.window_expr()
        } else if let Some(window) = node.downcast_ref::<WindowAggExec>() {
            window.window_expr()
        } else {
            return Ok(TreeNodeRecursion::Continue);
        };
        for expr in exprs {
            if ignores_nulls(expr.as_ref()) {
                return not_impl_err!(
                    "{} IGNORE NULLS cannot run on workers yet (the plan encoding drops IGNORE NULLS)",
                    expr.name()
                );
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

/// datafusion-proto (55) sends a file scan without its virtual columns
/// (`file_row_index()`, the Parquet row number), and the scan's projection
/// then names a column the worker's copy does not have. Refused by name
/// rather than failing to decode on the worker.
fn refuse_virtual_columns(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    plan.apply(|node| {
        let virtual_columns = node
            .downcast_ref::<DataSourceExec>()
            .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
            .map(|config| {
                config
                    .file_source()
                    .table_schema()
                    .virtual_columns()
                    .clone()
            })
            .unwrap_or_default();
        match virtual_columns.first() {
            Some(column) => not_impl_err!(
                "the virtual column {} (file_row_index()) cannot run on workers yet \
                 (the plan encoding drops virtual columns)",
                column.name()
            ),
            None => Ok(TreeNodeRecursion::Continue),
        }
    })
    .map(|_| ())
}

/// Whether a user-defined window function was asked to ignore nulls. The
/// flag has no accessor; its `Debug` shows it (a false positive only
/// refuses a query, it never changes an answer).
fn ignores_nulls(expr: &dyn WindowExpr) -> bool {
    expr.as_any()
        .downcast_ref::<StandardWindowExpr>()
        .and_then(|standard| {
            standard
                .get_standard_func_expr()
                .as_any()
                .downcast_ref::<WindowUDFExpr>()
                .map(|udf| format!("{udf:?}").contains("ignore_nulls: true"))
        })
        .unwrap_or(false)
}

/// The type of the `value` column a series generator produces.
fn series_type(generator: &dyn std::any::Any) -> Option<DataType> {
    if generator.is::<GenericSeriesState<i64>>() {
        return Some(DataType::Int64);
    }
    generator
        .downcast_ref::<GenericSeriesState<TimestampValue>>()
        .map(|series| DataType::Timestamp(TimeUnit::Nanosecond, series.current().tz_str().cloned()))
}

/// `plan` as decoded, with what datafusion-proto (55) loses put back:
/// an aggregate over the one empty grouping set (`GROUP BY GROUPING SETS
/// (())`) travels as its groups flattened into one list of flags, which is
/// empty, and decodes with no grouping set at all, so it emitted no row
/// where it must emit one.
pub fn repaired(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
            return Ok(Transformed::no(node));
        };
        let group_by = aggregate.group_expr();
        if !(group_by.has_grouping_set()
            && group_by.expr().is_empty()
            && group_by.groups().is_empty())
        {
            return Ok(Transformed::no(node));
        }
        let one_empty_set = PhysicalGroupBy::new(vec![], vec![], vec![vec![]], true);
        let fixed = AggregateExec::try_new(
            *aggregate.mode(),
            one_empty_set,
            aggregate.aggr_expr().to_vec(),
            aggregate.filter_expr().to_vec(),
            Arc::clone(aggregate.input()),
            aggregate.input_schema(),
        )?
        .with_limit_options(aggregate.limit_options());
        Ok(Transformed::yes(Arc::new(fixed) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}
