//! A Parquet scan split by ranges of one key column, from the statistics
//! of its files' row groups (the footers the coordinator holds).
//!
//! Partition *j* of the split reads, in each file, the run of row groups
//! whose key range meets its range `[cut(j-1), cut(j))`, and a filter keeps
//! exactly its rows (a row group on a cut is read by both neighbours; rows
//! with a NULL key go to partition 0). Where a file's rows are in key
//! order (TPC-H's, written in key order) the runs are disjoint and the
//! split reads each row group about once; where they are not, every run
//! would cover most of the file, and the scan is not split (`split`
//! answers `None` when the partitions would read more than a quarter more
//! rows than the scan, beyond a row group per cut).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfig, FileScanConfigBuilder, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::logical_expr::Operator;
use datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use datafusion::parquet::arrow::parquet_to_arrow_schema;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::cached_footers::CachedFooters;

/// Most files of one scan looked at: the statistics are read on the
/// coordinator for every statement.
const MAX_FILES: usize = 1024;

/// The values where one partition's key range ends and the next one's
/// starts, in increasing order: `n - 1` of them for `n` partitions.
#[derive(Debug, Clone, PartialEq)]
pub struct Cuts(Vec<ScalarValue>);

impl Cuts {
    pub fn partitions(&self) -> usize {
        self.0.len() + 1
    }

    pub fn values(&self) -> &[ScalarValue] {
        &self.0
    }

    /// Partition `j`'s range: from its lower cut (inclusive), to its upper
    /// one (exclusive); `None` is unbounded.
    fn range(&self, j: usize) -> (Option<&ScalarValue>, Option<&ScalarValue>) {
        let low = j.checked_sub(1).and_then(|i| self.0.get(i));
        (low, self.0.get(j))
    }
}

/// One row group's key statistics (`None`: unknown, read by every
/// partition).
#[derive(Debug)]
struct RowGroupKeys {
    /// Where the reader looks for the row group: its first page.
    offset: i64,
    rows: u64,
    min: Option<ScalarValue>,
    max: Option<ScalarValue>,
}

/// A Parquet scan read whole, with its key column's statistics per row
/// group of each file.
#[derive(Debug)]
pub struct KeyedScan {
    config: FileScanConfig,
    /// The key's index in the scan's output, and its name.
    column: usize,
    name: String,
    files: Vec<(PartitionedFile, Vec<RowGroupKeys>)>,
}

impl KeyedScan {
    /// `scan`'s key statistics for its output `column`, when it is a
    /// Parquet scan of whole files (no partitioning of its own) whose
    /// footers are cached and store the column (an integer or a date, as
    /// the table types it) with statistics that rule out NULLs.
    pub fn of(
        scan: &Arc<dyn ExecutionPlan>,
        column: usize,
        footers: &CachedFooters,
    ) -> Option<Self> {
        let source = scan.downcast_ref::<DataSourceExec>()?;
        let (config, _) = source.downcast_to_file_source::<ParquetSource>()?;
        // A limit applies per range: split, the scan would read more.
        if config.output_partitioning.is_some() || config.limit.is_some() {
            return None;
        }
        let field = scan.schema().fields().get(column).cloned()?;
        let table = config.file_schema();
        let table_field = table.field_with_name(field.name()).ok()?;
        if !is_discrete(table_field.data_type()) || table_field.data_type() != field.data_type() {
            return None;
        }
        let whole_files = whole_files(config)?;
        let mut files = Vec::with_capacity(whole_files.len());
        for file in whole_files {
            let footer = footers.footer(&file)?;
            let stored = parquet_to_arrow_schema(
                footer.file_metadata().schema_descr(),
                footer.file_metadata().key_value_metadata(),
            )
            .ok()?;
            if stored.field_with_name(field.name()).ok()?.data_type() != field.data_type() {
                return None;
            }
            let converter = StatisticsConverter::try_new(
                field.name(),
                table,
                footer.file_metadata().schema_descr(),
            )
            .ok()?;
            let row_groups = footer.row_groups();
            let mins = converter.row_group_mins(row_groups.iter()).ok()?;
            let maxes = converter.row_group_maxes(row_groups.iter()).ok()?;
            let nulls = converter.row_group_null_counts(row_groups.iter()).ok()?;
            let value = |array: &dyn Array, i: usize| {
                (!array.is_null(i))
                    .then(|| ScalarValue::try_from_array(array, i).ok())
                    .flatten()
            };
            if (0..nulls.len()).any(|i| nulls.is_null(i) || nulls.value(i) > 0) {
                return None;
            }
            let groups = row_groups
                .iter()
                .enumerate()
                .map(|(i, group)| {
                    let first = group.column(0);
                    RowGroupKeys {
                        offset: first
                            .dictionary_page_offset()
                            .unwrap_or_else(|| first.data_page_offset()),
                        rows: group.num_rows().max(0) as u64,
                        min: value(&mins, i),
                        max: value(&maxes, i),
                    }
                })
                .collect();
            files.push((file, groups));
        }
        Some(Self {
            config: config.clone(),
            column,
            name: field.name().clone(),
            files,
        })
    }

