//! Writing rows into a created table's directory as one file: Parquet,
//! or Arrow IPC for a table with a column Parquet cannot hold.
//!
//! The file is written under a temporary name the table's listing ignores
//! and renamed into place once complete, so a failed or interrupted write
//! leaves no partial data in the table.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalUnit, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::parquet::arrow::AsyncArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tonic::Status;

use crate::catalog::parquet_layout::laid_out_for;
use crate::catalog::TableFormat;

fn io_error(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what}: {e}"))
}

/// How a table of `schema` is kept: Parquet, unless a column has a type
/// Parquet cannot hold (an interval with nanoseconds, a union); then Arrow
/// IPC, which holds every Arrow type.
pub fn stored_format(schema: &Schema) -> TableFormat {
    if schema.fields().iter().all(|f| parquet_holds(f.data_type())) {
        TableFormat::Parquet
    } else {
        TableFormat::Arrow
    }
}

fn parquet_holds(data_type: &DataType) -> bool {
    match data_type {
        DataType::Interval(IntervalUnit::MonthDayNano) | DataType::Union(..) => false,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::Map(f, _) => parquet_holds(f.data_type()),
        DataType::Struct(fields) => fields.iter().all(|f| parquet_holds(f.data_type())),
        DataType::Dictionary(_, values) => parquet_holds(values),
        DataType::RunEndEncoded(_, values) => parquet_holds(values.data_type()),
        _ => true,
    }
}

/// Refuses a column no file format holds: a dictionary whose values are
/// dictionaries (neither Parquet nor Arrow IPC encodes one).
fn check_storable(schema: &Schema) -> Result<(), Status> {
    fn nested_dictionary(data_type: &DataType) -> bool {
        match data_type {
            DataType::Dictionary(_, values) => {
                matches!(**values, DataType::Dictionary(..)) || nested_dictionary(values)
            }
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => nested_dictionary(f.data_type()),
            DataType::Struct(fields) => fields.iter().any(|f| nested_dictionary(f.data_type())),
            _ => false,
        }
    }
    match schema
        .fields()
        .iter()
        .find(|f| nested_dictionary(f.data_type()))
    {
        Some(field) => Err(Status::unimplemented(format!(
            "column {} ({}): a dictionary of dictionaries cannot be stored in a table's files",
            field.name(),
            field.data_type()
        ))),
        None => Ok(()),
    }
}

/// The format of the files a created table's `dir` holds.
pub fn format_in(dir: &Path) -> TableFormat {
    let arrow = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(TableFormat::Arrow.extension())
        });
    if arrow {
        TableFormat::Arrow
    } else {
        TableFormat::Parquet
    }
}

/// Writes `batches` into a new file in `dir`, as a table of `schema`
/// (`stored_format`); returns the file and the rows written. The file
/// exists, empty of rows but carrying the schema, even when there are no
/// batches.
pub async fn write_rows<S>(
    dir: &Path,
    schema: SchemaRef,
    batches: S,
) -> Result<(PathBuf, u64), Status>
where
    S: Stream<Item = Result<RecordBatch, Status>>,
{
    check_storable(&schema)?;
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io_error(&format!("creating {}", dir.display()), e))?;
    let extension = stored_format(&schema).extension();
    let name = format!("part-{}{extension}", uuid::Uuid::new_v4().simple());
    let tmp = dir.join(format!(".{name}.tmp"));
    let result = write_file(&tmp, schema, batches).await;
    match result {
        Ok(rows) => {
            let path = dir.join(name);
            tokio::fs::rename(&tmp, &path)
                .await
                .map_err(|e| io_error("finishing the file", e))?;
            Ok((path, rows))
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            Err(e)
        }
    }
}

fn parquet_properties(sample: Option<&RecordBatch>) -> WriterProperties {
    let builder = WriterProperties::builder();
    match sample {
        Some(sample) => laid_out_for(sample, builder).build(),
        None => builder.build(),
    }
}

