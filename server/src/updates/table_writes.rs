//! A statement's rows written into a created table's directory, by the
//! tasks that compute them, as part files to commit.
//!
//! The files stay invisible until a catalog version names them. Until the
//! statement commits, `PendingWrite` marks its write id as in progress (so
//! the sweep leaves its files alone); if the statement fails, is
//! cancelled or its client hangs up, dropping it removes every file the
//! write made, and once it committed, the files of failed task attempts
//! that the commit does not name. A file a straggling task finishes after
//! that is left to the sweep, and so are the files of a commit the store
//! did not answer (its version may still land).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use squadron_common::error::{Error, ErrorKind};
use squadron_exec::write::{RowFlag, WriteTarget};
use squadron_net::stream::decode::decoded_batches;
use squadron_storage::format::{read_written, StoredFormat, Written};

use crate::catalog::persisted::{DataFile, Managed};
use crate::engine::Engine;
use crate::warehouse::changes::Change;
use crate::warehouse::WarehouseCatalog;
use datafusion::prelude::SessionContext;
use squadron_coordinator::session::Session;

/// A straggling task of a failed write (its worker cut off, say) may still
/// finish a file after the statement ended: the files of a write that did
/// not commit are looked for again this much later.
const SECOND_CLEAN_UP: Duration = Duration::from_secs(10);

/// The part files of one statement, from its first write to its commit.
pub struct PendingWrite {
    catalog: Arc<WarehouseCatalog>,
    store: Arc<dyn ObjectStore>,
    write_id: String,
    dir: ListingTableUrl,
    /// The files the commit named, once it committed.
    committed: Option<HashSet<String>>,
}

impl PendingWrite {
    /// A write into the table directory `dir`.
    pub fn start(coord: &Engine, dir: ListingTableUrl) -> Result<Self, Error> {
        let catalog = Arc::clone(catalog_of(coord)?);
        let store = coord
            .session()
            .runtime_env()
            .object_store(&dir)
            .map_err(|e| Error::internal(format!("the store of {dir}: {e}")))?;
        let write_id = uuid::Uuid::new_v4().simple().to_string();
        catalog.started_writing(&write_id);
        Ok(Self {
            catalog,
            store,
            write_id,
            dir,
            committed: None,
        })
    }

    pub fn write_id(&self) -> &str {
        &self.write_id
    }

    pub fn dir(&self) -> &ListingTableUrl {
        &self.dir
    }

    /// What the tasks write: rows of `schema` in `format`.
    pub fn target(
        &self,
        format: StoredFormat,
        schema: &datafusion::arrow::datatypes::SchemaRef,
        flag: RowFlag,
    ) -> WriteTarget {
        WriteTarget {
            table_url: self.dir.as_str().to_string(),
            write_id: self.write_id.clone(),
            format,
            table_schema: Arc::clone(schema),
            flag,
        }
    }

    /// `written`'s files as the catalog names them (relative to the
    /// table's directory).
    pub fn data_files(&self, written: &Written) -> Result<Vec<DataFile>, Error> {
        written
            .files
            .iter()
            .map(|file| {
                let name = file
                    .location
                    .prefix_match(self.dir.prefix())
                    .map(|parts| {
                        parts
                            .map(|p| p.as_ref().to_string())
                            .collect::<Vec<_>>()
                            .join("/")
                    })
                    .filter(|name| !name.is_empty())
                    .ok_or_else(|| {
                        Error::internal(format!(
                            "a task wrote {} outside the table's directory {}",
                            file.location, self.dir
                        ))
                    })?;
                Ok(DataFile {
                    name,
                    bytes: file.bytes,
                    rows: file.rows,
                })
            })
            .collect()
    }

    /// Commits `change`, which names this write's `files`; then the
    /// write's other files (of task attempts that failed) go, or all of
    /// them if the commit failed. Runs to its end even if the statement is
    /// dropped meanwhile (its client hung up): the files a commit names
    /// are never removed.
    pub async fn commit(
        self,
        ctx: &SessionContext,
        change: Change,
        files: &[DataFile],
    ) -> Result<(), Error> {
        let ctx = ctx.clone();
        self.finish(files, |catalog| async move {
            catalog.commit_now(&ctx, change, None).await
        })
        .await
    }

    /// Registers `table` (made of this write's `files`) as a temporary
    /// table, as `commit` commits.
    pub async fn create_temporary(
        self,
        ctx: &SessionContext,
        table: Managed,
        files: &[DataFile],
    ) -> Result<(), Error> {
        let ctx = ctx.clone();
        self.finish(files, |catalog| async move {
            catalog.create_temporary(&ctx, table).await
        })
        .await
    }

    /// When dropped, remove the write's files but these.
    fn keep(&mut self, names: HashSet<String>) {
        self.committed = Some(names);
    }

