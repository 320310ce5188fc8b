//! What a Parquet file range will read, by the footers the coordinator
//! already holds.
//!
//! DataFusion caches each file's footer when it gathers a table's
//! statistics, so at planning time the coordinator can apply the pruning
//! the reader will apply (the range's row groups, then their statistics)
//! without reading anything. Two rules use it: scans drop the ranges left
//! with nothing to read (`pruned_scan_ranges`), and a query that reads
//! little runs on the coordinator (`local`). The first rule leaves on each
//! range it keeps what it found (`with_reads_known`): the second reads it
//! back instead of pruning again, and a reader in this process follows the
//! row groups left instead of pruning them all again. (Plans sent to
//! workers do not carry it: their readers prune for themselves.)
//!
//! Conservative by construction: a range is known only when its cached
//! footer matches the listed file (size and modification time), it carries
//! no access plan of its caller's own, and (when a predicate prunes) each
//! column the predicate reads has the table's type in the file (view and
//! plain strings count as one), so that statistics read as the table's
//! types mean what the reader's would.

use std::cell::RefCell;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::metadata::CachedParquetMetaData;
use datafusion::datasource::physical_plan::parquet::{
    ParquetAccessPlan, ParquetFileMetrics, RowGroupAccessPlanFilter,
};
use datafusion::datasource::physical_plan::{FileScanConfig, FileSource, ParquetSource};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::parquet::arrow::parquet_to_arrow_schema;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::PhysicalExpr;

/// Most file ranges of one scan checked at planning. The check runs on the
/// coordinator, one range after another, for every statement; a scan of
/// more ranges than this has more than enough for every task, its readers
/// prune in parallel on the workers, and it does not read little.
pub const MAX_RANGES_CHECKED: usize = 256;

/// A scan's predicate, ready to prune row groups by their statistics.
pub struct ScanPruning {
    pruning: Arc<PruningPredicate>,
    predicate: Arc<dyn PhysicalExpr>,
    /// Whether each footer seen so far stores the predicate's columns as
    /// the table types them: a scan's ranges often share one file, and
    /// converting its schema is most of the check's cost.
    types_checked: RefCell<Vec<(Arc<ParquetMetaData>, bool)>>,
}

impl ScanPruning {
    /// The pruning a Parquet scan's reader will do by statistics, if any:
    /// none without a predicate, with pruning turned off, or when the
    /// predicate reads a partition column or can rule nothing out.
    pub fn of(config: &FileScanConfig, parquet: &ParquetSource) -> Option<Self> {
        let predicate = parquet.filter()?;
        if !parquet.table_parquet_options().global.pruning {
            return None;
        }
        let file_schema = Arc::clone(config.file_schema());
        if collect_columns(&predicate)
            .iter()
            .any(|column| column.index() >= file_schema.fields().len())
        {
            return None;
        }
        let pruning = PruningPredicateBuilder::new()
            .with_file_schema(file_schema)
            .build(Arc::clone(&predicate))?;
        Some(Self {
            pruning,
            predicate,
            types_checked: RefCell::default(),
        })
    }

    /// Whether every column the predicate reads has, in the file of
    /// `footer`, the type the table gives it (a file's string views and the
    /// table's plain strings are read as one).
    fn same_column_types(&self, footer: &Arc<ParquetMetaData>) -> bool {
        let mut checked = self.types_checked.borrow_mut();
        if let Some((_, same)) = checked.iter().find(|(seen, _)| Arc::ptr_eq(seen, footer)) {
            return *same;
        }
        let same = same_column_types(footer, self.pruning.schema(), &self.predicate);
        checked.push((Arc::clone(footer), same));
        same
    }
}

/// The row groups a file range's reader will read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeReads {
    pub row_groups: usize,
    /// Their compressed size, every column counted.
    pub bytes: u64,
}

/// The planning runtime's cache of Parquet footers.
#[derive(Debug)]
pub struct CachedFooters {
    cache: Arc<FileMetadataCache>,
}