/// One file being written.
enum TableFile {
    Parquet(AsyncArrowWriter<tokio::fs::File>),
    /// Arrow IPC is encoded into a buffer that is moved to the file after
    /// each batch (the IPC writer is synchronous).
    Arrow(FileWriter<Vec<u8>>, tokio::fs::File),
}

impl TableFile {
    /// A file for rows of `schema`; `sample`, the first rows, lays out a
    /// Parquet file's columns (`laid_out_for`).
    async fn create(
        path: &Path,
        schema: &SchemaRef,
        sample: Option<&RecordBatch>,
    ) -> Result<Self, Status> {
        let file = tokio::fs::File::create(path)
            .await
            .map_err(|e| io_error(&format!("creating {}", path.display()), e))?;
        Ok(match stored_format(schema) {
            TableFormat::Arrow => Self::Arrow(
                FileWriter::try_new(Vec::new(), schema)
                    .map_err(|e| io_error("starting an Arrow file", e))?,
                file,
            ),
            _ => Self::Parquet(
                AsyncArrowWriter::try_new(file, schema.clone(), Some(parquet_properties(sample)))
                    .map_err(|e| io_error("starting a Parquet file", e))?,
            ),
        })
    }

    async fn write(&mut self, batch: &RecordBatch) -> Result<(), Status> {
        match self {
            Self::Parquet(writer) => writer
                .write(batch)
                .await
                .map_err(|e| io_error("writing Parquet", e)),
            Self::Arrow(writer, file) => {
                writer
                    .write(batch)
                    .map_err(|e| io_error("writing Arrow IPC", e))?;
                drain(writer, file).await
            }
        }
    }

    async fn finish(self) -> Result<(), Status> {
        match self {
            Self::Parquet(writer) => writer
                .close()
                .await
                .map(|_| ())
                .map_err(|e| io_error("finishing Parquet", e)),
            Self::Arrow(mut writer, mut file) => {
                writer
                    .finish()
                    .map_err(|e| io_error("finishing Arrow IPC", e))?;
                drain(&mut writer, &mut file).await?;
                file.flush()
                    .await
                    .map_err(|e| io_error("finishing Arrow IPC", e))
            }
        }
    }
}

async fn drain(writer: &mut FileWriter<Vec<u8>>, file: &mut tokio::fs::File) -> Result<(), Status> {
    let bytes = std::mem::take(writer.get_mut());
    file.write_all(&bytes)
        .await
        .map_err(|e| io_error("writing Arrow IPC", e))
}

async fn write_file<S>(path: &Path, schema: SchemaRef, batches: S) -> Result<u64, Status>
where
    S: Stream<Item = Result<RecordBatch, Status>>,
{
    let mut batches = std::pin::pin!(batches);
    // The first rows choose how each Parquet column is encoded (empty
    // batches, which write nothing, are passed over).
    let mut first = None;
    while let Some(batch) = batches.next().await {
        let batch = as_table_rows(batch?, &schema)?;
        if batch.num_rows() > 0 {
            first = Some(batch);
            break;
        }
    }
    let mut file = TableFile::create(path, &schema, first.as_ref()).await?;
    let mut rows = 0u64;
    let mut batches = futures::stream::iter(first.map(Ok)).chain(batches);
    while let Some(batch) = batches.next().await {
        let batch = as_table_rows(batch?, &schema)?;
        rows += batch.num_rows() as u64;
        file.write(&batch).await?;
    }
    file.finish().await?;
    Ok(rows)
}

