//! TPC-H sample data, generated with `tpchgen` into Parquet files.

use std::fs::File;
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchReader;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use super::tables::{TableFormat, TableSpec};
use squadron_exec::write::parquet_layout::laid_out_for;

/// Rows per Parquet row group. Scans are split across tasks by byte range,
/// and a row group is read by the task whose range holds its start: small
/// groups let even the little test tables spread over every task.
const ROW_GROUP_ROWS: usize = 16 * 1024;

pub const TABLES: [&str; 8] = [
    "customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier",
];

/// Writes the 8 TPC-H tables at `scale` into `dir/<table>.parquet`, keeping
/// files that already exist (the data for a scale is deterministic). Returns
/// the table specs to register.
pub fn generate(dir: &Path, scale: f64) -> anyhow::Result<Vec<TableSpec>> {
    std::fs::create_dir_all(dir)?;
    TABLES
        .iter()
        .map(|table| {
            let path = dir.join(format!("{table}.parquet"));
            if !path.exists() {
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
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
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
