//! What a task plan may touch on a worker.
//!
//! Plans come only from the coordinator's certificate, but a worker still
//! refuses what no Squadron plan contains, so that a stolen coordinator
//! identity cannot turn workers into a file reader or writer: task plans
//! write only the part files of created tables (`TableWriteExec`), never
//! through DataFusion's own sinks, and with `--data-root` given they read
//! only files under those roots and write only there or into the
//! `--warehouse`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::datasource::file_format::csv::CsvSink;
use datafusion::datasource::file_format::json::JsonSink;
use datafusion::datasource::file_format::parquet::ParquetSink;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::physical_plan::{FileSink, FileSinkConfig};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use squadron_common::error::Error;

use crate::write::{SinkWriteExec, TableWriteExec};

/// Where a worker's plans may read files.
#[derive(Debug, Clone, Default)]
pub struct DataRoots {
    /// Canonical local directories, or object store URL prefixes
    /// (`s3://bucket/prefix`); empty: anywhere.
    roots: Vec<String>,
    /// Where created tables live (`--warehouse`): writable, and readable,
    /// whatever the roots.
    warehouse: Option<String>,
}

impl DataRoots {
    /// Local roots are canonicalized (a root that does not exist is an
    /// error: it would allow nothing).
    pub fn new(roots: &[PathBuf]) -> anyhow::Result<Self> {
        let roots = roots
            .iter()
            .map(|root| {
                let text = root.to_string_lossy();
                if text.contains("://") {
                    return Ok(text.trim_end_matches('/').to_string());
                }
                let canonical = std::fs::canonicalize(root)
                    .map_err(|e| anyhow::anyhow!("--data-root {}: {e}", root.display()))?;
                Ok(format!("file://{}", canonical.display()))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            roots,
            warehouse: None,
        })
    }

    /// These roots, and the warehouse at `url` (a URL, `file:///…` for a
    /// local directory).
    pub fn with_warehouse(mut self, url: Option<&str>) -> Self {
        self.warehouse = url.map(|u| u.trim_end_matches('/').to_string());
        self
    }

    /// Whether a table `LOCATION` (a URL, an absolute or relative path, a
    /// glob) lies under a root. A path is resolved as the process sees
    /// it, through symbolic links of the part that exists, so neither
    /// `..` nor a link can widen a root.
    pub fn allows_location(&self, location: &str) -> bool {
        if self.roots.is_empty() {
            return true;
        }
        if location.contains("://") && !location.starts_with("file://") {
            let path = location.split_once("://").map_or("", |(_, rest)| rest);
            return !has_parent_step(path) && self.allows(location.trim_end_matches('/'));
        }
        let path = Path::new(location.strip_prefix("file://").unwrap_or(location));
        match resolve_existing_prefix(path) {
            Some(resolved) => self.allows(&format!("file://{}", resolved.display())),
            None => false,
        }
    }