    async fn finish<F, R>(mut self, files: &[DataFile], commit: F) -> Result<(), Error>
    where
        F: FnOnce(Arc<WarehouseCatalog>) -> R + Send + 'static,
        R: std::future::Future<Output = Result<(), Error>> + Send,
    {
        let names: HashSet<String> = files.iter().map(|f| f.name.clone()).collect();
        tokio::spawn(async move {
            let result = commit(Arc::clone(&self.catalog)).await;
            // UNAVAILABLE: the store did not answer, and the version naming
            // these files may still land; the sweep removes them later if
            // none does.
            let may_have_landed = matches!(&result, Err(e) if e.kind() == ErrorKind::Unavailable);
            if result.is_ok() || may_have_landed {
                self.keep(names);
            }
            result
        })
        .await
        .map_err(|e| Error::internal(format!("committing: {e}")))?
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        let catalog = Arc::clone(&self.catalog);
        let store = Arc::clone(&self.store);
        let dir = self.dir.prefix().clone();
        let write_id = self.write_id.clone();
        let keep = self.committed.take();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            catalog.finished_writing(&write_id);
            return;
        };
        runtime.spawn(async move {
            let prefix = WriteTarget::part_prefix(&write_id);
            let committed = keep.is_some();
            let keep = keep.unwrap_or_default();
            let removed = remove_files(&store, &dir, &prefix, &keep).await;
            if !committed {
                // Not committed: its tasks were stopped; look once more for
                // a file one of them finished after this.
                tokio::time::sleep(SECOND_CLEAN_UP).await;
                remove_files(&store, &dir, &prefix, &keep).await;
            }
            if removed > 0 {
                tracing::debug!(
                    write_id,
                    removed,
                    "removed the files of a write not committed"
                );
            }
            catalog.finished_writing(&write_id);
        });
    }
}

/// Removes the files in `dir` named with `prefix` except `keep`; how many.
async fn remove_files(
    store: &Arc<dyn ObjectStore>,
    dir: &object_store::path::Path,
    prefix: &str,
    keep: &HashSet<String>,
) -> usize {
    let listed: Vec<_> = match store.list(Some(dir)).try_collect().await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(%dir, "listing a table's files to remove a failed write's: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for file in listed {
        let Some(name) = file.location.filename() else {
            continue;
        };
        if !name.starts_with(prefix) || keep.contains(name) {
            continue;
        }
        match store.delete(&file.location).await {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(location = %file.location, "removing a file: {e}"),
        }
    }
    removed
}

/// New part files of created table `table`, committed as an append
/// (INSERT, an appending ingest).
pub struct Append {
    table: Managed,
    target: WriteTarget,
    write: PendingWrite,
}

impl Append {
    pub fn start(coord: &Engine, table: Managed) -> Result<Self, Error> {
        let schema = table.schema()?;
        let format = StoredFormat::from_name(&table.format)
            .ok_or_else(|| Error::internal(format!("{}: unknown format", table.name)))?;
        let dir = catalog_of(coord)?.warehouse().table_url(&table.location)?;
        let write = PendingWrite::start(coord, dir)?;
        let target = write.target(format, &schema, RowFlag::None);
        Ok(Self {
            table,
            target,
            write,
        })
    }

    /// What its writers write.
    pub fn target(&self) -> WriteTarget {
        self.target.clone()
    }

    /// Commits the files `written`; returns their rows.
    pub async fn commit(self, coord: &Engine, written: &Written) -> Result<u64, Error> {
        let files = self.write.data_files(written)?;
        let change = Change::Append {
            name: self.table.name,
            id: self.table.id,
            files: files.clone(),
        };
        self.write.commit(coord.session(), change, &files).await?;
        Ok(written.rows())
    }
}

pub fn catalog_of(coord: &Engine) -> Result<&Arc<WarehouseCatalog>, Error> {
    coord.catalog().ok_or_else(|| {
        Error::failed_precondition(
            "this server keeps no tables of its own: start it with --warehouse (or --data-dir) \
             to create tables",
        )
    })
}

/// Runs `rows` (a physical plan, `Coordinator::plan_rows_to_write`)
/// written as `target` says; what the tasks wrote.
pub async fn write_rows(
    coord: &Engine,
    session: &Arc<Session>,
    rows: Arc<dyn ExecutionPlan>,
    target: WriteTarget,
) -> Result<Written, Error> {
    let job_id = target.write_id.clone();
    let planned = coord.plan_write(session, rows, target)?;
    let stream = coord.execute(&job_id, planned).await?;
    let mut batches = decoded_batches(stream);
    let mut written = Written::default();
    while let Some(batch) = batches.next().await {
        let answer = read_written(&batch?).map_err(|e| Error::internal(e.to_string()))?;
        written.extend(answer);
    }
    Ok(written)
}
