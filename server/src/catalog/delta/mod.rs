//! Delta Lake tables. The coordinator reads the transaction log with the
//! Delta kernel at each scan (so every query sees the latest version; the
//! commits since the previous scan are all it reads of the log's head),
//! lets the kernel skip files by their statistics, and plans the active
//! files as a plain Parquet scan: workers read them like any Parquet
//! table, split into byte ranges across tasks, and nothing Delta-specific
//! travels in a TaskDefinition.
//!
//! Read here: tables without column mapping or deletion vectors (both
//! change what a Parquet file's rows mean); either is a clear
//! UNIMPLEMENTED naming the table.

mod skipping;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::stats::Precision;
use datafusion::common::{DataFusionError, Result, ScalarValue, Statistics};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::datasource::TableType;
use datafusion::logical_expr::{CreateExternalTable, Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;
use delta_kernel::engine::arrow_conversion::TryIntoArrow;
use delta_kernel::scan::state::ScanFile;
use delta_kernel::table_features::ColumnMappingMode;
use delta_kernel::{KernelError, Snapshot, SnapshotRef};
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::{DefaultEngine, DefaultEngineBuilder};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use squadron_common::error::Error;
use url::Url;

use skipping::skipping_predicate;
use squadron_planner::client_types::client_schema;

/// A Delta table at `root`, with the schema it had when registered.
pub struct DeltaTable {
    root: Url,
    store: Arc<dyn ObjectStore>,
    /// The columns in the table's own order, as clients read them.
    schema: SchemaRef,
    /// Non-partition columns first, then the partition columns: the order
    /// of a Parquet scan's output. `scan_order[i]` is the scan column of
    /// table column `i`.
    scan_schema: TableSchema,
    scan_order: Vec<usize>,
    /// The newest snapshot read so far: a scan brings it up to date by
    /// reading only the commits made since.
    latest: Mutex<SnapshotRef>,
}

impl fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaTable")
            .field("root", &self.root.as_str())
            .finish_non_exhaustive()
    }
}

impl DeltaTable {
    /// Reads the table's latest snapshot for its schema; the stores are
    /// the session's (the same registry the workers use).
    pub async fn open(state: &dyn Session, location: &str) -> Result<Self> {
        let root = table_root(location)?;
        let store = state
            .runtime_env()
            .object_store(ListingTableUrl::parse(root.as_str())?)?;
        let snapshot = read_snapshot(&root, &store).await?;
        let layout = Layout::of(&snapshot, &root)?;
        Ok(Self {
            root,
            store,
            schema: layout.schema,
            scan_schema: layout.scan_schema,
            scan_order: layout.scan_order,
            latest: Mutex::new(snapshot),
        })
    }

    /// The table's latest version, updated from the last one read; read
    /// whole again if that fails (a table replaced under the same root).
    async fn updated_snapshot(&self) -> Result<SnapshotRef> {
        let known = Arc::clone(&self.latest.lock().unwrap_or_else(PoisonError::into_inner));
        let store = Arc::clone(&self.store);
        let updated = blocking(move || Snapshot::builder_from(known).build(&engine(store))).await;
        let snapshot = match updated {
            Ok(snapshot) => snapshot,
            Err(_) => read_snapshot(&self.root, &self.store).await?,
        };
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&snapshot);
        Ok(snapshot)
    }

    /// The active files of the latest version that may hold rows matching
    /// `filters`.
    async fn files(&self, filters: &[Expr]) -> Result<Vec<ScanFile>> {
        let snapshot = self.updated_snapshot().await?;
        let layout = Layout::of(&snapshot, &self.root)?;
        if layout.schema != self.schema {
            return Err(DataFusionError::Plan(format!(
                "the schema of Delta table {} changed in version {} since it was registered; \
                 register it again",
                self.root,
                snapshot.version()
            )));
        }
        let predicate = skipping_predicate(filters, &self.schema).map(Arc::new);
        let store = Arc::clone(&self.store);
        let files = blocking(move || {
            let engine = engine(store);
            let scan = snapshot.scan_builder().with_predicate(predicate).build()?;
            let mut files = Vec::new();
            for metadata in scan.scan_metadata(&engine)? {
                files = metadata?.visit_scan_files(files, |files, file| files.push(file))?;
            }
            Ok(files)
        })
        .await?;
        if let Some(file) = files.iter().find(|file| file.dv_info.has_vector()) {
            return Err(DataFusionError::NotImplemented(format!(
                "Delta table {}: {} has a deletion vector; tables with deletion vectors \
                 are not read yet",
                self.root, file.path
            )));
        }
        Ok(files)
    }

    fn partitioned_file(&self, file: &ScanFile) -> Result<PartitionedFile> {
        let url = self.root.join(&file.path).map_err(|e| {
            DataFusionError::Plan(format!("Delta table {}: bad file path: {e}", self.root))
        })?;
        if url.scheme() != self.root.scheme() || url.authority() != self.root.authority() {
            return Err(DataFusionError::NotImplemented(format!(
                "Delta table {}: file {url} is in another store",
                self.root
            )));
        }
        let location = Path::from_url_path(url.path())
            .map_err(|e| DataFusionError::ObjectStore(Box::new(e.into())))?;
        let size = u64::try_from(file.size).unwrap_or_default();
        let meta = ObjectMeta {
            location,
            last_modified: DateTime::<Utc>::from_timestamp_millis(file.modification_time)
                .unwrap_or_default(),
            size,
            e_tag: None,
            version: None,
        };
        let partition_values: Vec<ScalarValue> = self
            .scan_schema
            .table_partition_cols()
            .iter()
            .map(|field| partition_value(field, file.partition_values.get(field.name())))
            .collect::<Result<_>>()?;
        // Of the file's own columns; DataFusion adds the partition values.
        let mut statistics = Statistics::new_unknown(self.scan_schema.file_schema());
        statistics.total_byte_size = Precision::Inexact(size as usize);
        if let Some(stats) = &file.stats {
            // Exact (no deletion vectors), which lets DataFusion answer
            // `count(*)` from the log. Not where a partition value is null:
            // DataFusion gives partition columns a null count of 0, so exact
            // rows would make `count(partition_column)` look answerable
            // from statistics alone.
            let rows = stats.num_records as usize;
            statistics.num_rows = if partition_values.iter().any(ScalarValue::is_null) {
                Precision::Inexact(rows)
            } else {
                Precision::Exact(rows)
            };
        }
        Ok(PartitionedFile::new_from_meta(meta)
            .with_partition_values(partition_values)
            .with_statistics(Arc::new(statistics)))
    }
}

