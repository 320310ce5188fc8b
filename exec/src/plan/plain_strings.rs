//! Parquet files that embed view types, read as plain strings.
//!
//! Arrow-based writers (tpchgen, DataFusion itself) store their Arrow
//! schema in the file, and the Parquet reader honours it: a column stored
//! as `Utf8View` decodes into views even when the table it belongs to says
//! `Utf8`, as Squadron's tables do (views ship badly; see the
//! coordinator's session config). Every batch is then cast, copying every
//! string a second time. DataFusion's reader only coerces the other way
//! (plain to views when the table wants views), so here a scan's reader
//! sees the embedded schema with plain types instead; a table that does
//! want views still gets them from DataFusion's own coercion.
//!
//! The rewritten footer replaces the original in the worker's file
//! metadata cache, so it is made once per file, not once per task.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::datasource::listing::PartitionedFile;
// The cached footer type DataFusion's reader looks for (`reader.rs` has
// another of the same name that it does not read).
use datafusion::datasource::physical_plan::parquet::metadata::CachedParquetMetaData;
use datafusion::datasource::physical_plan::parquet::{
    CachedParquetFileReaderFactory, ParquetFileReaderFactory,
};
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::cache::cache_manager::{CachedFileMetadataEntry, FileMetadataCache};
use datafusion::execution::TaskContext;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::AsyncFileReader;
use datafusion::parquet::arrow::{
    encode_arrow_schema, parquet_to_arrow_schema, ARROW_SCHEMA_META_KEY,
};
use datafusion::parquet::errors::Result as ParquetResult;
use datafusion::parquet::file::metadata::{
    FileMetaData, KeyValue, PageIndexPolicy, ParquetMetaData, ParquetMetaDataBuilder,
};
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::ObjectMeta;

