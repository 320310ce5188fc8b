//! Writing rows into a created table's directory as one Parquet file.
//!
//! The file is written under a temporary name the table's listing ignores
//! and renamed into place once complete, so a failed or interrupted write
//! leaves no partial data in the table.

use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::AsyncArrowWriter;
use futures::{Stream, StreamExt};
use tonic::Status;

fn io_error(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what}: {e}"))
}

/// Writes `batches` (all of `schema`) into a new file in `dir`; returns the
/// file and the rows written. The file exists, empty of rows but carrying
/// the schema, even when there are no batches.
pub async fn write_parquet<S>(
    dir: &Path,
    schema: SchemaRef,
    batches: S,
) -> Result<(PathBuf, u64), Status>
where
    S: Stream<Item = Result<RecordBatch, Status>>,
{
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io_error(&format!("creating {}", dir.display()), e))?;
    let name = format!("part-{}.parquet", uuid::Uuid::new_v4().simple());
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

async fn write_file<S>(path: &Path, schema: SchemaRef, batches: S) -> Result<u64, Status>
where
    S: Stream<Item = Result<RecordBatch, Status>>,
{
    let file = tokio::fs::File::create(path)
        .await
        .map_err(|e| io_error(&format!("creating {}", path.display()), e))?;
    let mut writer = AsyncArrowWriter::try_new(file, schema.clone(), None)
        .map_err(|e| io_error("starting a Parquet file", e))?;
    let mut rows = 0u64;
    let mut batches = std::pin::pin!(batches);
    while let Some(batch) = batches.next().await {
        let batch = as_table_rows(batch?, &schema)?;
        rows += batch.num_rows() as u64;
        writer
            .write(&batch)
            .await
            .map_err(|e| io_error("writing Parquet", e))?;
    }
    writer
        .close()
        .await
        .map_err(|e| io_error("finishing Parquet", e))?;
    Ok(rows)
}

/// `batch` under the table's `schema`: its columns may be nullable where
/// the table's are not (a computed value), as long as they hold no NULL.
fn as_table_rows(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, Status> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    for (i, (field, column)) in schema.fields().iter().zip(batch.columns()).enumerate() {
        if !field.is_nullable() && column.null_count() > 0 {
            // DataFusion's words (clients and its tests match them).
            return Err(Status::invalid_argument(format!(
                "Execution error: Invalid batch column at '{i}' has null but schema specifies non-nullable"
            )));
        }
    }
    RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| {
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
        let (path, rows) = write_parquet(
            dir.path(),
            schema(),
            futures::stream::iter(vec![Ok(batch.clone()), Ok(batch)]),
        )
        .await
        .unwrap();
        assert_eq!(rows, 6);
        assert!(path.exists());

        let failing = futures::stream::iter(vec![Err(Status::cancelled("client went away"))]);
        let err = write_parquet(dir.path(), schema(), failing)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Cancelled);
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "only the first file remains");
    }
}
