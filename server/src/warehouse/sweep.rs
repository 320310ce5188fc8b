//! The sweep, and the coordinator's background work on the warehouse.
//!
//! - **The sweep** (at start-up and every `--sweep-interval`): files under
//!   `tables/` and `temporary/` that the newest catalog version does not
//!   name, that no statement of this coordinator is writing, that are not
//!   released files waiting for their retention (`janitor`), and that are
//!   older than `--sweep-grace` (another coordinator's statement may be
//!   writing them) are deleted: parts of statements that failed, were
//!   cancelled or were killed with their coordinator, and on a local
//!   warehouse the staging files of uploads cut short. Old catalog
//!   versions beyond the newest few go too.
//! - Every second, released files whose retention passed are deleted, and
//!   every few seconds the coordinator looks for a newer catalog version
//!   another coordinator committed, and takes it in.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use squadron_common::error::Error;

use super::log::store_error;
use super::WarehouseCatalog;
use crate::catalog::persisted::Entry;

/// Catalog versions kept; older ones are deleted by the sweep.
pub const VERSIONS_KEPT: usize = 64;

/// How often a coordinator looks for versions committed elsewhere.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// The areas of the warehouse that hold table files.
const FILE_AREAS: &[&str] = &["tables", "temporary"];

/// What a sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub files: usize,
    pub versions: usize,
}

/// Deletes the files under the warehouse's table areas that `catalog`
/// names nowhere and nobody writes (see the module comment).
pub async fn sweep(catalog: &WarehouseCatalog) -> Result<Swept, Error> {
    let warehouse = catalog.warehouse();
    let options = catalog.janitor().options();
    // The order is what makes the sweep safe. Files are listed first, and
    // only then asked about: a listed file existed before its write could
    // have ended, and a write notes itself (`started_writing`) before it
    // makes a file, so the file's write is either still noted when asked,
    // or it ended, having committed (the version read after names the
    // file) or failed (the file is garbage). Timestamps cannot replace
    // this for our own writes: S3-compatible stores report them in whole
    // seconds, and the store's clock is not ours.
    let cutoff: DateTime<Utc> = (SystemTime::now() - options.sweep_grace).into();
    let mut listed = vec![];
    for area in FILE_AREAS {
        let files: Vec<_> = warehouse
            .store()
            .list(Some(&warehouse.path(area)))
            .try_collect()
            .await
            .map_err(|e| store_error("listing the warehouse", &e))?;
        listed.extend(files);
    }
    let (named, live_dirs) = named_files(catalog)?;
    let mut swept = Swept::default();
    for file in listed {
        let name = file.location.filename().unwrap_or_default();
        if named.contains(&file.location)
            || catalog.is_being_written(name)
            || file.last_modified > cutoff
        {
            continue;
        }
        match warehouse.store().delete(&file.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => swept.files += 1,
            Err(e) => return Err(store_error("deleting an unnamed file", &e)),
        }
    }
    if let Some(root) = warehouse.local_dir() {
        swept.files += sweep_local_leftovers(catalog, root, &live_dirs, options.sweep_grace);
    }
    swept.versions = catalog.prune_versions(VERSIONS_KEPT).await?;
    if swept.files > 0 {
        tracing::info!(files = swept.files, "swept files no catalog version names");
    }
    metrics::counter!(squadron_coordinator::metrics::SWEPT_FILES).increment(swept.files as u64);
    Ok(swept)
}

/// The files the newest version names or the janitor holds for their
/// retention, and the directories of the tables that exist.
fn named_files(catalog: &WarehouseCatalog) -> Result<(HashSet<Path>, HashSet<Path>), Error> {
    let warehouse = catalog.warehouse();
    // The version before the janitor's files: a commit releases the files
    // it stops naming before it shows its version, so a file is in one or
    // the other whenever the commit falls between the two reads.
    let current = catalog.current();
    let mut named = catalog.janitor().pending();
    let tables = current
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Managed(t) => Some(t.clone()),
            _ => None,
        })
        .chain(catalog.temporary_tables());
    let mut live_dirs = HashSet::new();
    for table in tables {
        let dir = warehouse.table_url(&table.location)?;
        live_dirs.insert(dir.prefix().clone());
        named.extend(
            table
                .files
                .iter()
                .map(|f| dir.prefix().clone().join(f.name.as_str())),
        );
    }
    Ok((named, live_dirs))
}

/// On a local warehouse: staging files of uploads cut short (the store's
/// listing hides them) and the empty directories of tables that are gone.
fn sweep_local_leftovers(
    catalog: &WarehouseCatalog,
    root: &std::path::Path,
    live_dirs: &HashSet<Path>,
    grace: Duration,
) -> usize {
    let mut removed = 0;
    for area in FILE_AREAS {
        let Ok(dirs) = std::fs::read_dir(root.join(area)) else {
            continue;
        };
        for dir in dirs.flatten() {
            let path = dir.path();
            let Ok(files) = std::fs::read_dir(&path) else {
                continue;
            };
            for file in files.flatten() {
                let name = file.file_name().to_string_lossy().to_string();
                let staging = name.contains('#');
                let old = file
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().unwrap_or_default() >= grace);
                // Asked after the file was seen, as in `sweep`.
                let written = catalog.is_being_written(&name);
                if staging && old && !written && std::fs::remove_file(file.path()).is_ok() {
                    removed += 1;
                }
            }
            let object_path = Path::from_absolute_path(&path).ok();
            let live = object_path.is_some_and(|p| live_dirs.contains(&p));
            if !live {
                // Only succeeds once empty.
                let _ = std::fs::remove_dir(&path);
            }
        }
    }
    removed
}

/// Runs the janitor for `catalog` until the process ends: released files
/// deleted when due, versions committed elsewhere taken in, and the sweep.
pub fn spawn(catalog: Arc<WarehouseCatalog>, ctx: SessionContext) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let options = catalog.janitor().options();
        let mut last_refresh = Instant::now();
        let mut last_sweep = Instant::now();
        if let Err(e) = sweep(&catalog).await {
            tracing::warn!("sweeping the warehouse: {}", e.message());
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            catalog.janitor().delete_due().await;
            if last_refresh.elapsed() >= REFRESH_INTERVAL {
                last_refresh = Instant::now();
                if let Err(e) = catalog.refresh(&ctx).await {
                    tracing::warn!("looking for newer catalog versions: {}", e.message());
                }
            }
            if !options.sweep_interval.is_zero() && last_sweep.elapsed() >= options.sweep_interval {
                last_sweep = Instant::now();
                if let Err(e) = sweep(&catalog).await {
                    tracing::warn!("sweeping the warehouse: {}", e.message());
                }
            }
        }
    })
}
