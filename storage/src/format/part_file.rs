//! One part file of a created table, written straight to the table's
//! store (a local directory or an object store) as its rows arrive.
//!
//! Nothing is visible under the file's name until it is complete: an
//! object store shows an upload only once it is finished, and the local
//! store writes to a staging name it renames at the end. A file on a local
//! disk is synced before it is reported written, so a commit naming it
//! never outlives its data on a crash of the machine.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::writer::FileWriter;
use datafusion::common::{DataFusionError, Result};
use datafusion::parquet::arrow::AsyncArrowWriter;
use datafusion::parquet::file::properties::WriterProperties;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::ObjectStore;

use super::parquet_layout::laid_out_for;
use super::table_rows::StoredFormat;

/// Bytes buffered before an upload becomes multipart (and the size of its
/// parts): object stores take parts of at least 5 MiB.
const UPLOAD_PART_BYTES: usize = 8 * 1024 * 1024;

/// A part file that was written completely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    /// The file's path in its store (no scheme, no bucket).
    pub location: Path,
    pub bytes: u64,
    pub rows: u64,
}

/// Where a part file goes: its store and path there.
#[derive(Debug, Clone)]
pub struct PartTarget {
    pub store: Arc<dyn ObjectStore>,
    pub location: Path,
    /// The file on this machine's disk, when the store is a local
    /// directory (to sync it).
    pub local: Option<PathBuf>,
}

impl PartTarget {
    /// `name` inside the directory `dir` (a path in `store`); `local_root`
    /// says the store is this machine's filesystem.
    pub fn new(store: Arc<dyn ObjectStore>, dir: &Path, name: &str, local: bool) -> Self {
        let location = dir.clone().join(name);
        let local = local.then(|| PathBuf::from(format!("/{location}")));
        Self {
            store,
            location,
            local,
        }
    }
}

enum Writer {
    Parquet(AsyncArrowWriter<BufWriter>),
    /// Arrow IPC is encoded into a buffer handed to the upload after each
    /// batch (the IPC writer is synchronous).
    Arrow(FileWriter<Vec<u8>>, BufWriter, u64),
}

/// A part file being written.
pub struct PartFile {
    target: PartTarget,
    writer: Writer,
    rows: u64,
}

fn write_error(what: &str, target: &PartTarget, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("{what} {}: {e}", target.location))
}

impl PartFile {
    /// A file for rows of `schema` in `format`; `sample`, the first rows,
    /// lays out a Parquet file's columns (`laid_out_for`).
    pub fn create(
        target: PartTarget,
        schema: &SchemaRef,
        format: StoredFormat,
        sample: Option<&RecordBatch>,
    ) -> Result<Self> {
        let upload = BufWriter::with_capacity(
            Arc::clone(&target.store),
            target.location.clone(),
            UPLOAD_PART_BYTES,
        );
        let writer = match format {
            StoredFormat::Parquet => {
                let properties = match sample {
                    Some(sample) => laid_out_for(sample, WriterProperties::builder()).build(),
                    None => WriterProperties::builder().build(),
                };
                Writer::Parquet(
                    AsyncArrowWriter::try_new(upload, Arc::clone(schema), Some(properties))
                        .map_err(|e| write_error("starting", &target, e))?,
                )
            }
            StoredFormat::Arrow => Writer::Arrow(
                FileWriter::try_new(Vec::new(), schema)
                    .map_err(|e| write_error("starting", &target, e))?,
                upload,
                0,
            ),
        };
        Ok(Self {
            target,
            writer,
            rows: 0,
        })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes encoded so far (Parquet: written plus buffered in the open
    /// row group), to decide when to start another file.
    pub fn bytes(&self) -> u64 {
        match &self.writer {
            Writer::Parquet(writer) => (writer.bytes_written() + writer.in_progress_size()) as u64,
            Writer::Arrow(_, _, written) => *written,
        }
    }

    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.rows += batch.num_rows() as u64;
        match &mut self.writer {
            Writer::Parquet(writer) => writer
                .write(batch)
                .await
                .map_err(|e| write_error("writing", &self.target, e)),
            Writer::Arrow(writer, upload, written) => {
                writer
                    .write(batch)
                    .map_err(|e| write_error("writing", &self.target, e))?;
                let bytes = std::mem::take(writer.get_mut());
                *written += bytes.len() as u64;
                upload
                    .put(Bytes::from(bytes))
                    .await
                    .map_err(|e| write_error("writing", &self.target, e))
            }
        }
    }

    /// Completes the file; it is durable (synced, or the upload finished)
    /// when this returns.
    pub async fn finish(self) -> Result<WrittenFile> {
        let target = self.target;
        let bytes = match self.writer {
            Writer::Parquet(mut writer) => {
                writer
                    .finish()
                    .await
                    .map_err(|e| write_error("finishing", &target, e))?;
                writer.bytes_written() as u64
            }
            Writer::Arrow(mut writer, mut upload, mut written) => {
                writer
                    .finish()
                    .map_err(|e| write_error("finishing", &target, e))?;
                let bytes = std::mem::take(writer.get_mut());
                written += bytes.len() as u64;
                upload
                    .put(Bytes::from(bytes))
                    .await
                    .map_err(|e| write_error("finishing", &target, e))?;
                tokio::io::AsyncWriteExt::shutdown(&mut upload)
                    .await
                    .map_err(|e| write_error("finishing", &target, e))?;
                written
            }
        };
        if let Some(path) = &target.local {
            sync_file(path)
                .await
                .map_err(|e| write_error("syncing", &target, e))?;
        }
        Ok(WrittenFile {
            location: target.location,
            bytes,
            rows: self.rows,
        })
    }

    /// Drops what was uploaded so far (a multipart upload is aborted).
    pub async fn abort(self) {
        let mut upload = match self.writer {
            Writer::Parquet(writer) => writer.into_inner(),
            Writer::Arrow(_, upload, _) => upload,
        };
        if let Err(e) = upload.abort().await {
            tracing::debug!(location = %self.target.location, "aborting an upload: {e}");
        }
    }
}

/// Syncs a local file and the directory that names it.
async fn sync_file(path: &std::path::Path) -> std::io::Result<()> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::fs::File::open(&path)?.sync_all()?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)?
}
