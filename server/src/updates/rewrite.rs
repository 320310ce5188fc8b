//! `UPDATE` and `DELETE` on created tables: the files they read are
//! written anew.
//!
//! A created table is part files that workers read and nobody edits in
//! place, so a statement changing rows reads one file set of the table
//! (pinned: `ManagedTable::snapshot`) and computes its new contents as an
//! ordinary distributed query — every row, with the new values where the
//! predicate holds (UPDATE), or only the rows where it does not (DELETE).
//! The tasks write them as new part files of the same table, and the
//! commit replaces exactly the files read by those written
//! (`Change::Rewrite`): rows another statement inserted meanwhile stay,
//! and a concurrent rewrite of the same files is refused with ABORTED.
//! The table stays registered throughout. It is one pass: each row
//! carries whether the predicate held, counted by the writers (the rows
//! the statement answers). Rows where the predicate is NULL are left
//! alone, as in single-node DataFusion.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{
    lit, when, DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, WriteOp,
};
use squadron_common::error::Error;
use squadron_exec::write::RowFlag;

use super::names::full_name;
use super::table_writes::{catalog_of as catalog, write_rows, PendingWrite};
use crate::catalog::persisted::Entry;
use crate::engine::Engine;
use crate::warehouse::changes::Change;
use squadron_coordinator::session::Session;
use squadron_storage::managed_table::ManagedTable;

/// The column the rewrite query adds: whether the row matched.
const MATCHED: &str = "__squadron_matched";

/// Runs an UPDATE or DELETE; returns the rows it changed or removed.
pub async fn update_or_delete(
    coord: &Engine,
    session: &Arc<Session>,
    dml: DmlStatement,
) -> Result<u64, Error> {
    let delete = match dml.op {
        WriteOp::Delete => true,
        WriteOp::Update => false,
        ref other => return Err(Error::internal(format!("{other} is not a rewrite"))),
    };
    let name = full_name(session, &dml.table_name)?;
    let table = match catalog(coord)?.get(&name.to_quoted_string()) {
        Some(Entry::Managed(table)) => table,
        _ => {
            return Err(Error::failed_precondition(format!(
                "{} is not a table created through Squadron; {} works on those",
                dml.table_name, dml.op
            )))
        }
    };
    let provider = coord
        .session()
        .table_provider(name.clone())
        .await
        .map_err(Error::from)?;
    let registered = provider
        .downcast_ref::<ManagedTable>()
        .ok_or_else(|| Error::internal(format!("{name} is registered as another kind of table")))?;
    // The files this statement reads, and replaces.
    let snapshot = Arc::new(registered.snapshot());
    let read: Vec<String> = snapshot
        .files()
        .files
        .iter()
        .map(|f| f.name.clone())
        .collect();
    let statement = Statement::of(&dml.input, delete)?;
    let query = statement
        .reading(Arc::clone(&snapshot))?
        .rewrite_query(delete)?;
    let format = snapshot.format();
    let schema = dml.target.schema();
    let write = PendingWrite::start(coord, snapshot.dir().clone())?;
    let rows = coord.plan_rows_to_write(session, &query).await?;
    let flag = if delete {
        RowFlag::CountAndDrop
    } else {
        RowFlag::Count
    };
    let written = write_rows(coord, session, rows, write.target(format, &schema, flag)).await?;
    let files = write.data_files(&written)?;
    let change = Change::Rewrite {
        name: table.name,
        id: snapshot.id().to_string(),
        removed: read,
        added: files.clone(),
    };
    write.commit(coord.session(), change, &files).await?;
    Ok(written.flagged)
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
    fn of(input: &LogicalPlan, delete: bool) -> Result<Self, Error> {
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
            return Err(Error::unimplemented(format!(
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

    /// This statement reading `table` (one pinned file set) for the table
    /// it names.
    fn reading(self, table: Arc<ManagedTable>) -> Result<Self, Error> {
        let source = provider_as_source(table);
        let scan = self
            .scan
            .transform_up(|node| match node {
                LogicalPlan::TableScan(mut scan) => {
                    scan.source = Arc::clone(&source);
                    Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
                }
                other => Ok(Transformed::no(other)),
            })
            .map_err(Error::from)?
            .data;
        Ok(Self { scan, ..self })
    }

    /// The table's new rows (all of them for UPDATE, with the new values
    /// where the predicate holds; for DELETE the caller drops the matched
    /// ones), each with the `MATCHED` flag last.
    fn rewrite_query(self, delete: bool) -> Result<LogicalPlan, Error> {
        let matched = self.predicate.map_or(lit(true), Expr::is_true);
        let columns = self.scan.schema().columns().into_iter().map(Expr::Column);
        let mut exprs: Vec<Expr> = if delete {
            columns.collect()
        } else {
            self.values
                .into_iter()
                .zip(columns)
                .map(|(value, old)| new_value(value, old, &matched))
                .collect::<Result<_, Error>>()?
        };
        exprs.push(matched.alias(MATCHED));
        LogicalPlanBuilder::from(self.scan)
            .project(exprs)
            .and_then(LogicalPlanBuilder::build)
            .map_err(Error::from)
    }
}

/// `CASE WHEN matched THEN value ELSE old END`, named as the column; a
/// column the statement does not assign stays as it is.
fn new_value(value: Expr, old: Expr, matched: &Expr) -> Result<Expr, Error> {
    let (value, name) = match value {
        Expr::Alias(alias) => (*alias.expr, alias.name),
        other => return Err(Error::internal(format!("unnamed UPDATE value {other}"))),
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
        .map_err(Error::from)
}

/// Whether `plan` is a plain scan of one table (perhaps under an alias).
fn reads_one_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(_) => true,
        LogicalPlan::SubqueryAlias(a) => reads_one_table(&a.input),
        _ => false,
    }
}

fn unexpected(input: &LogicalPlan) -> Error {
    Error::internal(format!("an UPDATE planned as {}", input.display_indent()))
}
