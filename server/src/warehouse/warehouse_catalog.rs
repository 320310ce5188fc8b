//! The coordinator's view of the warehouse's catalog: the newest version
//! it knows, registered in its DataFusion catalog, and the commits that
//! make new versions.
//!
//! A commit is: apply the statement's `Change` to the newest version,
//! write the result as the next version (create-if-absent), and only once
//! that write is durable, show it (register, swap file sets, deregister).
//! A commit that fails changes nothing the server shows, and nothing a
//! restart shows. A commit that finds another coordinator's version first
//! takes that version in and applies its change again on top. Commits run
//! to their end even if the statement's client hangs up: dropping a
//! statement half-way through showing its version would leave the server
//! out of step with its disk.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dashmap::DashSet;
use datafusion::catalog::TableProvider;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};
use squadron_common::error::Error;
use squadron_exec::write::WriteTarget;
use squadron_storage::format::StoredFormat;

use super::changes::Change;
use super::janitor::{Janitor, Released};
use super::log::{CatalogLog, WriteError};
use super::Warehouse;
use crate::catalog::persisted::{constraints_of, register_defined, Entry, Managed};
use squadron_storage::managed_table::{FileSet, ManagedTable, TableShape};

/// Commits re-applied after losing a race before the statement gives up.
const COMMIT_ATTEMPTS: usize = 16;

/// One catalog version, as the log holds it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Version {
    pub version: u64,
    pub entries: Vec<Entry>,
}

/// The catalog of created tables, views and schemas, kept in a warehouse.
pub struct WarehouseCatalog {
    warehouse: Arc<Warehouse>,
    log: CatalogLog,
    /// The newest version this coordinator has taken in.
    current: Mutex<Arc<Version>>,
    /// Commits from this coordinator, one at a time (other coordinators
    /// are kept apart by the log's create-if-absent).
    committing: tokio::sync::Mutex<()>,
    /// Temporary tables: this coordinator's only, never committed.
    temporary: Mutex<HashMap<String, Managed>>,
    /// Statements writing part files now, by write id: the sweep leaves
    /// their files alone.
    writing: DashSet<String>,
    janitor: Janitor,
}

impl std::fmt::Debug for WarehouseCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarehouseCatalog")
            .field("warehouse", &self.warehouse.url().as_str())
            .finish_non_exhaustive()
    }
}

impl WarehouseCatalog {
    /// Opens the catalog of `warehouse` at its newest version and registers
    /// every entry in `ctx`. A warehouse with no version yet starts from
    /// `legacy` (a `catalog.json` of earlier versions) if given.
    pub async fn open(
        warehouse: Arc<Warehouse>,
        legacy: Option<&std::path::Path>,
        janitor: Janitor,
        ctx: &SessionContext,
    ) -> anyhow::Result<Arc<Self>> {
        let log = CatalogLog::new(Arc::clone(&warehouse));
        let mut newest = load_latest(&log)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
        if newest.version == 0 {
            if let Some(entries) = super::legacy::read(legacy, &warehouse)? {
                let migrated = Version {
                    version: 1,
                    entries,
                };
                let bytes = serde_json::to_vec_pretty(&migrated)?;
                match log.write(1, bytes).await {
                    Ok(()) | Err(WriteError::Conflict) => {}
                    Err(WriteError::Failed(e)) => anyhow::bail!("{}", e.message()),
                }
                newest = load_latest(&log)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            }
        }
        let catalog = Arc::new(Self {
            warehouse,
            log,
            current: Mutex::new(Arc::new(Version::default())),
            committing: tokio::sync::Mutex::new(()),
            temporary: Mutex::new(HashMap::new()),
            writing: DashSet::new(),
            janitor,
        });
        let failed = catalog.install(ctx, newest, None).await;
        if let Some((name, e)) = failed.into_iter().next() {
            anyhow::bail!("catalog entry {name}: {}", e.message());
        }
        Ok(catalog)
    }

    pub fn warehouse(&self) -> &Arc<Warehouse> {
        &self.warehouse
    }

    pub fn janitor(&self) -> &Janitor {
        &self.janitor
    }

