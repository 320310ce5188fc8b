//! The warehouse: where created tables and the catalog of them live.
//!
//! One URL (`--warehouse`): a local or shared directory (the default is
//! `--data-dir`), or an object store (`s3://`, `gs://`, `az://`, with the
//! store configuration remote tables use). Every process reaches it: the
//! workers write the part files of the tables they compute, the
//! coordinator commits catalog versions, and a coordinator started
//! anywhere with the same warehouse serves the same tables.
//!
//! ```text
//! <warehouse>/catalog/v00000000000000000042.json   catalog versions
//! <warehouse>/tables/<name>-<uuid>/part-….parquet  created tables' files
//! <warehouse>/temporary/<name>-<uuid>/…            temporary tables'
//! ```
//!
//! - `log`: catalog versions, each written once with create-if-absent.
//! - `warehouse_catalog`: the coordinator's view of the newest version;
//!   commits.
//! - `changes`: what a statement changes in the catalog, re-applied to a
//!   newer version when another commit came first.
//! - `janitor`: deferred deletion of the files a commit replaced.
//! - `sweep`: removing files no version names, and the background work
//!   (the janitor's deletions, picking up other coordinators' commits).
//! - `legacy`: the `catalog.json` of earlier versions, moved in once.

pub mod changes;
pub mod janitor;
mod legacy;
pub mod log;
pub mod sweep;
#[cfg(test)]
mod sweep_tests;
#[cfg(test)]
mod test_store;
pub mod warehouse_catalog;
#[cfg(test)]
mod warehouse_catalog_tests;

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use object_store::path::Path;
use object_store::ObjectStore;
use squadron_common::error::Error;
use url::Url;

pub use warehouse_catalog::WarehouseCatalog;

/// Where created tables and the catalog live.
#[derive(Debug)]
pub struct Warehouse {
    /// Ends in `/`.
    url: Url,
    store: Arc<dyn ObjectStore>,
    /// The URL's path in `store`.
    root: Path,
    /// The directory on this machine, for a `file://` warehouse.
    local: Option<PathBuf>,
}

impl Warehouse {
    /// The warehouse at `location` (a path or URL), through the stores of
    /// `runtime` (`--store` options, credentials from the environment).
    pub fn open(location: &str, runtime: &RuntimeEnv) -> anyhow::Result<Arc<Self>> {
        let url = squadron_storage::format::location_url(location)?;
        let listing = ListingTableUrl::parse(url.as_str())?;
        let store = runtime
            .object_store(&listing)
            .map_err(|e| anyhow::anyhow!("--warehouse {url}: {e}"))?;
        let local = match url.scheme() {
            "file" => {
                let dir = url
                    .to_file_path()
                    .map_err(|_| anyhow::anyhow!("--warehouse {url}: not a local path"))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| anyhow::anyhow!("--warehouse {}: {e}", dir.display()))?;
                Some(dir)
            }
            _ => None,
        };
        Ok(Arc::new(Self {
            root: listing.prefix().clone(),
            url,
            store,
            local,
        }))
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The directory on this machine, for a local warehouse.
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        self.local.as_deref()
    }

    /// A path in the store, relative to the warehouse (`catalog/…`).
    pub fn path(&self, relative: &str) -> Path {
        relative
            .split('/')
            .filter(|part| !part.is_empty())
            .fold(self.root.clone(), |path, part| path.join(part))
    }

    /// A new directory for table `name`, relative to the warehouse: a
    /// replaced or re-created table never mixes with old files.
    pub fn new_table_location(name: &str, temporary: bool) -> String {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let area = if temporary { "temporary" } else { "tables" };
        format!("{area}/{name}-{}/", uuid::Uuid::new_v4().simple())
    }

    /// The directory URL of a table `location` as the catalog keeps it:
    /// relative to the warehouse, or absolute (a path of a catalog from
    /// before the warehouse, or another URL).
    pub fn table_url(&self, location: &str) -> Result<ListingTableUrl, Error> {
        let url = if location.contains("://") || location.starts_with('/') {
            squadron_storage::format::location_url(location)
        } else {
            self.url
                .join(location)
                .map_err(|e| anyhow::anyhow!("{e}"))
                .and_then(|u| squadron_storage::format::location_url(u.as_str()))
        }
        .map_err(|e| Error::internal(format!("table location {location}: {e}")))?;
        ListingTableUrl::parse(url.as_str())
            .map_err(|e| Error::internal(format!("table location {location}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_under_the_warehouse() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = RuntimeEnv::default();
        let warehouse = Warehouse::open(dir.path().to_str().unwrap(), &runtime).unwrap();
        let location = Warehouse::new_table_location("My Table", false);
        assert!(location.starts_with("tables/My_Table-"), "{location}");
        let url = warehouse.table_url(&location).unwrap();
        assert!(url.as_str().starts_with(warehouse.url().as_str()), "{url}");
        assert!(url.is_collection());
        let old = warehouse.table_url("/srv/old/tables/t-1").unwrap();
        assert_eq!(old.as_str(), "file:///srv/old/tables/t-1/");
        assert_eq!(
            warehouse.path("catalog/v1.json"),
            warehouse.root.clone().join("catalog").join("v1.json")
        );
    }
}
