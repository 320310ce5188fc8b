//! A prepared statement reads the tables as they are when it runs.
//!
//! A prepared plan holds the table providers its names resolved to when it
//! was prepared. Squadron replaces a created table's provider whenever its
//! rows are rewritten (UPDATE, DELETE, CREATE OR REPLACE: new files in a
//! new directory, the old ones removed), so each execution looks the names
//! up again, as the statement's SQL would be planned now. Clients such as
//! the JDBC driver and ADBC's DB-API cursor prepare every query and run it
//! again when its text repeats.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::TableReference;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::logical_expr::LogicalPlan;
use squadron_common::error::to_status;
use tonic::Status;

use squadron_coordinator::session::Session;

/// `plan` with every table scan bound to the table of that name now;
/// FAILED_PRECONDITION when one now has other columns (the plan's column
/// positions would not hold).
pub async fn with_current_tables(
    session: &Session,
    plan: LogicalPlan,
) -> Result<LogicalPlan, Status> {
    let mut prepared: Vec<(TableReference, Arc<dyn TableProvider>)> = vec![];
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            // Sources other than providers (none that Squadron makes) stay.
            if let Ok(provider) = source_as_provider(&scan.source) {
                prepared.push((scan.table_name.clone(), provider));
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| to_status(&e))?;
    let mut now: HashMap<TableReference, Arc<dyn TableProvider>> = HashMap::new();
    for (name, then) in prepared {
        if now.contains_key(&name) {
            continue;
        }
        // A name the catalog does not know — a table function's scan
        // (`generate_series(…)`), or a table dropped since — keeps what the
        // statement was prepared with, as single-node DataFusion's would.
        let Ok(current) = session.ctx().table_provider(name.clone()).await else {
            continue;
        };
        if current.schema() != then.schema() {
            return Err(Status::failed_precondition(format!(
                "table {name} has other columns than when the statement was prepared: \
                 prepare it again"
            )));
        }
        now.insert(name, current);
    }
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::TableScan(mut scan) if now.contains_key(&scan.table_name) => {
            scan.source = provider_as_source(Arc::clone(&now[&scan.table_name]));
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
    .map_err(|e| to_status(&e))
}
