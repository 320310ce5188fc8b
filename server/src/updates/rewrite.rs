//! `UPDATE` and `DELETE` on created tables: the table is written anew.
//!
//! A created table is Parquet files that workers read and nobody edits in
//! place, so a statement changing rows computes the table's new contents
//! as an ordinary distributed query — every row, with the new values where
//! the predicate holds (UPDATE), or only the rows where it does not
//! (DELETE) — writes them to a new directory and moves the table there,
//! as `CREATE OR REPLACE TABLE` does. It is one pass: each row carries
//! whether the predicate held, which also gives the count the statement
//! answers. Rows where the predicate is NULL are left alone, as in
//! single-node DataFusion.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::compute::kernels::boolean::not;
use datafusion::common::Column;
use datafusion::logical_expr::{
    lit, when, DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, WriteOp,
};
use futures::TryStreamExt;
use squadron_worker::error::to_status;
use tonic::Status;

use super::{catalog, create_table, full_name, run_query};
use crate::catalog::persisted::{Declared, Entry};
use crate::coordinator::Coordinator;
use crate::session::Session;

/// The column the rewrite query adds: whether the row matched.
const MATCHED: &str = "__squadron_matched";

/// Runs an UPDATE or DELETE; returns the rows it changed or removed.
pub async fn update_or_delete(
    coord: &Coordinator,
    session: &Arc<Session>,
    dml: DmlStatement,
) -> Result<u64, Status> {
    let delete = match dml.op {
        WriteOp::Delete => true,
        WriteOp::Update => false,
        ref other => return Err(Status::internal(format!("{other} is not a rewrite"))),
    };
    let name = full_name(session, &dml.table_name)?;
    let declared = match catalog(coord)?.get(&name.to_quoted_string()) {
        Some(Entry::Managed { keys, defaults, .. }) => Declared { keys, defaults },
        _ => {
            return Err(Status::failed_precondition(format!(
                "{} is not a table created through Squadron; {} works on those",
                dml.table_name, dml.op
            )))
        }
    };
    let statement = Statement::of(&dml.input, delete)?;
    let query = statement.rewrite_query(delete)?;
    let planned = coord.plan_for_writing(session, query).await?;
    let changed = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&changed);
    let rows = run_query(coord, planned).await?.and_then(move |batch| {
        let kept = keep_rows(batch, delete, &counter);
        async move { kept }
    });
    create_table(coord, &name, false, dml.target.schema(), rows, declared).await?;
    Ok(changed.load(Ordering::Relaxed))
}

/// The parts of a DML statement's input as DataFusion's SQL planner builds
/// it: `[Projection of the new values ←] [Filter ←] scan of the table`.
struct Statement {
    scan: LogicalPlan,
    predicate: Option<Expr>,
    /// UPDATE: one expression per table column, aliased to its name.
    values: Vec<Expr>,
}

impl Statement {
    fn of(input: &LogicalPlan, delete: bool) -> Result<Self, Status> {
        let (values, below) = match input {
            LogicalPlan::Projection(p) if !delete => (p.expr.clone(), p.input.as_ref()),
            _ if !delete => return Err(unexpected(input)),
            _ => (vec![], input),
        };
        let (predicate, scan) = match below {
            LogicalPlan::Filter(f) => (Some(f.predicate.clone()), f.input.as_ref()),
            other => (None, other),
        };
        if !reads_one_table(scan) {
            return Err(Status::unimplemented(format!(
                "{}: only a WHERE on the table itself (no FROM, no LIMIT)",
                if delete { "DELETE" } else { "UPDATE" }
            )));
        }
        Ok(Self {
            scan: scan.clone(),
            predicate,
            values,
        })
    }

    /// The table's new rows (all of them for UPDATE, with the new values
    /// where the predicate holds; for DELETE the caller drops the matched
    /// ones), each with the `MATCHED` flag last.
    fn rewrite_query(self, delete: bool) -> Result<LogicalPlan, Status> {
        let matched = self.predicate.map_or(lit(true), Expr::is_true);
        let columns = self.scan.schema().columns().into_iter().map(Expr::Column);
        let mut exprs: Vec<Expr> = if delete {
            columns.collect()
        } else {
            self.values
                .into_iter()
                .zip(columns)
                .map(|(value, old)| new_value(value, old, &matched))
                .collect::<Result<_, Status>>()?
        };
        exprs.push(matched.alias(MATCHED));
        LogicalPlanBuilder::from(self.scan)
            .project(exprs)
            .and_then(LogicalPlanBuilder::build)
            .map_err(|e| to_status(&e))
    }
}

/// `CASE WHEN matched THEN value ELSE old END`, named as the column; a
/// column the statement does not assign stays as it is.
fn new_value(value: Expr, old: Expr, matched: &Expr) -> Result<Expr, Status> {
    let (value, name) = match value {
        Expr::Alias(alias) => (*alias.expr, alias.name),
        other => return Err(Status::internal(format!("unnamed UPDATE value {other}"))),
    };
    if let Expr::Column(Column {
        name: ref column, ..
    }) = value
    {
        if *column == name {
            return Ok(value.alias(name));
        }
    }
    when(matched.clone(), value)
        .otherwise(old)
        .map(|e| e.alias(name))
        .map_err(|e| to_status(&e))
}

/// Whether `plan` is a plain scan of one table (perhaps under an alias).
fn reads_one_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(_) => true,
        LogicalPlan::SubqueryAlias(a) => reads_one_table(&a.input),
        _ => false,
    }
}

fn unexpected(input: &LogicalPlan) -> Status {
    Status::internal(format!("an UPDATE planned as {}", input.display_indent()))
}

/// Counts the matched rows of `batch` and drops its flag, and for DELETE
/// the matched rows too.
fn keep_rows(batch: RecordBatch, delete: bool, changed: &AtomicU64) -> Result<RecordBatch, Status> {
    let last = batch.num_columns() - 1;
    let matched = batch.column(last).as_boolean().clone();
    changed.fetch_add(matched.true_count() as u64, Ordering::Relaxed);
    let data = batch
        .project(&(0..last).collect::<Vec<_>>())
        .map_err(|e| Status::internal(e.to_string()))?;
    if !delete {
        return Ok(data);
    }
    let keep = not(&matched).map_err(|e| Status::internal(e.to_string()))?;
    filter_record_batch(&data, &keep).map_err(|e| Status::internal(e.to_string()))
}