    /// The newest version taken in.
    pub fn current(&self) -> Arc<Version> {
        Arc::clone(&self.current.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The entry `name` (a committed one, or a temporary table).
    pub fn get(&self, name: &str) -> Option<Entry> {
        if let Some(table) = self.temporary_table(name) {
            return Some(Entry::Managed(table));
        }
        self.current()
            .entries
            .iter()
            .find(|e| e.name() == name)
            .cloned()
    }

    fn temporary_table(&self, name: &str) -> Option<Managed> {
        self.temporary
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The temporary tables' entries.
    pub fn temporary_tables(&self) -> Vec<Managed> {
        let tables = self.temporary.lock().unwrap_or_else(|e| e.into_inner());
        tables.values().cloned().collect()
    }

    /// Whether the file `name` belongs to a statement writing now. Ask
    /// only after seeing the file: a write is noted before it makes files.
    pub fn is_being_written(&self, name: &str) -> bool {
        self.writing
            .iter()
            .any(|id| name.starts_with(&WriteTarget::part_prefix(&id)))
    }

    /// Notes that a statement writes part files named by `write_id` until
    /// `finished_writing`.
    pub fn started_writing(&self, write_id: &str) {
        self.writing.insert(write_id.to_string());
    }

    pub fn finished_writing(&self, write_id: &str) {
        self.writing.remove(write_id);
    }

    /// Makes `change` durable as a new version, then shows it in `ctx`.
    /// Runs to its end even if the caller is dropped.
    pub async fn commit(
        self: &Arc<Self>,
        ctx: &SessionContext,
        change: Change,
    ) -> Result<(), Error> {
        self.commit_shown(ctx, change, None).await
    }

    /// As `commit`, for a change whose entry `shown` the statement already
    /// registered in `ctx` itself (a view, an external table, a schema:
    /// DataFusion created it from the statement).
    pub async fn commit_shown(
        self: &Arc<Self>,
        ctx: &SessionContext,
        change: Change,
        shown: Option<String>,
    ) -> Result<(), Error> {
        let this = Arc::clone(self);
        let ctx = ctx.clone();
        tokio::spawn(async move { this.commit_now(&ctx, change, shown.as_deref()).await })
            .await
            .map_err(|e| Error::internal(format!("committing: {e}")))?
    }

    /// Commits `change` in the calling task (see `commit`); the caller
    /// must see it through even if its own caller goes away.
    pub(crate) async fn commit_now(
        &self,
        ctx: &SessionContext,
        change: Change,
        shown: Option<&str>,
    ) -> Result<(), Error> {
        if let Some(done) = self.change_temporary(ctx, &change).await {
            return done;
        }
        let _turn = self.committing.lock().await;
        for _ in 0..COMMIT_ATTEMPTS {
            let current = self.current();
            let next = Version {
                version: current.version + 1,
                entries: change.apply(&current.entries)?,
            };
            let bytes = serde_json::to_vec_pretty(&next)
                .map_err(|e| Error::internal(format!("encoding the catalog: {e}")))?;
            let written = self.log.write(next.version, bytes).await;
            let outcome = match &written {
                Ok(()) => "committed",
                Err(WriteError::Conflict) => "conflict",
                Err(WriteError::Failed(_)) => "failed",
            };
            metrics::counter!(squadron_coordinator::metrics::CATALOG_COMMITS, "outcome" => outcome)
                .increment(1);
            match written {
                Ok(()) => {
                    self.install(ctx, next, shown).await;
                    return Ok(());
                }
                Err(WriteError::Conflict) => {
                    tracing::info!(
                        version = next.version,
                        "another coordinator committed first; taking its version in"
                    );
                    let newer = load_latest(&self.log).await?;
                    self.install(ctx, newer, None).await;
                }
                Err(WriteError::Failed(status)) => return Err(status),
            }
        }
        Err(Error::aborted(format!(
            "the catalog changed {COMMIT_ATTEMPTS} times while this statement committed; run it \
             again"
        )))
    }

    /// Takes in a newer version committed elsewhere, if there is one.
    pub async fn refresh(&self, ctx: &SessionContext) -> Result<(), Error> {
        let next = self.current().version + 1;
        if !self.log.exists(next).await? {
            return Ok(());
        }
        let _turn = self.committing.lock().await;
        let newer = load_latest(&self.log).await?;
        if newer.version > self.current().version {
            self.install(ctx, newer, None).await;
        }
        Ok(())
    }

    /// Old versions beyond the newest `keep` are deleted.
    pub async fn prune_versions(&self, keep: usize) -> Result<usize, Error> {
        self.log.prune(keep).await
    }

    /// Shows `next` in `ctx` in place of the current version: registers
    /// what is new, swaps changed file sets, deregisters what went, and
    /// hands the files no longer named to the janitor. `shown`: an entry
    /// the statement registered itself. Returns the entries that could
    /// not be registered.
    async fn install(
        &self,
        ctx: &SessionContext,
        next: Version,
        shown: Option<&str>,
    ) -> Vec<(String, Error)> {
        let previous = self.current();
        let next = Arc::new(next);
        let failed = reconcile(
            &self.warehouse,
            ctx,
            &previous.entries,
            &next.entries,
            shown,
        )
        .await;
        for (name, e) in &failed {
            tracing::warn!(entry = name, "registering a catalog entry: {}", e.message());
        }
        // Released before the version changes: a sweep in between sees the
        // files as named or as released, never as neither.
        let released = released_files(&self.warehouse, &previous.entries, &next.entries);
        self.janitor.release(released);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = next;
        failed
    }

    /// Applies `change` to a temporary table (registered in `ctx` only);
    /// `None` when it concerns no temporary table.
    async fn change_temporary(
        &self,
        ctx: &SessionContext,
        change: &Change,
    ) -> Option<Result<(), Error>> {
        let name = match change {
            Change::Append { name, .. } | Change::Rewrite { name, .. } => name,
            Change::Remove { names } if names.len() == 1 => &names[0],
            _ => return None,
        };
        let old = self.temporary_table(name)?;
        let entries = vec![Entry::Managed(old.clone())];
        let result = async {
            let next = change.apply(&entries)?;
            reconcile(&self.warehouse, ctx, &entries, &next, None)
                .await
                .into_iter()
                .next()
                .map_or(Ok(()), |(_, e)| Err(e))?;
            let mut tables = self.temporary.lock().unwrap_or_else(|e| e.into_inner());
            match next.into_iter().next() {
                Some(Entry::Managed(table)) => tables.insert(name.clone(), table),
                _ => tables.remove(name),
            };
            drop(tables);
            self.janitor.release(released_files(
                &self.warehouse,
                &entries,
                &self.temporary_entries(name),
            ));
            Ok(())
        };
        Some(result.await)
    }

    fn temporary_entries(&self, name: &str) -> Vec<Entry> {
        self.temporary_table(name)
            .map(Entry::Managed)
            .into_iter()
            .collect()
    }

    /// Registers `table` as a temporary table (replacing one of its name).
    pub async fn create_temporary(
        &self,
        ctx: &SessionContext,
        table: Managed,
    ) -> Result<(), Error> {
        let name = table.name.clone();
        let old = self.temporary_entries(&name);
        let next = vec![Entry::Managed(table.clone())];
        let replaced_committed = old.is_empty() && table_exists(ctx, &name);
        if replaced_committed {
            let _ = ctx.deregister_table(name.as_str());
        }
        reconcile(&self.warehouse, ctx, &old, &next, None)
            .await
            .into_iter()
            .next()
            .map_or(Ok(()), |(_, e)| Err(e))?;
        self.temporary
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, table);
        self.janitor
            .release(released_files(&self.warehouse, &old, &next));
        Ok(())
    }
}

async fn load_latest(log: &CatalogLog) -> Result<Version, Error> {
    let Some(version) = log.latest().await? else {
        return Ok(Version::default());
    };
    let bytes = log.read(version).await?;
    let location = log.location(version);
    let read: Version = serde_json::from_slice(&bytes)
        .map_err(|e| Error::data_loss(format!("{location} cannot be read: {e}")))?;
    if read.version != version {
        return Err(Error::data_loss(format!(
            "{location} says it is catalog version {}",
            read.version
        )));
    }
    Ok(read)
}

fn table_exists(ctx: &SessionContext, name: &str) -> bool {
    ctx.table_exist(name).unwrap_or(false)
}

/// Makes the tables registered in `ctx` those of `next`, given that they
/// are those of `previous` now; `shown` is already registered. Returns the
/// entries that could not be registered.
async fn reconcile(
    warehouse: &Warehouse,
    ctx: &SessionContext,
    previous: &[Entry],
    next: &[Entry],
    shown: Option<&str>,
) -> Vec<(String, Error)> {
    let before: HashMap<&str, &Entry> = previous.iter().map(|e| (e.name(), e)).collect();
    let after: HashSet<&str> = next.iter().map(Entry::name).collect();
    for gone in previous.iter().filter(|e| !after.contains(e.name())) {
        if Some(gone.name()) != shown && is_table_entry(gone) {
            let _ = ctx.deregister_table(gone.name());
        }
    }
    // In order (a schema before its tables, a table before the views
    // reading it); an entry that needs one kept after it (a view kept
    // before the table it reads, which moved to the end when it was
    // replaced) is tried again once the others are in.
    let mut pending: Vec<&Entry> = next
        .iter()
        .filter(|e| Some(e.name()) != shown)
        .filter(|e| before.get(e.name()) != Some(e))
        .collect();
    loop {
        let tried = pending.len();
        let mut retry = vec![];
        let mut errors = vec![];
        for entry in pending {
            if let Err(e) = show(warehouse, ctx, entry, before.get(entry.name()).copied()).await {
                retry.push(entry);
                errors.push((entry.name().to_string(), e));
            }
        }
        if retry.is_empty() || retry.len() == tried {
            return errors;
        }
        pending = retry;
    }
}

/// Registers `entry` in `ctx`, in place of `old` (the entry of its name
/// in the version shown until now).
async fn show(
    warehouse: &Warehouse,
    ctx: &SessionContext,
    entry: &Entry,
    old: Option<&Entry>,
) -> Result<(), Error> {
    match entry {
        Entry::Managed(table) => {
            let old = match old {
                Some(Entry::Managed(old)) => Some(old),
                _ => None,
            };
            show_managed(warehouse, ctx, table, old).await
        }
        Entry::Defined { name, sql, schema } => {
            if old.is_some() && is_table_entry(entry) {
                let _ = ctx.deregister_table(name.as_str());
            }
            register_defined(ctx, sql, schema).await
        }
    }
}

/// Whether an entry names a table or view (not a catalog or schema, whose
/// entries are named `catalog …` and `schema …`).
fn is_table_entry(entry: &Entry) -> bool {
    match entry {
        Entry::Managed(_) => true,
        Entry::Defined { name, .. } => {
            !name.starts_with("catalog ") && !name.starts_with("schema ")
        }
    }
}

/// Registers created table `table`, or swaps its files in place when the
/// registered one is the same table (`old` has its identity).
async fn show_managed(
    warehouse: &Warehouse,
    ctx: &SessionContext,
    table: &Managed,
    old: Option<&Managed>,
) -> Result<(), Error> {
    let name = table.name.as_str();
    let registered = ctx.table_provider(name).await.ok();
    if let (Some(old), Some(provider)) = (old, &registered) {
        if let Some(managed) = provider.downcast_ref::<ManagedTable>() {
            if old.id == table.id && managed.id() == table.id {
                managed.swap_files(FileSet {
                    files: table.files.clone(),
                });
                return Ok(());
            }
        }
    }
    let provider = managed_table(warehouse, ctx, table)?;
    if registered.is_some() {
        let _ = ctx.deregister_table(name);
    }
    ctx.register_table(name, provider)
        .map(|_| ())
        .map_err(|e| Error::internal(format!("registering {name}: {e}")))
}

/// The provider of created table `table`.
pub fn managed_table(
    warehouse: &Warehouse,
    ctx: &SessionContext,
    table: &Managed,
) -> Result<Arc<dyn TableProvider>, Error> {
    let format = StoredFormat::from_name(&table.format).ok_or_else(|| {
        Error::internal(format!(
            "{}: unknown stored format {:?}",
            table.name, table.format
        ))
    })?;
    let shape = TableShape {
        id: table.id.clone(),
        dir: warehouse.table_url(&table.location)?,
        schema: table.schema()?,
        format,
        constraints: constraints_of(&table.keys),
        defaults: table
            .declared()
            .default_exprs(ctx)
            .map_err(|e| Error::internal(format!("the defaults of {}: {e}", table.name)))?,
    };
    let files = FileSet {
        files: table.files.clone(),
    };
    Ok(Arc::new(ManagedTable::new(shape, files)))
}

/// The files `previous` names and `next` does not, by table directory.
fn released_files(warehouse: &Warehouse, previous: &[Entry], next: &[Entry]) -> Vec<Released> {
    let kept: HashSet<(&str, &str)> = next
        .iter()
        .filter_map(|e| match e {
            Entry::Managed(t) => Some(t),
            _ => None,
        })
        .flat_map(|t| {
            t.files
                .iter()
                .map(move |f| (t.location.as_str(), f.name.as_str()))
        })
        .collect();
    let still_there: HashSet<&str> = next
        .iter()
        .filter_map(|e| match e {
            Entry::Managed(t) => Some(t.location.as_str()),
            _ => None,
        })
        .collect();
    previous
        .iter()
        .filter_map(|e| match e {
            Entry::Managed(t) => Some(t),
            _ => None,
        })
        .filter_map(|table| {
            let names: Vec<String> = table
                .files
                .iter()
                .filter(|f| !kept.contains(&(table.location.as_str(), f.name.as_str())))
                .map(|f| f.name.clone())
                .collect();
            let dropped = !still_there.contains(table.location.as_str());
            if names.is_empty() && !dropped {
                return None;
            }
            let dir: ListingTableUrl = warehouse.table_url(&table.location).ok()?;
            Some(Released {
                dir,
                names,
                dropped,
            })
        })
        .collect()
}