#[async_trait]
impl TableProvider for DeltaTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// File skipping never drops rows a filter rejects inside a file, so
    /// DataFusion keeps applying every filter.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let files = self.files(filters).await?;
        let columns: Vec<usize> = match projection {
            Some(columns) => columns.iter().map(|&c| self.scan_order[c]).collect(),
            None => self.scan_order.clone(),
        };
        if files.is_empty() {
            let schema = self.scan_schema.table_schema().project(&columns)?;
            return Ok(Arc::new(EmptyExec::new(Arc::new(schema))));
        }
        let files = files
            .iter()
            .map(|file| self.partitioned_file(file))
            .collect::<Result<Vec<_>>>()?;
        let statistics = table_statistics(&files, self.scan_schema.table_schema());
        let format = ParquetFormat::default().with_options(state.table_options().parquet.clone());
        let source = format.file_source(self.scan_schema.clone());
        let store_url = ListingTableUrl::parse(self.root.as_str())?.object_store();
        // Files spread over the session's partitions as a listed table's
        // are; DataFusion's file-scan repartitioning splits large ones
        // further into byte ranges.
        let groups = FileGroup::new(files).split_files(state.config().target_partitions());
        let config = FileScanConfigBuilder::new(store_url, source)
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_projection_indices(Some(columns))?
            .with_limit(limit)
            .build();
        format.create_physical_plan(state, config).await
    }
}

/// The table's columns in the two orders a scan needs.
struct Layout {
    schema: SchemaRef,
    scan_schema: TableSchema,
    scan_order: Vec<usize>,
}

impl Layout {
    fn of(snapshot: &Snapshot, root: &Url) -> Result<Self> {
        let configuration = snapshot.table_configuration();
        if configuration.column_mapping_mode() != ColumnMappingMode::None {
            return Err(DataFusionError::NotImplemented(format!(
                "Delta table {root} uses column mapping, which is not read yet"
            )));
        }
        let delta_schema: Schema = snapshot
            .schema()
            .as_ref()
            .try_into_arrow()
            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?;
        // Field metadata carries Delta's own annotations, not data.
        let fields: Vec<Field> = client_schema(&delta_schema)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_metadata(HashMap::new()))
            .collect();
        let partition_columns = configuration.logical_partition_columns();
        let is_partition = |f: &Field| partition_columns.iter().any(|p| p == f.name());
        let data: Vec<usize> = (0..fields.len())
            .filter(|&i| !is_partition(&fields[i]))
            .collect();
        let partitions: Vec<usize> = (0..fields.len())
            .filter(|&i| is_partition(&fields[i]))
            .collect();
        let mut scan_order = vec![0; fields.len()];
        for (position, &column) in data.iter().chain(&partitions).enumerate() {
            scan_order[column] = position;
        }
        let file_schema = Schema::new(data.iter().map(|&i| fields[i].clone()).collect::<Vec<_>>());
        let partition_fields: Vec<FieldRef> = partitions
            .iter()
            .map(|&i| Arc::new(fields[i].clone()))
            .collect();
        Ok(Self {
            schema: Arc::new(Schema::new(fields)),
            scan_schema: TableSchema::builder(Arc::new(file_schema))
                .with_table_partition_cols(partition_fields)
                .build(),
            scan_order,
        })
    }
}