    /// Whether the files' rows are in key order: in each file, nearly
    /// every row group's keys end where the next group's begin or before.
    /// Cuts taken from row group starts spread the rows evenly only then
    /// (`l_suppkey`, in no order, has every group start near 1: cut there,
    /// one range would hold one key and the other all the rest).
    fn in_key_order(&self) -> bool {
        let (mut pairs, mut ordered) = (0usize, 0usize);
        for (_, groups) in &self.files {
            for pair in groups.windows(2) {
                pairs += 1;
                if let (Some(end), Some(start)) = (&pair[0].max, &pair[1].min) {
                    ordered += usize::from(end <= start);
                }
            }
        }
        ordered * 10 >= pairs * 9
    }

    pub fn rows(&self) -> u64 {
        self.groups()
            .fold(0u64, |rows, group| rows.saturating_add(group.rows))
    }

    fn groups(&self) -> impl Iterator<Item = &RowGroupKeys> {
        self.files.iter().flat_map(|(_, groups)| groups)
    }

    /// Cuts into `partitions` ranges of about as many rows each, at row
    /// group starts; `None` when a row group's range is unknown or the
    /// keys are too few to cut that often.
    pub fn cuts(&self, partitions: usize) -> Option<Cuts> {
        if partitions < 2 || !self.in_key_order() {
            return None;
        }
        let mut starts: Vec<(&ScalarValue, u64)> = self
            .groups()
            .map(|group| group.min.as_ref().map(|min| (min, group.rows)))
            .collect::<Option<_>>()?;
        if starts.iter().any(|(a, _)| a.partial_cmp(a).is_none()) {
            return None;
        }
        starts.sort_by(|(a, _), (b, _)| a.partial_cmp(b).unwrap_or(Ordering::Equal));
        // Row counts come from the files' footers: saturating and in 128
        // bits, so a forged count cannot wrap the arithmetic.
        let total = starts
            .iter()
            .fold(0u64, |sum, (_, rows)| sum.saturating_add(*rows));
        let first = starts.first().map(|(start, _)| *start)?;
        let mut cuts: Vec<ScalarValue> = vec![];
        let mut before = 0u64;
        for (start, rows) in starts {
            let wanted = cuts.len() as u64 + 1;
            if cuts.len() + 1 < partitions
                && start > first
                && u128::from(before) * partitions as u128 >= u128::from(total) * u128::from(wanted)
                && cuts.last().is_none_or(|last| last < start)
            {
                cuts.push(start.clone());
            }
            before = before.saturating_add(rows);
        }
        (cuts.len() + 1 == partitions).then_some(Cuts(cuts))
    }

