//! What a write answers: one row per part file it wrote (its path in the
//! store, bytes and rows), then one row without a path carrying how many
//! rows matched a rewrite's predicate (`RowFlag`). The coordinator commits
//! the files and sums the matches.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, AsArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use datafusion::common::{internal_err, Result};
use object_store::path::Path;

use super::part_file::WrittenFile;

/// The files one write produced and the rows it counted as matched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub files: Vec<WrittenFile>,
    pub flagged: u64,
}

impl Written {
    /// Adds what another partition (or batch of answers) wrote.
    pub fn extend(&mut self, other: Written) {
        self.files.extend(other.files);
        self.flagged += other.flagged;
    }

    pub fn rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows).sum()
    }
}

static WRITTEN_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, true),
        Field::new("bytes", DataType::UInt64, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("flagged", DataType::UInt64, false),
    ]))
});

/// The schema of a write's answer.
pub fn written_schema() -> SchemaRef {
    Arc::clone(&WRITTEN_SCHEMA)
}

/// `written` as a write answers it.
pub fn written_batch(written: &Written) -> Result<RecordBatch> {
    let files = written.files.iter();
    let paths = files
        .clone()
        .map(|f| Some(f.location.to_string()))
        .chain([None]);
    let bytes = files.clone().map(|f| f.bytes).chain([0]);
    let rows = files.map(|f| f.rows).chain([0]);
    let flagged = written.files.iter().map(|_| 0).chain([written.flagged]);
    Ok(RecordBatch::try_new(
        written_schema(),
        vec![
            Arc::new(StringArray::from_iter(paths)),
            Arc::new(UInt64Array::from_iter_values(bytes)),
            Arc::new(UInt64Array::from_iter_values(rows)),
            Arc::new(UInt64Array::from_iter_values(flagged)),
        ],
    )?)
}

/// What a batch of a write's answer says.
pub fn read_written(batch: &RecordBatch) -> Result<Written> {
    if batch.num_columns() != 4 {
        return internal_err!("a write answered {} columns, not 4", batch.num_columns());
    }
    let (Some(paths), Some(bytes), Some(rows), Some(flagged)) = (
        batch.column(0).as_string_opt::<i32>(),
        batch.column(1).as_primitive_opt::<UInt64Type>(),
        batch.column(2).as_primitive_opt::<UInt64Type>(),
        batch.column(3).as_primitive_opt::<UInt64Type>(),
    ) else {
        return internal_err!("a write answered columns of other types");
    };
    let mut written = Written::default();
    for i in 0..batch.num_rows() {
        written.flagged += flagged.value(i);
        if paths.is_valid(i) {
            written.files.push(WrittenFile {
                location: Path::from(paths.value(i)),
                bytes: bytes.value(i),
                rows: rows.value(i),
            });
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_as_written() {
        let written = Written {
            files: vec![
                WrittenFile {
                    location: Path::from("w/tables/t/part-a-00000-0-0.parquet"),
                    bytes: 100,
                    rows: 7,
                },
                WrittenFile {
                    location: Path::from("w/tables/t/part-a-00000-0-1.parquet"),
                    bytes: 50,
                    rows: 3,
                },
            ],
            flagged: 4,
        };
        let batch = written_batch(&written).unwrap();
        assert_eq!(batch.num_rows(), 3);
        assert_eq!(read_written(&batch).unwrap(), written);
        let nothing = written_batch(&Written::default()).unwrap();
        assert_eq!(read_written(&nothing).unwrap(), Written::default());
    }
}
