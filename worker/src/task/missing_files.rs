//! Why a task could not read a table: a file its scans name that this
//! worker cannot see.
//!
//! DataFusion's Parquet reader reports a missing file as a generic
//! "Failed to fetch metadata" error, its cause flattened into text. A
//! table given to the coordinator by a local path that only the
//! coordinator's host has (no shared volume) fails exactly so on every
//! worker, and the client should read NOT_FOUND naming the worker and the
//! path. So when a task fails, the worker looks its scans' files up in
//! their stores (once, only then: a query that succeeds costs nothing) and
//! names the first one that is not there.

use std::sync::Arc;

use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use object_store::ObjectStoreExt;

/// Files looked up at most per failed task.
const MAX_LOOKUPS: usize = 64;

/// The first file `plan` scans that its store says does not exist, as a
/// URL.
pub async fn missing_file(plan: &Arc<dyn ExecutionPlan>, ctx: &TaskContext) -> Option<String> {
    let mut scans = vec![];
    collect_scans(plan, &mut scans);
    let mut looked_up = 0;
    for scan in scans {
        let store = ctx
            .runtime_env()
            .object_store(&scan.object_store_url)
            .ok()?;
        for file in scan.file_groups.iter().flat_map(|g| g.iter()) {
            if looked_up == MAX_LOOKUPS {
                return None;
            }
            looked_up += 1;
            let location = &file.object_meta.location;
            if let Err(object_store::Error::NotFound { .. }) = store.head(location).await {
                // `file:///` + `tmp/t.parquet`, `s3://bucket/` + `path`.
                let store_url = scan.object_store_url.as_str();
                let separator = if store_url.ends_with('/') { "" } else { "/" };
                return Some(format!("{store_url}{separator}{location}"));
            }
        }
    }
    None
}

fn collect_scans(plan: &Arc<dyn ExecutionPlan>, scans: &mut Vec<FileScanConfig>) {
    if let Some(source) = plan.downcast_ref::<DataSourceExec>() {
        if let Some(scan) = source.data_source().downcast_ref::<FileScanConfig>() {
            scans.push(scan.clone());
        }
    }
    for child in plan.children() {
        collect_scans(child, scans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{ParquetReadOptions, SessionContext};

    #[tokio::test]
    async fn a_file_gone_since_planning_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let ctx = SessionContext::new();
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
        let plan = ctx
            .sql("SELECT * FROM t")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(missing_file(&plan, &ctx.task_ctx()).await, None);
        std::fs::remove_file(&path).unwrap();
        let missing = missing_file(&plan, &ctx.task_ctx()).await.unwrap();
        assert!(missing.ends_with("/t.parquet"), "{missing}");
        assert!(missing.starts_with("file:///"), "{missing}");
    }
}
