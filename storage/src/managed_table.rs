//! A table Squadron created: exactly the part files its last commit names.
//!
//! A created table's directory may hold more than its rows: parts of a
//! statement still writing, or of one that failed and awaits the sweep.
//! So a created table is never a listing of its directory; it is the file
//! set of the catalog version that committed it, held here. A commit that
//! keeps the table's identity (INSERT, UPDATE, DELETE, an appending ingest)
//! swaps the file set in place, so the table is never unregistered, not
//! even for a moment; queries planned before the swap read the files they
//! were planned with. `snapshot` pins one file set, for a rewrite that must
//! replace exactly the files it read.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::format::StoredFormat;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use dashmap::DashMap;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::stats::Statistics;
use datafusion::common::{Constraints, Result};
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchemaBuilder;
use datafusion::datasource::TableProvider;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStore};
use serde::{Deserialize, Serialize};

/// One part file of a created table, as the catalog records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DataFile {
    /// Relative to the table's directory.
    pub name: String,
    pub bytes: u64,
    pub rows: u64,
}

/// One committed file set of a created table.
#[derive(Debug)]
pub struct FileSet {
    pub files: Vec<DataFile>,
}

/// A created table, as registered in the coordinator's catalog.
#[derive(Debug)]
pub struct ManagedTable {
    /// The table's identity: a new one on every CREATE [OR REPLACE].
    id: String,
    dir: ListingTableUrl,
    schema: SchemaRef,
    format: StoredFormat,
    constraints: Constraints,
    defaults: HashMap<String, Expr>,
    files: RwLock<Arc<FileSet>>,
    /// Each file's statistics, read once from its footer (files never
    /// change; every file set of this table shares them).
    statistics: Arc<DashMap<String, Arc<Statistics>>>,
}

/// What a created table is made of, besides its files.
pub struct TableShape {
    pub id: String,
    pub dir: ListingTableUrl,
    pub schema: SchemaRef,
    pub format: StoredFormat,
    pub constraints: Constraints,
    pub defaults: HashMap<String, Expr>,
}

impl ManagedTable {
    pub fn new(shape: TableShape, files: FileSet) -> Self {
        Self {
            id: shape.id,
            dir: shape.dir,
            schema: shape.schema,
            format: shape.format,
            constraints: shape.constraints,
            defaults: shape.defaults,
            files: RwLock::new(Arc::new(files)),
            statistics: Arc::new(DashMap::new()),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The table's directory.
    pub fn dir(&self) -> &ListingTableUrl {
        &self.dir
    }

    pub fn format(&self) -> StoredFormat {
        self.format
    }

    /// The file set queries read now.
    pub fn files(&self) -> Arc<FileSet> {
        Arc::clone(&self.files.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes `files` the set queries read from now on.
    pub fn swap_files(&self, files: FileSet) {
        *self.files.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(files);
    }

    /// This table reading only the file set it reads now, whatever is
    /// committed later.
    pub fn snapshot(&self) -> Self {
        Self {
            id: self.id.clone(),
            dir: self.dir.clone(),
            schema: Arc::clone(&self.schema),
            format: self.format,
            constraints: self.constraints.clone(),
            defaults: self.defaults.clone(),
            files: RwLock::new(self.files()),
            statistics: Arc::clone(&self.statistics),
        }
    }

    fn file_format(&self, state: &dyn Session) -> Arc<dyn FileFormat> {
        match self.format {
            StoredFormat::Parquet => Arc::new(
                ParquetFormat::default().with_options(state.table_options().parquet.clone()),
            ),
            StoredFormat::Arrow => Arc::new(ArrowFormat),
        }
    }

    fn object_meta(&self, file: &DataFile) -> ObjectMeta {
        ObjectMeta {
            location: self.dir.prefix().clone().join(file.name.as_str()),
            // Part files are written once under names never used again:
            // their size and this time identify them to every cache.
            last_modified: DateTime::<Utc>::UNIX_EPOCH,
            size: file.bytes,
            e_tag: None,
            version: None,
        }
    }

    /// `file` to scan, with its statistics when `collect` (read from its
    /// footer the first time).
    async fn to_scan(
        &self,
        state: &dyn Session,
        format: &Arc<dyn FileFormat>,
        store: &Arc<dyn ObjectStore>,
        collect: bool,
        file: DataFile,
    ) -> Result<PartitionedFile> {
        let meta = self.object_meta(&file);
        if !collect {
            return Ok(PartitionedFile::new_from_meta(meta));
        }
        let statistics = match self.statistics.get(&file.name) {
            Some(known) => Arc::clone(&known),
            None => {
                let read = format
                    .infer_stats(state, store, Arc::clone(&self.schema), &meta)
                    .await?;
                let read = Arc::new(read);
                self.statistics.insert(file.name, Arc::clone(&read));
                read
            }
        };
        Ok(PartitionedFile::new_from_meta(meta).with_statistics(statistics))
    }
}

#[async_trait]
impl TableProvider for ManagedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // The scan prunes with them; rows are filtered above it.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let files = self.files();
        if files.files.is_empty() {
            let schema = match projection {
                Some(columns) => Arc::new(self.schema.project(columns)?),
                None => Arc::clone(&self.schema),
            };
            return Ok(Arc::new(EmptyExec::new(schema)));
        }
        let format = self.file_format(state);
        let store = state.runtime_env().object_store(&self.dir)?;
        let collect = state.config().collect_statistics();
        let concurrency = state
            .config_options()
            .execution
            .meta_fetch_concurrency
            .get();
        let partitioned: Vec<PartitionedFile> = futures::stream::iter(files.files.clone())
            .map(|file| self.to_scan(state, &format, &store, collect, file))
            .buffered(concurrency)
            .try_collect()
            .await?;
        let groups = FileGroup::new(partitioned).split_files(state.config().target_partitions());
        let (groups, statistics) = with_group_statistics(groups, &self.schema, collect)?;
        let source = format.file_source(TableSchemaBuilder::from(&self.schema).build());
        let config = FileScanConfigBuilder::new(self.dir.object_store(), source)
            .with_file_groups(groups)
            .with_constraints(self.constraints.clone())
            .with_statistics(statistics)
            .with_projection_indices(projection.cloned())?
            .with_limit(limit)
            .build();
        format.create_physical_plan(state, config).await
    }
}

/// Each group's statistics merged from its files', and the table's from
/// the groups' (unknown when statistics are not collected).
fn with_group_statistics(
    groups: Vec<FileGroup>,
    schema: &SchemaRef,
    collect: bool,
) -> Result<(Vec<FileGroup>, Statistics)> {
    if !collect {
        return Ok((groups, Statistics::new_unknown(schema)));
    }
    let groups = groups
        .into_iter()
        .map(|group| {
            let merged = Statistics::try_merge_iter(
                group.iter().filter_map(|f| f.statistics.as_deref()),
                schema,
            )?;
            Ok(group.with_statistics(Arc::new(merged)))
        })
        .collect::<Result<Vec<_>>>()?;
    let table = Statistics::try_merge_iter(
        groups.iter().filter_map(|g| g.file_statistics(None)),
        schema,
    )?;
    Ok((groups, table))
}