/// A partition value as Delta writes it (text; absent for null) in the
/// column's type.
fn partition_value(field: &Field, value: Option<&String>) -> Result<ScalarValue> {
    match value {
        Some(text) => ScalarValue::try_from_string(text.clone(), field.data_type()),
        None => ScalarValue::try_new_null(field.data_type()),
    }
}

/// Rows and bytes of the whole table from the files' own, so the planner
/// sizes joins on Delta tables as on listed ones.
fn table_statistics(files: &[PartitionedFile], schema: &SchemaRef) -> Statistics {
    let mut total = Statistics::new_unknown(schema);
    let mut rows = Precision::Exact(0);
    let mut bytes = Precision::Exact(0);
    for file in files {
        let stats = file.statistics.as_deref();
        rows = rows.add(&stats.map_or(Precision::Absent, |s| s.num_rows));
        bytes = bytes.add(&stats.map_or(Precision::Absent, |s| s.total_byte_size));
    }
    total.num_rows = rows;
    total.total_byte_size = bytes;
    total
}

/// The table's root as a URL ending in `/` (the kernel resolves file
/// paths against it); a local path made absolute.
fn table_root(location: &str) -> Result<Url> {
    let mut url = if location.contains("://") {
        Url::parse(location).map_err(|e| DataFusionError::Plan(format!("{location}: {e}")))?
    } else {
        let path = std::path::absolute(location)?;
        Url::from_directory_path(&path).map_err(|()| {
            DataFusionError::Plan(format!("{location}: not a usable directory path"))
        })?
    };
    if !url.path().ends_with('/') {
        url.set_path(&format!("{}/", url.path()));
    }
    Ok(url)
}

/// The latest snapshot, read whole from the log.
async fn read_snapshot(root: &Url, store: &Arc<dyn ObjectStore>) -> Result<SnapshotRef> {
    let (url, store) = (root.clone(), Arc::clone(store));
    blocking(move || Snapshot::builder_for(url.as_str()).build(&engine(store)))
        .await
        .map_err(|e| match e {
            // An empty log: a directory that is not a Delta table.
            DataFusionError::External(inner)
                if matches!(inner.downcast_ref(), Some(KernelError::EmptyLog)) =>
            {
                DataFusionError::External(Box::new(Error::not_found(format!(
                    "Delta table not found at {root}: no _delta_log there"
                ))))
            }
            other => other,
        })
}

/// The kernel's engine over our store. Its I/O runs on this runtime; the
/// kernel's own calls block, so they run on the blocking pool.
fn engine(store: Arc<dyn ObjectStore>) -> DefaultEngine<TokioMultiThreadExecutor> {
    let executor = TokioMultiThreadExecutor::new(tokio::runtime::Handle::current());
    DefaultEngineBuilder::new(store)
        .with_task_executor(Arc::new(executor))
        .build()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, KernelError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
        .map_err(kernel_error)
}

/// Kernel errors as DataFusion's, keeping what the client must see: a
/// store's error stays one (NOT_FOUND, PERMISSION_DENIED, UNAVAILABLE),
/// an unsupported table feature is UNIMPLEMENTED.
fn kernel_error(error: KernelError) -> DataFusionError {
    match error {
        KernelError::Backtraced { source, .. } => kernel_error(*source),
        KernelError::ObjectStore(e) => DataFusionError::ObjectStore(Box::new(e)),
        KernelError::Unsupported(text) => DataFusionError::NotImplemented(text),
        KernelError::FileNotFound(text) => DataFusionError::External(Box::new(Error::not_found(
            format!("Delta table file not found: {text}"),
        ))),
        other => DataFusionError::External(Box::new(other)),
    }
}

/// `CREATE EXTERNAL TABLE … STORED AS DELTA LOCATION '…'`.
#[derive(Debug, Default)]
pub struct DeltaTableFactory;

#[async_trait]
impl TableProviderFactory for DeltaTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        if !cmd.table_partition_cols.is_empty() {
            return Err(DataFusionError::Plan(
                "a Delta table's partition columns come from its log; drop PARTITIONED BY".into(),
            ));
        }
        let [location] = cmd.locations.as_slice() else {
            return Err(DataFusionError::Plan(
                "a Delta table has one LOCATION, its root directory".into(),
            ));
        };
        let table = DeltaTable::open(state, location).await?;
        if !cmd.schema.fields().is_empty() {
            let declared = cmd.schema.as_arrow();
            if declared.fields().len() != table.schema.fields().len()
                || declared
                    .fields()
                    .iter()
                    .zip(table.schema.fields())
                    .any(|(d, t)| d.name() != t.name() || d.data_type() != t.data_type())
            {
                return Err(DataFusionError::Plan(format!(
                    "the columns declared for {} differ from the Delta table's own; \
                     leave them out",
                    cmd.name
                )));
            }
        }
        Ok(Arc::new(table))
    }
}
