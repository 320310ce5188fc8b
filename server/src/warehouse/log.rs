//! Catalog versions in the warehouse: `catalog/v<version>.json`, each the
//! whole catalog, each written exactly once.
//!
//! A commit writes version N+1 with create-if-absent (object_store's
//! `PutMode::Create`: S3's and Azure's `If-None-Match: *`, GCS's
//! generation match, a hard link on a local or shared filesystem). Two
//! coordinators committing at once cannot both create N+1: the loser is
//! told so (`Conflict`), reads the newer version and tries again. Nothing
//! is ever overwritten, so a reader sees whole versions only. On a local
//! filesystem a version is synced (file and directory) before it counts.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::{PutMode, PutOptions, PutPayload};
use squadron_common::error::{Error, ErrorKind};

use super::Warehouse;

const DIR: &str = "catalog";

/// Why a version was not written.
#[derive(Debug)]
pub enum WriteError {
    /// Another commit wrote this version first.
    Conflict,
    /// The store failed (full, unreachable, refused).
    Failed(Error),
}

/// The catalog versions of one warehouse.
#[derive(Debug, Clone)]
pub struct CatalogLog {
    warehouse: Arc<Warehouse>,
}

fn file_name(version: u64) -> String {
    format!("v{version:020}.json")
}

/// The version a file of the log holds, if it is one.
fn version_of(name: &str) -> Option<u64> {
    name.strip_prefix('v')?.strip_suffix(".json")?.parse().ok()
}

/// A store failure as the error a client reads: out of space is
/// RESOURCE_EXHAUSTED, a refusal PERMISSION_DENIED, and a store that could
/// not be reached or failed (network errors, server errors after the
/// retries) UNAVAILABLE.
pub fn store_error(what: &str, e: &object_store::Error) -> Error {
    let message = format!("{what}: {e}");
    match e {
        object_store::Error::NotFound { .. } => Error::not_found(message),
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => Error::permission_denied(message),
        object_store::Error::Generic { source, .. } => match io_kind(source.as_ref()) {
            Some(std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) => {
                Error::resource_exhausted(message)
            }
            Some(std::io::ErrorKind::PermissionDenied) => Error::permission_denied(message),
            _ => Error::unavailable(message),
        },
        _ => Error::internal(message),
    }
}

/// The kind of the I/O error behind a store error, if one is.
fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = e.source();
    }
    None
}

fn io_error(what: &str, e: &std::io::Error) -> Error {
    let message = format!("{what}: {e}");
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            Error::resource_exhausted(message)
        }
        std::io::ErrorKind::PermissionDenied => Error::permission_denied(message),
        _ => Error::internal(message),
    }
}

impl CatalogLog {
    pub fn new(warehouse: Arc<Warehouse>) -> Self {
        Self { warehouse }
    }

    fn path(&self, version: u64) -> object_store::path::Path {
        self.warehouse
            .path(&format!("{DIR}/{}", file_name(version)))
    }

    /// Where `version` is kept, as a URL (for messages).
    pub fn location(&self, version: u64) -> String {
        format!("{}{DIR}/{}", self.warehouse.url(), file_name(version))
    }