/// `plan` with every Parquet scan reading through [`PlainStringsReaderFactory`]
/// (and its files' statistics made bounds where the reader would take them for data: see `file_bounds`).
pub fn prepare_parquet_scans(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    let runtime = ctx.runtime_env();
    plan.transform_up(|node| {
        let Some(scan) = node.downcast_ref::<DataSourceExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some((config, parquet)) = scan.downcast_to_file_source::<ParquetSource>() else {
            return Ok(Transformed::no(node));
        };
        // A table that declares views (a created table keeps the types it
        // was created with) reads the file's own views, not plain strings
        // cast back into views.
        let wants_views = config
            .file_schema()
            .fields()
            .iter()
            .any(|f| has_view(f.data_type()));
        let source = if wants_views {
            parquet.clone()
        } else {
            let store = runtime.object_store(&config.object_store_url)?;
            let factory = PlainStringsReaderFactory {
                inner: CachedParquetFileReaderFactory::new(
                    store,
                    runtime.cache_manager.get_file_metadata_cache(),
                ),
                cache: runtime.cache_manager.get_file_metadata_cache(),
                page_index: parquet.table_parquet_options().global.enable_page_index,
            };
            parquet
                .clone()
                .with_parquet_file_reader_factory(Arc::new(factory))
        };
        let mut config = config.clone();
        config.file_groups =
            super::file_bounds::bounds_not_values(std::mem::take(&mut config.file_groups));
        let config = FileScanConfigBuilder::from(config)
            .with_source(Arc::new(source))
            .build();
        Ok(Transformed::yes(
            DataSourceExec::from_data_source(config) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// DataFusion's cached reader, with footers whose embedded Arrow schema
/// names view types rewritten to name the plain types.
///
/// It also caches each file's page index with its footer (when page
/// indexes are on). DataFusion's opener asks its reader for the footer
/// alone and then reads the page index itself, uncached: single-node
/// DataFusion escapes that because planning already cached footer and index
/// together, but a worker's cache is filled only by its scans, so every
/// task read and decoded its files' page indexes again (one extra blocking
/// read per task; about 0.15 ms of a point query, measured A/B).
#[derive(Debug)]
struct PlainStringsReaderFactory {
    inner: CachedParquetFileReaderFactory,
    cache: Arc<FileMetadataCache>,
    page_index: bool,
}

impl ParquetFileReaderFactory for PlainStringsReaderFactory {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Result<Box<dyn AsyncFileReader + Send>> {
        let object = file.object_meta.clone();
        let inner = self
            .inner
            .create_reader(partition_index, file, metadata_size_hint, metrics)?;
        Ok(Box::new(PlainStringsReader {
            inner,
            object,
            cache: Arc::clone(&self.cache),
            page_index: self.page_index,
        }))
    }
}

struct PlainStringsReader {
    inner: Box<dyn AsyncFileReader + Send>,
    object: ObjectMeta,
    cache: Arc<FileMetadataCache>,
    /// Whether to fetch (and so cache) the page index with the footer.
    page_index: bool,
}

impl AsyncFileReader for PlainStringsReader {
    fn get_bytes(&mut self, range: std::ops::Range<u64>) -> BoxFuture<'_, ParquetResult<Bytes>> {
        self.inner.get_bytes(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> BoxFuture<'_, ParquetResult<Vec<Bytes>>> {
        self.inner.get_byte_ranges(ranges)
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, ParquetResult<Arc<ParquetMetaData>>> {
        async move {
            let with_index = options
                .filter(|_| self.page_index)
                .map(|o| o.clone().with_page_index_policy(PageIndexPolicy::Optional));
            let options = with_index.as_ref().or(options);
            let metadata = self.inner.get_metadata(options).await?;
            let Some(plain) = without_views(&metadata)? else {
                return Ok(metadata);
            };
            let plain = Arc::new(plain);
            let cached = CachedParquetMetaData::new(Arc::clone(&plain));
            self.cache.put(
                &self.object.location,
                CachedFileMetadataEntry::new(self.object.clone(), Arc::new(cached)),
            );
            Ok(plain)
        }
        .boxed()
    }
}

/// The footer with its embedded Arrow schema's view types made plain, or
/// None when it embeds none.
fn without_views(metadata: &ParquetMetaData) -> ParquetResult<Option<ParquetMetaData>> {
    let file = metadata.file_metadata();
    let Some(pairs) = file.key_value_metadata() else {
        return Ok(None);
    };
    if !pairs.iter().any(|kv| kv.key == ARROW_SCHEMA_META_KEY) {
        return Ok(None);
    }
    let embedded = parquet_to_arrow_schema(file.schema_descr(), Some(pairs))?;
    if !embedded.fields().iter().any(|f| has_view(f.data_type())) {
        return Ok(None);
    }
    let plain = Schema::new_with_metadata(
        embedded
            .fields()
            .iter()
            .map(plain_field)
            .collect::<Vec<_>>(),
        embedded.metadata().clone(),
    );
    let pairs = pairs
        .iter()
        .map(|kv| match kv.key == ARROW_SCHEMA_META_KEY {
            true => KeyValue::new(kv.key.clone(), encode_arrow_schema(&plain)),
            false => kv.clone(),
        })
        .collect();
    let file = FileMetaData::new(
        file.version(),
        file.num_rows(),
        file.created_by().map(str::to_string),
        Some(pairs),
        file.schema_descr_ptr(),
        file.column_orders().cloned(),
    );
    let mut parts = ParquetMetaDataBuilder::new_from_metadata(metadata.clone());
    Ok(Some(
        ParquetMetaDataBuilder::new(file)
            .set_row_groups(parts.take_row_groups())
            .set_column_index(parts.take_column_index())
            .set_offset_index(parts.take_offset_index())
            .build(),
    ))
}

fn has_view(data_type: &DataType) -> bool {
    plain_type(data_type) != *data_type
}

fn plain_field(field: &FieldRef) -> FieldRef {
    Arc::new(Field::clone(field).with_data_type(plain_type(field.data_type())))
}

/// `data_type` with string and binary views, at any depth, made plain.
fn plain_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::List(item) => DataType::List(plain_field(item)),
        DataType::LargeList(item) => DataType::LargeList(plain_field(item)),
        DataType::FixedSizeList(item, n) => DataType::FixedSizeList(plain_field(item), *n),
        DataType::Map(entries, sorted) => DataType::Map(plain_field(entries), *sorted),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(plain_field).collect()),
        other => other.clone(),
    }
}
