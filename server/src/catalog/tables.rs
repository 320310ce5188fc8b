//! Tables given on the command line: `NAME=PATH` or `NAME=PATH:FORMAT`.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::Constraints;
use datafusion::common::Result;
use datafusion::datasource::file_format::options::ReadOptions;
use datafusion::datasource::listing::{ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};

use crate::planner::client_types::client_schema;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    Parquet,
    Csv,
}

/// One `--table` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub name: String,
    pub path: PathBuf,
    pub format: TableFormat,
}

impl FromStr for TableSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=PATH[:FORMAT], got {s:?}"))?;
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("table name {name:?} must be letters, digits or _"));
        }
        let (path, format) = match rest.rsplit_once(':') {
            Some((path, f)) if parse_format(f).is_some() => (path, parse_format(f)),
            _ => (rest, None),
        };
        let path = PathBuf::from(path);
        let format = match format {
            Some(f) => f,
            None => format_from_path(&path)?,
        };
        Ok(Self {
            name: name.to_string(),
            path,
            format,
        })
    }
}

fn parse_format(s: &str) -> Option<TableFormat> {
    match s.to_ascii_lowercase().as_str() {
        "parquet" => Some(TableFormat::Parquet),
        "csv" => Some(TableFormat::Csv),
        _ => None,
    }
}

/// The format of a file from its extension, or of a directory from the
/// first data file in it.
fn format_from_path(path: &Path) -> Result<TableFormat, String> {
    let from_ext = |p: &Path| {
        p.extension()
            .and_then(|e| e.to_str())
            .and_then(parse_format)
    };
    if let Some(f) = from_ext(path) {
        return Ok(f);
    }
    if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        if let Some(f) = names.iter().find_map(|p| from_ext(p)) {
            return Ok(f);
        }
    }
    Err(format!(
        "cannot tell the format of {}: add :parquet or :csv",
        path.display()
    ))
}

impl TableSpec {
    /// Registers the table; workers read the same path.
    pub async fn register(&self, ctx: &SessionContext) -> Result<()> {
        self.register_with_keys(ctx, Constraints::default()).await
    }

    /// Registers the table with the keys its `CREATE TABLE` declared:
    /// DataFusion plans with them (functional dependencies let `GROUP BY
    /// key` select other columns; a correlated subquery on a key returns
    /// at most one row). Like DataFusion's own tables, nothing enforces
    /// them.
    pub async fn register_with_keys(&self, ctx: &SessionContext, keys: Constraints) -> Result<()> {
        let path = std::path::absolute(&self.path)?;
        let mut path = path.to_string_lossy().to_string();
        if self.path.is_dir() && !path.ends_with('/') {
            // DataFusion treats a trailing slash as "every file in here".
            path.push('/');
        }
        match self.format {
            TableFormat::Parquet => {
                let schema = plain_schema(ctx, &path).await?;
                let options = ParquetReadOptions::default()
                    .schema(&schema)
                    .to_listing_options(&ctx.copied_config(), ctx.copied_table_options());
                let config = ListingTableConfig::new(ListingTableUrl::parse(&path)?)
                    .with_listing_options(options)
                    .with_schema(Arc::new(schema));
                let table = ListingTable::try_new(config)?.with_constraints(keys);
                ctx.register_table(self.name.as_str(), Arc::new(table))?;
                Ok(())
            }
            TableFormat::Csv => {
                let options = CsvReadOptions::new().has_header(true);
                ctx.register_csv(&self.name, &path, options).await
            }
        }
    }
}

/// The Parquet files' schema with string and binary views as plain
/// `Utf8`/`Binary`. Writers such as tpchgen embed view types in the file's
/// Arrow schema; read as views, every string column was decoded into views
/// and then cast for the client (and shipped as views between workers).
/// Declared plain, the reader decodes straight into the type clients get.
async fn plain_schema(ctx: &SessionContext, path: &str) -> Result<Schema> {
    let table_path = ListingTableUrl::parse(path)?;
    let options = ParquetReadOptions::default()
        .to_listing_options(&ctx.copied_config(), ctx.copied_table_options());
    let inferred = options.infer_schema(&ctx.state(), &table_path).await?;
    Ok(client_schema(&inferred))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn parses_name_path_and_format() {
        let t: TableSpec = "t=/data/x.parquet".parse().unwrap();
        assert_eq!(t.name, "t");
        assert_eq!(t.path, PathBuf::from("/data/x.parquet"));
        assert_eq!(t.format, TableFormat::Parquet);
        let t: TableSpec = "t=/data/x.txt:csv".parse().unwrap();
        assert_eq!(t.format, TableFormat::Csv);
        assert_eq!(t.path, PathBuf::from("/data/x.txt"));
        let t: TableSpec = "t=/data/x.CSV".parse().unwrap();
        assert_eq!(t.format, TableFormat::Csv);
    }

    #[test]
    fn rejects_bad_specs() {
        assert!("no-equals".parse::<TableSpec>().is_err());
        assert!("bad name=/x.parquet".parse::<TableSpec>().is_err());
        assert!("t=/nowhere/x.unknown".parse::<TableSpec>().is_err());
    }

    #[tokio::test]
    async fn parquet_view_columns_are_served_as_plain_strings() {
        use datafusion::arrow::array::{RecordBatch, StringViewArray};
        use datafusion::arrow::datatypes::DataType;
        use datafusion::parquet::arrow::ArrowWriter;

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("views.parquet");
        let batch = RecordBatch::try_from_iter([(
            "s",
            Arc::new(StringViewArray::from(vec![
                "a",
                "a string longer than twelve bytes",
            ])) as _,
        )])
        .unwrap();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), batch.schema(), None)
                .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();

        let ctx = SessionContext::new();
        let spec: TableSpec = format!("t={}", file.display()).parse().unwrap();
        spec.register(&ctx).await.unwrap();
        let batches = ctx
            .sql("SELECT s FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(batches[0].schema().field(0).data_type(), &DataType::Utf8);
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 2);
    }

    #[test]
    fn directory_format_comes_from_its_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part-0.csv"), "a\n1\n").unwrap();
        let spec: TableSpec = format!("t={}", dir.path().display()).parse().unwrap();
        assert_eq!(spec.format, TableFormat::Csv);
    }
}
