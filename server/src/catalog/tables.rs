//! Tables given on the command line: `NAME=LOCATION` or
//! `NAME=LOCATION:FORMAT`. A location is a local file or directory, or an
//! object store URL (`s3://bucket/path/`); a directory's `key=value/`
//! subdirectories become partition columns, pruned by filters on them.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::avro::AvroFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::delta::DeltaTable;
use squadron_planner::client_types::client_schema;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    Parquet,
    Csv,
    /// Newline-delimited JSON.
    Json,
    Avro,
    /// Arrow IPC files.
    Arrow,
    /// A Delta Lake table: Parquet files listed by a transaction log.
    Delta,
}

/// How the formats are named after a `:`, for error messages.
const FORMAT_NAMES: &str = "parquet, csv, json, avro, arrow or delta";

impl TableFormat {
    fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "parquet" => Some(Self::Parquet),
            "csv" => Some(Self::Csv),
            "json" | "ndjson" => Some(Self::Json),
            "avro" => Some(Self::Avro),
            "arrow" | "ipc" | "feather" => Some(Self::Arrow),
            "delta" => Some(Self::Delta),
            _ => None,
        }
    }

    /// The format a file name's extension says, if any.
    fn of_file(name: &str) -> Option<Self> {
        let (_, extension) = name.rsplit_once('.')?;
        Self::parse(extension).filter(|format| *format != Self::Delta)
    }

    /// The extension files of this format have in a directory.
    pub(crate) fn extension(self) -> &'static str {
        match self {
            Self::Parquet | Self::Delta => ".parquet",
            Self::Csv => ".csv",
            Self::Json => ".json",
            Self::Avro => ".avro",
            Self::Arrow => ".arrow",
        }
    }

    /// The reader, with the session's options for its format (Parquet
    /// pruning, CSV quoting and so on).
    fn file_format(self, ctx: &SessionContext) -> Arc<dyn FileFormat> {
        let options = ctx.copied_table_options();
        match self {
            Self::Parquet | Self::Delta => {
                Arc::new(ParquetFormat::default().with_options(options.parquet))
            }
            Self::Csv => Arc::new(
                CsvFormat::default()
                    .with_options(options.csv)
                    .with_has_header(true),
            ),
            Self::Json => Arc::new(JsonFormat::default().with_options(options.json)),
            Self::Avro => Arc::new(AvroFormat),
            Self::Arrow => Arc::new(ArrowFormat),
        }
    }
}

/// One `--table` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub name: String,
    /// A local path or an object store URL.
    pub location: String,
    /// `None`: told from the files found at `location` when registering.
    pub format: Option<TableFormat>,
}

impl FromStr for TableSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=LOCATION[:FORMAT], got {s:?}"))?;
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("table name {name:?} must be letters, digits or _"));
        }
        let (location, format) = match rest.rsplit_once(':') {
            Some((location, f)) if TableFormat::parse(f).is_some() => {
                (location, TableFormat::parse(f))
            }
            _ => (rest, None),
        };
        if location.is_empty() {
            return Err(format!("table {name}: no location"));
        }
        // Otherwise the extension of a file says it, or the files of a
        // directory when the table is registered.
        let format = format.or_else(|| TableFormat::of_file(location));
        Ok(Self {
            name: name.to_string(),
            location: location.to_string(),
            format,
        })
    }
}

impl TableSpec {
    /// Registers the table; workers read the same location. Its string
    /// views and dictionaries read as the plain types clients receive
    /// (views ship badly across processes; see the coordinator's session
    /// config).
    pub async fn register(&self, ctx: &SessionContext) -> Result<()> {
        let url = ListingTableUrl::parse(self.absolute_location()?)?;
        let format = match self.format {
            Some(format) => format,
            None => format_of_files(ctx, &url).await?,
        };
        let state = ctx.state();
        if format == TableFormat::Delta {
            let table = DeltaTable::open(&state, url.as_str()).await?;
            ctx.register_table(self.name.as_str(), Arc::new(table))?;
            return Ok(());
        }
        // A directory holds other files too (`_SUCCESS`, checksums): only
        // the format's own are read. A file named directly is read as is.
        let extension = if url.is_collection() {
            format.extension()
        } else {
            ""
        };
        let options = ListingOptions::new(format.file_format(ctx)).with_file_extension(extension);
        let partitions = options.infer_partitions(&state, &url).await?;
        // Partition values are text in the path; plain strings are what
        // every client reads.
        let options = options.with_table_partition_cols(
            partitions
                .into_iter()
                .map(|column| (column, DataType::Utf8))
                .collect(),
        );
        let inferred = options.infer_schema(&state, &url).await?;
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(Arc::new(client_schema(inferred.as_ref())));
        // Per-file statistics are read from the files' footers on every
        // scan unless cached (as DataFusion's own CREATE EXTERNAL TABLE
        // does); the cache checks each file's size and modification time.
        let statistics = state.runtime_env().cache_manager.get_file_statistic_cache();
        let table = ListingTable::try_new(config)?.with_cache(statistics);
        ctx.register_table(self.name.as_str(), Arc::new(table))?;
        Ok(())
    }