/// `batch` under the table's `schema`: its columns may be nullable where
/// the table's are not (a computed value), as long as they hold no NULL,
/// and come as clients receive them (a dictionary hydrated, a view as a
/// plain string), cast back to the table's types here.
fn as_table_rows(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, Status> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, (field, column)) in schema.fields().iter().zip(batch.columns()).enumerate() {
        if !field.is_nullable() && column.null_count() > 0 {
            // DataFusion's words (clients and its tests match them).
            return Err(Status::invalid_argument(format!(
                "Execution error: Invalid batch column at '{i}' has null but schema specifies non-nullable"
            )));
        }
        if column.data_type() == field.data_type() {
            columns.push(Arc::clone(column));
        } else {
            columns.push(cast(column, field.data_type()).map_err(|e| {
                Status::invalid_argument(format!("rows do not match the table's columns: {e}"))
            })?);
        }
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
        Status::invalid_argument(format!("rows do not match the table's columns: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]))
    }

    #[tokio::test]
    async fn rows_land_in_one_file_and_failures_leave_none() {
        let dir = tempfile::tempdir().unwrap();
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(vec![1, 2, 3]))])
            .unwrap();
        let (path, rows) = write_rows(
            dir.path(),
            schema(),
            futures::stream::iter(vec![Ok(batch.clone()), Ok(batch)]),
        )
        .await
        .unwrap();
        assert_eq!(rows, 6);
        assert!(path.exists());

        let failing = futures::stream::iter(vec![Err(Status::cancelled("client went away"))]);
        let err = write_rows(dir.path(), schema(), failing).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Cancelled);
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "only the first file remains");
    }

    #[tokio::test]
    async fn a_written_column_of_unique_keys_is_plain_in_small_pages() {
        use datafusion::parquet::file::reader::FileReader;
        use datafusion::parquet::file::serialized_reader::{
            ReadOptionsBuilder, SerializedFileReader,
        };
        let keys = Int64Array::from_iter_values(0..50_000);
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(keys)]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let batches = vec![Ok(batch.slice(0, 0)), Ok(batch)];
        let (path, rows) = write_rows(dir.path(), schema(), futures::stream::iter(batches))
            .await
            .unwrap();
        assert_eq!(rows, 50_000);
        let options = ReadOptionsBuilder::new().with_page_index().build();
        let reader =
            SerializedFileReader::new_with_options(std::fs::File::open(path).unwrap(), options)
                .unwrap();
        let chunk = reader.metadata().row_group(0).column(0);
        assert!(chunk.dictionary_page_offset().is_none(), "{chunk:?}");
        let pages = reader.metadata().offset_index().unwrap()[0][0]
            .page_locations()
            .len();
        assert!(pages > 10, "{pages} pages: a lookup would decode them all");
    }

    #[tokio::test]
    async fn a_dictionary_of_dictionaries_is_refused_before_anything_is_written() {
        let utf8 = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let nested = DataType::Dictionary(Box::new(DataType::Int32), Box::new(utf8.clone()));
        assert!(check_storable(&Schema::new(vec![Field::new("d", utf8, true)])).is_ok());
        let schema = Arc::new(Schema::new(vec![Field::new("n", nested, true)]));
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t");
        let err = write_rows(&table, schema, futures::stream::empty())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        assert!(err.message().contains("column n"), "{}", err.message());
        assert!(!table.exists());
    }

    #[tokio::test]
    async fn a_type_parquet_cannot_hold_goes_to_arrow_ipc() {
        use datafusion::arrow::array::IntervalMonthDayNanoArray;
        use datafusion::arrow::datatypes::IntervalMonthDayNano;
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
            "i",
            DataType::Interval(IntervalUnit::MonthDayNano),
            true,
        )]));
        assert_eq!(stored_format(&schema), TableFormat::Arrow);
        assert_eq!(stored_format(&super::tests::schema()), TableFormat::Parquet);
        let values = IntervalMonthDayNanoArray::from(vec![IntervalMonthDayNano::new(1, 2, 3)]);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (path, rows) = write_rows(
            dir.path(),
            schema,
            futures::stream::iter(vec![Ok(batch.clone())]),
        )
        .await
        .unwrap();
        assert_eq!((rows, format_in(dir.path())), (1, TableFormat::Arrow));
        let reader = datafusion::arrow::ipc::reader::FileReader::try_new(
            std::fs::File::open(path).unwrap(),
            None,
        )
        .unwrap();
        let read: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        assert_eq!(read, vec![batch]);
    }
}