impl CachedFooters {
    pub fn new(cache: Arc<FileMetadataCache>) -> Self {
        Self { cache }
    }

    /// What the reader of `file` will read after pruning by its range and
    /// by `pruning`; `None` when that is not known here.
    pub fn reads(
        &self,
        file: &PartitionedFile,
        pruning: Option<&ScanPruning>,
    ) -> Option<RangeReads> {
        self.access(file, pruning).map(|(reads, _)| reads)
    }

    /// What `file` reads as found at planning (`with_reads_known`), without
    /// looking at its footer again.
    pub fn known_reads(file: &PartitionedFile) -> Option<RangeReads> {
        file.extension::<RangeReads>().copied()
    }

    /// What `file` reads, and `file` carrying it: the row groups left
    /// after pruning, which its reader then follows instead of pruning them
    /// all again, and their size for `known_reads`. `None` when its reads
    /// are not known here.
    pub fn with_reads_known(
        &self,
        file: &PartitionedFile,
        pruning: Option<&ScanPruning>,
    ) -> Option<(RangeReads, PartitionedFile)> {
        let (reads, plan) = self.access(file, pruning)?;
        let known = file
            .clone()
            .with_extension(plan.build())
            .with_extension(reads);
        Some((reads, known))
    }

    /// The row groups the reader of `file` will read, and their size.
    fn access(
        &self,
        file: &PartitionedFile,
        pruning: Option<&ScanPruning>,
    ) -> Option<(RangeReads, RowGroupAccessPlanFilter)> {
        if !file.extensions.is_empty() {
            // An access plan of the caller's own: the reader follows it.
            return None;
        }
        let footer = self.footer(file)?;
        let row_groups = footer.row_groups();
        let mut plan = RowGroupAccessPlanFilter::new(ParquetAccessPlan::new_all(row_groups.len()));
        if let Some(range) = &file.range {
            plan.prune_by_range(row_groups, range);
        }
        if let Some(scan) = pruning {
            if !scan.same_column_types(&footer) {
                return None;
            }
            let metrics = ParquetFileMetrics::new(
                0,
                file.object_meta.location.as_ref(),
                &ExecutionPlanMetricsSet::new(),
            );
            plan.prune_by_statistics(
                scan.pruning.schema(),
                footer.file_metadata().schema_descr(),
                row_groups,
                &scan.pruning,
                &metrics,
            );
        }
        let bytes = plan
            .row_group_indexes()
            .map(|i| row_groups[i].compressed_size().max(0) as u64)
            .sum();
        let reads = RangeReads {
            row_groups: plan.remaining_row_group_count(),
            bytes,
        };
        Some((reads, plan))
    }

    /// The footer DataFusion cached for this very file (same size and
    /// modification time), if any.
    pub fn footer(&self, file: &PartitionedFile) -> Option<Arc<ParquetMetaData>> {
        let entry = self.cache.get(&file.object_meta.location)?;
        if !entry.is_valid_for(&file.object_meta) {
            return None;
        }
        let cached = entry
            .file_metadata
            .as_any()
            .downcast_ref::<CachedParquetMetaData>()?;
        Some(Arc::clone(cached.parquet_metadata()))
    }
}

fn same_column_types(
    footer: &ParquetMetaData,
    table: &SchemaRef,
    predicate: &Arc<dyn PhysicalExpr>,
) -> bool {
    let file = footer.file_metadata();
    let Ok(in_file) = parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata())
    else {
        return false;
    };
    collect_columns(predicate).iter().all(|column| {
        let Ok(wanted) = table.field_with_name(column.name()) else {
            return false;
        };
        let Ok(stored) = Schema::field_with_name(&in_file, column.name()) else {
            return false;
        };
        plain(stored.data_type()) == plain(wanted.data_type())
    })
}

fn plain(data_type: &DataType) -> &DataType {
    match data_type {
        DataType::Utf8View => &DataType::Utf8,
        DataType::BinaryView => &DataType::Binary,
        other => other,
    }
}
