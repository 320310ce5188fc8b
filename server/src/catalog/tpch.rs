//! TPC-H sample data, generated with `tpchgen` into Parquet files.

use std::fs::File;
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchReader;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use super::tables::{TableFormat, TableSpec};
use squadron_storage::format::parquet_layout::laid_out_for;

/// Rows per Parquet row group. Scans are split across tasks by byte range,
/// and a row group is read by the task whose range holds its start: small
/// groups let even the little test tables spread over every task.
const ROW_GROUP_ROWS: usize = 16 * 1024;

pub const TABLES: [&str; 8] = [
    "customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier",
];

/// The columns each table's rows are generated in, ascending: `tpchgen`
/// emits every table by its key (a part's four `partsupp` rows by part
/// only, their suppliers are spread). Written into the files' row group
/// metadata (`sorting_columns`), from which DataFusion takes the scan's
/// order: an aggregate grouped by the key (q18's `l_orderkey`, 15 M groups
/// at SF10) then streams instead of hashing every group.
fn sort_order(table: &str) -> &'static [&'static str] {
    match table {
        "customer" => &["c_custkey"],
        "lineitem" => &["l_orderkey", "l_linenumber"],
        "nation" => &["n_nationkey"],
        "orders" => &["o_orderkey"],
        "part" => &["p_partkey"],
        "partsupp" => &["ps_partkey"],
        "region" => &["r_regionkey"],
        "supplier" => &["s_suppkey"],
        _ => &[],
    }
}

/// Writes the 8 TPC-H tables at `scale` into `dir/<table>.parquet`, keeping
/// files that already exist (the data for a scale is deterministic) unless
/// they were written before their order was recorded. Returns the table
/// specs to register.
pub fn generate(dir: &Path, scale: f64) -> anyhow::Result<Vec<TableSpec>> {
    std::fs::create_dir_all(dir)?;
    TABLES
        .iter()
        .map(|table| {
            let path = dir.join(format!("{table}.parquet"));
            if !path.exists() || !records_its_order(&path)? {
                write_table(table, scale, &path)?;
            }
            Ok(TableSpec {
                name: table.to_string(),
                location: path.to_string_lossy().to_string(),
                format: Some(TableFormat::Parquet),
            })
        })
        .collect()
}

fn batches(table: &str, scale: f64) -> Box<dyn RecordBatchReader> {
    match table {
        "customer" => Box::new(CustomerArrow::new(CustomerGenerator::new(scale, 1, 1))),
        "lineitem" => Box::new(LineItemArrow::new(LineItemGenerator::new(scale, 1, 1))),
        "nation" => Box::new(NationArrow::new(NationGenerator::new(scale, 1, 1))),
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(scale, 1, 1))),
        "part" => Box::new(PartArrow::new(PartGenerator::new(scale, 1, 1))),
        "partsupp" => Box::new(PartSuppArrow::new(PartSuppGenerator::new(scale, 1, 1))),
        "region" => Box::new(RegionArrow::new(RegionGenerator::new(scale, 1, 1))),
        "supplier" => Box::new(SupplierArrow::new(SupplierGenerator::new(scale, 1, 1))),
        other => unreachable!("not a TPC-H table: {other}"),
    }
}

/// `table`'s `sort_order` as Parquet sorting columns of `schema`.
fn sorting_columns(table: &str, schema: &SchemaRef) -> anyhow::Result<Vec<SortingColumn>> {
    sort_order(table)
        .iter()
        .map(|name| {
            Ok(SortingColumn {
                column_idx: i32::try_from(schema.index_of(name)?)?,
                descending: false,
                nulls_first: false,
            })
        })
        .collect()
}

/// Whether the file at `path` records its sort order (files written
/// before it was recorded are written again).
fn records_its_order(path: &Path) -> anyhow::Result<bool> {
    let reader = SerializedFileReader::new(File::open(path)?)?;
    let metadata = reader.metadata();
    Ok(metadata.num_row_groups() == 0
        || metadata
            .row_group(0)
            .sorting_columns()
            .is_some_and(|columns| !columns.is_empty()))
}

fn write_table(table: &str, scale: f64, path: &Path) -> anyhow::Result<()> {
    let mut source = batches(table, scale);
    let schema: SchemaRef = source.schema();
    // Written aside and renamed, so an interrupted run never leaves a
    // truncated file that would be reused.
    let partial = PathBuf::from(format!("{}.partial", path.display()));
    // Each column's encoding is chosen from the first batch's values.
    let first = source.next().transpose()?;
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_sorting_columns(Some(sorting_columns(table, &schema)?));
    if let Some(first) = &first {
        builder = laid_out_for(first, builder);
    }
    let mut writer = ArrowWriter::try_new(File::create(&partial)?, schema, Some(builder.build()))?;
    for batch in first.into_iter().map(Ok).chain(source.by_ref()) {
        writer.write(&batch?)?;
    }
    writer.close()?;
    std::fs::rename(&partial, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::compute::concat_batches;
    use datafusion::arrow::row::{RowConverter, SortField};
    use datafusion::prelude::SessionContext;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// The order the files record is the order their rows are in: a
    /// recorded order that is false would make DataFusion's streaming
    /// aggregates and merges answer wrongly.
    #[tokio::test]
    async fn each_table_is_sorted_as_its_file_records_and_scans_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let specs = generate(dir.path(), 0.01).unwrap();
        let ctx = SessionContext::new();
        for spec in &specs {
            let path = dir.path().join(format!("{}.parquet", spec.name));
            assert!(records_its_order(&path).unwrap(), "{}", spec.name);
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
                .unwrap()
                .build()
                .unwrap();
            let schema = reader.schema();
            let batches = reader.collect::<Result<Vec<_>, _>>().unwrap();
            let all = concat_batches(&schema, &batches).unwrap();
            assert!(all.num_rows() > 1, "{}", spec.name);
            let keys: Vec<_> = sort_order(&spec.name)
                .iter()
                .map(|name| all.column(schema.index_of(name).unwrap()).clone())
                .collect();
            let fields = keys
                .iter()
                .map(|k| SortField::new(k.data_type().clone()))
                .collect();
            let rows = RowConverter::new(fields)
                .unwrap()
                .convert_columns(&keys)
                .unwrap();
            let unsorted = (1..rows.num_rows()).find(|&i| rows.row(i - 1) > rows.row(i));
            assert_eq!(
                unsorted, None,
                "{}: a row before its predecessor",
                spec.name
            );

            spec.register(&ctx).await.unwrap();
            let explained = ctx
                .sql(&format!("EXPLAIN SELECT * FROM {}", spec.name))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let text = datafusion::arrow::util::pretty::pretty_format_batches(&explained)
                .unwrap()
                .to_string();
            let first = sort_order(&spec.name)[0];
            assert!(
                text.contains(&format!("output_ordering=[{first}@")),
                "{}: the scan declares no order:\n{text}",
                spec.name
            );
        }
    }

    #[test]
    fn a_file_written_before_its_order_was_recorded_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nation.parquet");
        let mut source = batches("nation", 1.0);
        let props = WriterProperties::builder().build();
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), source.schema(), Some(props))
                .unwrap();
        for batch in source.by_ref() {
            writer.write(&batch.unwrap()).unwrap();
        }
        writer.close().unwrap();
        assert!(!records_its_order(&path).unwrap());
        generate(dir.path(), 0.01).unwrap();
        assert!(records_its_order(&path).unwrap(), "written again");
    }
}