    /// The scan as one input per range of `cuts` (a union whose partition
    /// *j* is range *j*), each reading the row groups that may hold its
    /// keys and keeping exactly its rows; `None` when that would read
    /// much more than the scan does (the files are not in key order).
    pub fn split(&self, cuts: &Cuts) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if !self.in_key_order() {
            return Ok(None);
        }
        let total = self.rows();
        // Where a key's rows span two row groups, the group before a cut
        // is read by both neighbours: one group per cut, whatever the order.
        let largest = self.groups().map(|group| group.rows).max().unwrap_or(0);
        let most = total
            .saturating_add(total / 4)
            .saturating_add(largest.saturating_mul(cuts.partitions().saturating_sub(1) as u64));
        let mut read = 0u64;
        let mut inputs = Vec::with_capacity(cuts.partitions());
        for j in 0..cuts.partitions() {
            let (low, high) = cuts.range(j);
            let mut files = vec![];
            for (file, groups) in &self.files {
                let meets = |group: &RowGroupKeys| match (&group.min, &group.max) {
                    (Some(min), Some(max)) => {
                        low.is_none_or(|low| max >= low) && high.is_none_or(|high| min < high)
                    }
                    _ => true,
                };
                let Some(first) = groups.iter().position(meets) else {
                    continue;
                };
                let last = groups.iter().rposition(meets).unwrap_or(first);
                read = groups[first..=last]
                    .iter()
                    .fold(read, |read, group| read.saturating_add(group.rows));
                let (start, end) = (groups[first].offset, groups[last].offset + 1);
                files.push(file.clone().with_range(start, end));
            }
            if read > most {
                return Ok(None);
            }
            inputs.push(self.range_input(files, low, high)?);
        }
        Ok(Some(UnionExec::try_new(inputs)?))
    }

    /// One range's scan of `files` and its filter.
    fn range_input(
        &self,
        mut files: Vec<PartitionedFile>,
        low: Option<&ScalarValue>,
        high: Option<&ScalarValue>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut config = FileScanConfigBuilder::from(self.config.clone());
        if files.is_empty() {
            // No row group starts in the file's first byte: reads nothing.
            files.push(self.files[0].0.clone().with_range(0, 1));
        }
        if files.len() > 1 {
            // Files may hold overlapping keys: read one after another they
            // are not in key order.
            config = config.with_output_ordering(vec![]);
        }
        let config = config.with_file_groups(vec![FileGroup::new(files)]).build();
        let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
        let key: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&self.name, self.column));
        let compare = |op, value: &ScalarValue| -> Arc<dyn PhysicalExpr> {
            Arc::new(BinaryExpr::new(
                Arc::clone(&key),
                op,
                Arc::new(Literal::new(value.clone())),
            ))
        };
        let predicate = match (low, high) {
            (None, None) => return Ok(scan),
            (None, Some(high)) => compare(Operator::Lt, high),
            (Some(low), None) => compare(Operator::GtEq, low),
            (Some(low), Some(high)) => Arc::new(BinaryExpr::new(
                compare(Operator::GtEq, low),
                Operator::And,
                compare(Operator::Lt, high),
            )),
        };
        Ok(Arc::new(FilterExec::try_new(predicate, scan)?))
    }
}

/// The files `config` reads, each whole (a range pruned away at planning
/// holds no row group its predicate can match: read again, its reader
/// prunes it again); `None` when they are too many.
fn whole_files(config: &FileScanConfig) -> Option<Vec<PartitionedFile>> {
    let mut files: HashMap<String, PartitionedFile> = HashMap::new();
    for file in config.file_groups.iter().flat_map(FileGroup::iter) {
        if !file.partition_values.is_empty() {
            return None;
        }
        files
            .entry(file.object_meta.location.to_string())
            .or_insert_with(|| {
                let mut whole = PartitionedFile::new(
                    file.object_meta.location.to_string(),
                    file.object_meta.size,
                );
                whole.object_meta = file.object_meta.clone();
                whole
            });
    }
    if files.len() > MAX_FILES {
        return None;
    }
    let mut files: Vec<(String, PartitionedFile)> = files.into_iter().collect();
    files.sort_by(|(a, _), (b, _)| a.cmp(b));
    Some(files.into_iter().map(|(_, file)| file).collect())
}

fn is_discrete(data_type: &DataType) -> bool {
    data_type.is_integer() || matches!(data_type, DataType::Date32 | DataType::Date64)
}
