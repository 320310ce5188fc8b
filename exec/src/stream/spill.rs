//! One task's spilled exchange output: batches appended to one temporary
//! file of the worker's disk manager, each read back by its place. (The
//! coordinator's result spool appends encoded Flight messages the same
//! way, with `append_bytes` and `read_bytes`.)
//!
//! Each batch is written as a complete Arrow IPC stream (schema, batch,
//! end) so any one of them can be read alone, in any order and by any
//! number of readers, while the producer still appends. The schema costs a
//! few hundred bytes per batch of about 8,192 rows. The disk manager counts
//! every byte against `--spill-limit` and deletes the file when the last
//! holder of it (the task's output, then its readers) is gone.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::disk_manager::DiskManager;
use datafusion::execution::{SpillFile, SpillWriter};

/// Where one spilled item lies in its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spilled {
    offset: u64,
    len: u64,
}

impl Spilled {
    /// Its bytes on disk.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The append end of a task's spill file.
pub struct ExchangeSpill {
    file: Arc<dyn SpillFile>,
    writer: Box<dyn SpillWriter>,
    written: u64,
}

impl ExchangeSpill {
    /// A new spill file of `disk` (refused when spilling is disabled).
    pub fn create(disk: &Arc<DiskManager>, description: &str) -> Result<Self> {
        let file = disk.create_tmp_file(description)?;
        let writer = file.open_writer()?;
        Ok(Self {
            file,
            writer,
            written: 0,
        })
    }

    /// Appends `batch`; where to read it back. Past the disk manager's
    /// limit this is RESOURCE_EXHAUSTED, naming the limit.
    pub fn append(&mut self, batch: &RecordBatch) -> Result<Spilled> {
        let mut bytes = Vec::new();
        {
            let mut ipc = StreamWriter::try_new(&mut bytes, &batch.schema())?;
            ipc.write(batch)?;
            ipc.finish()?;
        }
        self.append_bytes(&bytes)
    }

    /// Appends `bytes` as one item; where to read it back.
    pub fn append_bytes(&mut self, bytes: &[u8]) -> Result<Spilled> {
        self.writer.write_all(bytes).map_err(|e| {
            DataFusionError::ResourcesExhausted(format!(
                "cannot spill to disk (--spill-limit): {e}"
            ))
        })?;
        let spilled = Spilled {
            offset: self.written,
            len: bytes.len() as u64,
        };
        self.written += spilled.len;
        Ok(spilled)
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.written
    }

    /// A handle to read the file with; keeps it on disk while held.
    pub fn file(&self) -> Arc<dyn SpillFile> {
        Arc::clone(&self.file)
    }
}

/// Reads one spilled item of `file` back.
pub fn read_bytes(file: &Arc<dyn SpillFile>, at: Spilled) -> Result<Vec<u8>> {
    let path = file
        .path()
        .ok_or_else(|| DataFusionError::Internal("a spill file has no path".into()))?;
    let mut reader = std::fs::File::open(path)?;
    reader.seek(SeekFrom::Start(at.offset))?;
    let mut bytes = vec![0; at.len as usize];
    reader.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// Reads one spilled batch of `file` back.
pub fn read_spilled(file: &Arc<dyn SpillFile>, at: Spilled) -> Result<RecordBatch> {
    let bytes = read_bytes(file, at)?;
    let mut batches = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    batches.next().transpose()?.ok_or_else(|| {
        DataFusionError::Internal("a spilled exchange batch is missing from its file".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(from..from + rows)),
                Arc::new(StringArray::from_iter_values(
                    (from..from + rows).map(|v| format!("row {v}")),
                )),
            ],
        )
        .unwrap()
    }

    fn disk(dir: &std::path::Path, limit: u64) -> Arc<DiskManager> {
        Arc::new(
            DiskManagerBuilder::default()
                .with_mode(DiskManagerMode::Directories(vec![dir.to_path_buf()]))
                .with_max_temp_directory_size(limit)
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn spilled_batches_read_back_in_any_order_and_the_file_goes_with_its_holders() {
        let dir = tempfile::tempdir().unwrap();
        let disk = disk(dir.path(), 1 << 30);
        let mut spill = ExchangeSpill::create(&disk, "test").unwrap();
        let first = spill.append(&batch(0, 100)).unwrap();
        let second = spill.append(&batch(100, 50)).unwrap();
        let file = spill.file();
        assert_eq!(read_spilled(&file, second).unwrap(), batch(100, 50));
        assert_eq!(read_spilled(&file, first).unwrap(), batch(0, 100));
        assert_eq!(disk.used_disk_space(), spill.bytes());
        let path = file.path().unwrap().to_path_buf();
        drop(spill);
        assert!(path.exists(), "a reader's handle keeps the file");
        drop(file);
        assert!(!path.exists());
        assert_eq!(disk.used_disk_space(), 0);
    }

    #[test]
    fn the_spill_limit_is_resources_exhausted() {
        let dir = tempfile::tempdir().unwrap();
        let disk = disk(dir.path(), 1000);
        let mut spill = ExchangeSpill::create(&disk, "test").unwrap();
        let err = spill.append(&batch(0, 1000)).unwrap_err();
        assert!(
            matches!(err, DataFusionError::ResourcesExhausted(_)),
            "{err}"
        );
        assert!(err.to_string().contains("--spill-limit"), "{err}");
    }
}