    /// An object store URL as given; a local path made absolute, a
    /// directory with the trailing slash DataFusion reads as "every file
    /// in here".
    fn absolute_location(&self) -> Result<String> {
        if self.location.contains("://") {
            return Ok(self.location.clone());
        }
        let path = std::path::absolute(&self.location)?;
        let mut text = path.to_string_lossy().to_string();
        if Path::new(&self.location).is_dir() && !text.ends_with('/') {
            text.push('/');
        }
        Ok(text)
    }
}

/// The format of a directory's files: Delta when it has a Delta log, else
/// that of the first file with a known extension.
async fn format_of_files(ctx: &SessionContext, url: &ListingTableUrl) -> Result<TableFormat> {
    let state = ctx.state();
    let store = state.runtime_env().object_store(url)?;
    if url.is_collection() {
        let log = url.prefix().clone().join("_delta_log");
        if let Some(entry) = store.list(Some(&log)).next().await {
            entry?;
            return Ok(TableFormat::Delta);
        }
    }
    let mut files = url.list_all_files(&state, store.as_ref(), "").await?;
    while let Some(file) = files.next().await {
        let file = file?;
        if let Some(format) = file.location.filename().and_then(TableFormat::of_file) {
            return Ok(format);
        }
    }
    Err(DataFusionError::Plan(format!(
        "cannot tell the format of {}: no file with a known extension; add :{FORMAT_NAMES}",
        url.as_str()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn parses_name_location_and_format() {
        let t: TableSpec = "t=/data/x.parquet".parse().unwrap();
        assert_eq!(t.name, "t");
        assert_eq!(t.location, "/data/x.parquet");
        assert_eq!(t.format, Some(TableFormat::Parquet));
        let t: TableSpec = "t=/data/x.txt:csv".parse().unwrap();
        assert_eq!(t.format, Some(TableFormat::Csv));
        assert_eq!(t.location, "/data/x.txt");
        let t: TableSpec = "t=/data/x.CSV".parse().unwrap();
        assert_eq!(t.format, Some(TableFormat::Csv));
        let t: TableSpec = "t=s3://bucket/events/:json".parse().unwrap();
        assert_eq!(t.location, "s3://bucket/events/");
        assert_eq!(t.format, Some(TableFormat::Json));
        let t: TableSpec = "t=s3://bucket/tpch-sf0.01/lineitem/".parse().unwrap();
        assert_eq!(t.format, None);
        let t: TableSpec = "t=https://host:8080/x.arrow".parse().unwrap();
        assert_eq!(t.location, "https://host:8080/x.arrow");
        assert_eq!(t.format, Some(TableFormat::Arrow));
    }

    #[test]
    fn rejects_bad_specs() {
        assert!("no-equals".parse::<TableSpec>().is_err());
        assert!("bad name=/x.parquet".parse::<TableSpec>().is_err());
        assert!("t=".parse::<TableSpec>().is_err());
    }

    #[tokio::test]
    async fn an_unknown_format_is_a_clear_error_naming_the_choices() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.unknown"), "1").unwrap();
        for location in [
            dir.path().join("x.unknown").display().to_string(),
            dir.path().display().to_string(),
        ] {
            let spec: TableSpec = format!("t={location}").parse().unwrap();
            let error = spec.register(&SessionContext::new()).await.unwrap_err();
            let text = error.to_string();
            assert!(text.contains("cannot tell the format"), "{text}");
            assert!(text.contains(FORMAT_NAMES), "{text}");
        }
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

    #[tokio::test]
    async fn hive_directories_get_partition_columns_from_their_paths() {
        let dir = tempfile::tempdir().unwrap();
        for (year, rows) in [("2023", "a,b\n1,x\n2,y\n"), ("2024", "a,b\n3,z\n")] {
            let part = dir.path().join(format!("year={year}"));
            std::fs::create_dir(&part).unwrap();
            std::fs::write(part.join("part-0.csv"), rows).unwrap();
            std::fs::write(part.join("_SUCCESS"), "").unwrap();
        }
        let ctx = SessionContext::new();
        let spec: TableSpec = format!("t={}", dir.path().display()).parse().unwrap();
        assert_eq!(spec.format, None);
        spec.register(&ctx).await.unwrap();
        let batches = ctx
            .sql("SELECT sum(a) AS s, min(year) AS y FROM t WHERE year = '2023'")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(text.contains("| 3 | 2023 |"), "{text}");
        let schema = ctx.table("t").await.unwrap().schema().inner().clone();
        assert_eq!(
            schema.field_with_name("year").unwrap().data_type(),
            &DataType::Utf8
        );
    }
}