    /// Every version kept, oldest first.
    pub async fn versions(&self) -> Result<Vec<u64>, Error> {
        let dir = self.warehouse.path(DIR);
        let listed: Vec<_> = self
            .warehouse
            .store()
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| store_error("listing the catalog versions", &e))?;
        let mut versions: Vec<u64> = listed
            .iter()
            .filter_map(|meta| meta.location.filename().and_then(version_of))
            .collect();
        versions.sort_unstable();
        Ok(versions)
    }

    /// The newest version, if any was committed.
    pub async fn latest(&self) -> Result<Option<u64>, Error> {
        Ok(self.versions().await?.last().copied())
    }

    /// Whether `version` was committed.
    pub async fn exists(&self, version: u64) -> Result<bool, Error> {
        match self.warehouse.store().head(&self.path(version)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error("reading the catalog", &e)),
        }
    }

    pub async fn read(&self, version: u64) -> Result<Bytes, Error> {
        let what = format!("reading catalog version {version}");
        self.warehouse
            .store()
            .get(&self.path(version))
            .await
            .map_err(|e| store_error(&what, &e))?
            .bytes()
            .await
            .map_err(|e| store_error(&what, &e))
    }

    /// Writes `version`, unless it exists.
    pub async fn write(&self, version: u64, bytes: Vec<u8>) -> Result<(), WriteError> {
        if let Some(dir) = self.warehouse.local_dir() {
            let dir = dir.join(DIR);
            return tokio::task::spawn_blocking(move || write_synced(&dir, version, &bytes))
                .await
                .map_err(|e| WriteError::Failed(Error::internal(e.to_string())))?;
        }
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let put = self
            .warehouse
            .store()
            .put_opts(
                &self.path(version),
                PutPayload::from(bytes.clone()),
                options,
            )
            .await;
        let Err(e) = put else {
            return Ok(());
        };
        // The store's answer is not the whole truth: a PUT that landed may
        // be answered with an error (a lost answer; the client's retry of
        // it is then refused as existing), so what the version holds
        // decides.
        let what = format!("committing catalog version {version}");
        match self.holds(version, &bytes).await {
            Ok(Some(true)) => Ok(()),
            Ok(Some(false)) => Err(WriteError::Conflict),
            _ if matches!(
                e,
                object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
            ) =>
            {
                Err(WriteError::Conflict)
            }
            _ => Err(WriteError::Failed(outcome_unknown(store_error(&what, &e)))),
        }
    }

    /// Whether `version` holds `bytes` (`None`: it does not exist).
    async fn holds(&self, version: u64, bytes: &[u8]) -> Result<Option<bool>, Error> {
        match self.read(version).await {
            Ok(read) => Ok(Some(read.as_ref() == bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes the versions before the `keep` newest; they are no longer
    /// read (a coordinator reads the newest).
    pub async fn prune(&self, keep: usize) -> Result<usize, Error> {
        let versions = self.versions().await?;
        let old = versions.len().saturating_sub(keep);
        for version in &versions[..old] {
            match self.warehouse.store().delete(&self.path(*version)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error("deleting an old catalog version", &e)),
            }
        }
        Ok(old)
    }
}

/// A store that did not answer may still make the version later (a
/// request it received after we stopped waiting): the client is told, and
/// the statement leaves its files to the sweep (`PendingWrite`), which
/// takes them only if no version names them after `--sweep-grace`.
fn outcome_unknown(e: Error) -> Error {
    if e.kind() != ErrorKind::Unavailable {
        return e;
    }
    Error::unavailable(format!(
        "{}; whether the statement took effect is not known (its catalog version may \
         still land)",
        e.message()
    ))
}

/// Writes a version into a local directory: a temporary file, synced,
/// linked to its name (which fails if another commit made it first), and
/// the directory synced so the name survives a crash of the machine.
fn write_synced(dir: &std::path::Path, version: u64, bytes: &[u8]) -> Result<(), WriteError> {
    use std::io::Write;
    let what = format!("committing catalog version {version}");
    let failed = |e: std::io::Error| WriteError::Failed(io_error(&what, &e));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file_name(version),
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(failed(e));
    }
    let linked = std::fs::hard_link(&tmp, dir.join(file_name(version)));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        // Linked, the version is visible: if the directory cannot be
        // synced, it may or may not outlive a crash of the machine.
        Ok(()) => std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| {
                WriteError::Failed(outcome_unknown(Error::unavailable(format!(
                    "{what}: syncing the catalog directory: {e}"
                ))))
            }),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(WriteError::Conflict),
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::runtime_env::RuntimeEnv;

    fn log_in(dir: &std::path::Path) -> CatalogLog {
        let warehouse = Warehouse::open(dir.to_str().unwrap(), &RuntimeEnv::default()).unwrap();
        CatalogLog::new(warehouse)
    }

    #[tokio::test]
    async fn a_version_is_written_once_and_the_newest_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(dir.path());
        assert_eq!(log.latest().await.unwrap(), None);
        log.write(1, b"one".to_vec()).await.unwrap();
        log.write(2, b"two".to_vec()).await.unwrap();
        assert!(matches!(
            log.write(2, b"again".to_vec()).await,
            Err(WriteError::Conflict)
        ));
        assert_eq!(log.read(2).await.unwrap().as_ref(), b"two");
        assert_eq!(log.latest().await.unwrap(), Some(2));
        assert!(log.exists(1).await.unwrap());
        assert!(!log.exists(3).await.unwrap());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("catalog"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(log.prune(1).await.unwrap(), 1);
        assert_eq!(log.versions().await.unwrap(), vec![2]);
    }

    #[tokio::test]
    async fn racing_writers_of_one_version_have_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(dir.path());
        let writes = (0..8).map(|i| {
            let log = log.clone();
            tokio::spawn(async move { log.write(1, vec![i]).await })
        });
        let results = futures::future::join_all(writes).await;
        let won = results.iter().filter(|r| matches!(r, Ok(Ok(())))).count();
        assert_eq!(won, 1);
    }

    #[tokio::test]
    async fn an_object_store_refuses_a_second_write_of_a_version() {
        let store: Arc<dyn object_store::ObjectStore> =
            Arc::new(object_store::memory::InMemory::new());
        let runtime = RuntimeEnv::default();
        let url = url::Url::parse("memory://").unwrap();
        runtime.register_object_store(&url, store);
        let warehouse = Warehouse::open("memory:///wh/", &runtime).unwrap();
        let log = CatalogLog::new(warehouse);
        log.write(7, b"a".to_vec()).await.unwrap();
        assert!(matches!(
            log.write(7, b"b".to_vec()).await,
            Err(WriteError::Conflict)
        ));
        assert_eq!(log.latest().await.unwrap(), Some(7));
    }
}
