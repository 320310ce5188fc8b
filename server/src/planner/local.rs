//! Plans the coordinator answers itself: those that read no table.
//!
//! `SELECT 1`, `SELECT now()`, a `VALUES` list: their only inputs are
//! constants written in the statement, so there is nothing for a worker to
//! read and sending them out would cost two extra round trips for no work.
//! Anything that scans a table or generates rows (`generate_series`,
//! `range`, which can be made arbitrarily large) goes to the workers.
//!
//! A recursive CTE over constants stays too: its work table holds only
//! rows derived from them. One over a table goes to a worker, where it
//! runs whole inside one task (its work table lives in one process).
//!
//! Catalog views (`information_schema`, hence `SHOW TABLES`, `SHOW
//! COLUMNS`) are streams over the coordinator's catalog: only it has them,
//! and they are small, so they run here too.

use std::sync::Arc;

use datafusion::datasource::memory::{DataSourceExec, MemorySourceConfig};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::work_table::WorkTableExec;
use datafusion::physical_plan::ExecutionPlan;

/// Whether every input of `plan` is a constant of the statement.
pub fn reads_no_table(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let children = plan.children();
    if children.is_empty() {
        return plan.is::<PlaceholderRowExec>()
            || plan.is::<EmptyExec>()
            || plan.is::<StreamingTableExec>()
            // a recursive query's rows so far: constants, if the rest are
            || plan.is::<WorkTableExec>()
            || plan
                .downcast_ref::<DataSourceExec>()
                .is_some_and(|scan| scan.data_source().is::<MemorySourceConfig>());
    }
    children.into_iter().all(reads_no_table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::test_tables::physical_plan as plan;
    use datafusion::prelude::{ParquetReadOptions, SessionContext};

    #[tokio::test]
    async fn constants_stay_and_tables_and_generators_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_information_schema(true),
        );
        ctx.sql(&format!(
            "COPY (SELECT 1 AS a) TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
        ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        for sql in [
            "SELECT 1",
            "SELECT 1 WHERE false",
            "SELECT sum(column1) FROM (VALUES (1), (2)) GROUP BY column1 % 2",
            "SHOW TABLES",
            "SELECT column_name FROM information_schema.columns WHERE table_name = 't'",
        ] {
            assert!(reads_no_table(&plan(&ctx, sql).await), "{sql}");
        }
        for sql in [
            "SELECT a FROM t",
            "SELECT * FROM generate_series(1, 10)",
            "SELECT 1 FROM t UNION ALL SELECT 2",
        ] {
            assert!(!reads_no_table(&plan(&ctx, sql).await), "{sql}");
        }
    }
}