    fn allows(&self, url: &str) -> bool {
        self.roots.is_empty()
            || self.roots.iter().chain(&self.warehouse).any(|root| {
                url.strip_prefix(root.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
    }

    /// Whether a created table's directory (a URL) may be written.
    fn allows_writing(&self, url: &str) -> bool {
        let path = url.split_once("://").map_or(url, |(_, rest)| rest);
        !has_parent_step(path) && self.allows(url.trim_end_matches('/'))
    }
}

/// Refuses `plan` with PERMISSION_DENIED if it writes files other than a
/// created table's, or outside `roots`, or reads a file outside them.
pub fn check_plan(plan: &Arc<dyn ExecutionPlan>, roots: &DataRoots) -> Result<(), Error> {
    if plan.downcast_ref::<DataSinkExec>().is_some() {
        return Err(Error::permission_denied(
            "task plans do not write files on workers",
        ));
    }
    if let Some(write) = plan.downcast_ref::<TableWriteExec>() {
        check_write(&write.target().table_url, roots)?;
    }
    if let Some(write) = plan.downcast_ref::<SinkWriteExec>() {
        let Some(config) = file_sink_config(write.sink().sink()) else {
            return Err(Error::permission_denied(
                "task plans write only through DataFusion's file sinks",
            ));
        };
        for path in &config.table_paths {
            check_write(path.as_str(), roots)?;
        }
    }
    if let Some(source) = plan.downcast_ref::<DataSourceExec>() {
        if let Some(scan) = source.data_source().downcast_ref::<FileScanConfig>() {
            // `file:///` + `tmp/t.parquet`, `s3://bucket/` + `path`.
            let store = scan.object_store_url.as_str();
            let separator = if store.ends_with('/') { "" } else { "/" };
            for file in scan.file_groups.iter().flat_map(|g| g.iter()) {
                let location = file.object_meta.location.as_ref();
                let url = format!("{store}{separator}{location}");
                if !roots.allows(&url) || has_parent_step(location) {
                    return Err(Error::permission_denied(format!(
                        "the plan reads {url}, outside this worker's --data-root"
                    )));
                }
            }
        }
    }
    for child in plan.children() {
        check_plan(child, roots)?;
    }
    Ok(())
}

fn check_write(url: &str, roots: &DataRoots) -> Result<(), Error> {
    if roots.allows_writing(url) {
        return Ok(());
    }
    Err(Error::permission_denied(format!(
        "the plan writes {url}, outside this worker's --data-root and --warehouse"
    )))
}

/// Where a file sink writes, for the sinks Squadron runs in tasks (those
/// datafusion-proto encodes); `None` for any other sink.
pub fn file_sink_config(sink: &dyn DataSink) -> Option<&FileSinkConfig> {
    if let Some(parquet) = sink.downcast_ref::<ParquetSink>() {
        return Some(parquet.config());
    }
    if let Some(csv) = sink.downcast_ref::<CsvSink>() {
        return Some(csv.config());
    }
    sink.downcast_ref::<JsonSink>().map(|json| json.config())
}

/// `path` made absolute, with its longest existing prefix canonicalized
/// and the rest (a file still to be listed, a glob) kept as written;
/// `None` when that rest steps up with `..`.
fn resolve_existing_prefix(path: &Path) -> Option<PathBuf> {
    let absolute = std::env::current_dir().ok()?.join(path);
    let mut existing = absolute.as_path();
    let mut rest = vec![];
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            if has_parent_step(&rest.iter().rev().collect::<PathBuf>().to_string_lossy()) {
                return None;
            }
            return Some(rest.iter().rev().fold(canonical, |p, c| p.join(c)));
        }
        rest.push(existing.file_name()?.to_os_string());
        existing = existing.parent()?;
    }
}

/// Object store paths are normalized, but a `..` must never widen a root.
fn has_parent_step(location: &str) -> bool {
    Path::new(location)
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    use squadron_common::error::ErrorKind;

    async fn scan_plan(path: &Path) -> Arc<dyn ExecutionPlan> {
        let ctx = SessionContext::new();
        ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        let df = ctx.sql("SELECT * FROM t").await.unwrap();
        df.create_physical_plan().await.unwrap()
    }

    fn write_parquet(dir: &Path) -> PathBuf {
        use datafusion::arrow::array::Int32Array;
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::arrow::record_batch::RecordBatch;
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1]))])
            .unwrap();
        let path = dir.join("t.parquet");
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        path
    }

    #[tokio::test]
    async fn reads_are_limited_to_the_data_roots() {
        let inside = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let allowed = DataRoots::new(&[inside.path().to_path_buf()]).unwrap();
        let ok = scan_plan(&write_parquet(inside.path())).await;
        check_plan(&ok, &allowed).unwrap();
        let bad = scan_plan(&write_parquet(outside.path())).await;
        let err = check_plan(&bad, &allowed).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
        // Without roots, anything may be read.
        check_plan(&bad, &DataRoots::default()).unwrap();
        // A root is a directory, not a name prefix.
        let sibling = DataRoots::new(&[inside.path().to_path_buf()]).unwrap();
        let prefix = format!(
            "file://{}x/t.parquet",
            std::fs::canonicalize(inside.path()).unwrap().display()
        );
        assert!(!sibling.allows(&prefix));
        assert!(DataRoots::new(&["/no/such/root".into()]).is_err());
    }

    #[test]
    fn table_locations_are_checked_after_resolving_links_and_dots() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("sales")).unwrap();
        let roots = DataRoots::new(&[root.path().to_path_buf()]).unwrap();
        let under = |rest: &str| format!("{}/{rest}", root.path().display());
        assert!(roots.allows_location(&under("sales")));
        assert!(roots.allows_location(&under("sales/")));
        assert!(roots.allows_location(&under("sales/*.parquet")));
        assert!(roots.allows_location(&under("not-yet/t.csv")));
        assert!(roots.allows_location(&format!("file://{}", under("sales"))));
        assert!(!roots.allows_location(&under("sales/../../etc/passwd")));
        assert!(!roots.allows_location(&under("nothing/../../x")));
        assert!(!roots.allows_location(outside.path().to_str().unwrap()));
        assert!(!roots.allows_location("/etc/passwd"));
        assert!(!roots.allows_location("s3://bucket/data"));
        // A link inside the root to a directory outside it.
        let link = root.path().join("escape");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        assert!(!roots.allows_location(link.to_str().unwrap()));

        let stores = DataRoots::new(&["s3://bucket/data".into()]).unwrap();
        assert!(stores.allows_location("s3://bucket/data/lineitem/"));
        assert!(!stores.allows_location("s3://bucket/data2"));
        assert!(!stores.allows_location("s3://bucket/data/../secret"));
        assert!(!stores.allows_location("/tmp"));
        assert!(DataRoots::default().allows_location("/etc/passwd"));
    }

    #[test]
    fn writes_go_under_the_roots_or_the_warehouse() {
        let roots = DataRoots::new(&["s3://bucket/data".into()])
            .unwrap()
            .with_warehouse(Some("s3://wh/prod/"));
        assert!(roots.allows_writing("s3://wh/prod/tables/t-1/"));
        assert!(roots.allows_writing("s3://bucket/data/out/"));
        assert!(!roots.allows_writing("s3://wh/prod2/tables/t/"));
        assert!(!roots.allows_writing("s3://wh/prod/../x/"));
        assert!(!roots.allows_writing("file:///etc/"));
        assert!(DataRoots::default().allows_writing("file:///tmp/t/"));
    }
}
