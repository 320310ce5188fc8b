//! Files a commit stopped naming (the files an UPDATE rewrote, a dropped
//! or replaced table's), deleted once `--file-retention` has passed, so
//! queries planned before the commit can still read them. (Files no
//! version ever named are the sweep's, `sweep`.)

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use squadron_common::error::Error;

use super::log::store_error;

/// Files a commit stopped naming, in one table directory.
#[derive(Debug, Clone)]
pub struct Released {
    pub dir: ListingTableUrl,
    /// File names in `dir`.
    pub names: Vec<String>,
    /// The table itself is gone: its directory may go too.
    pub dropped: bool,
}

impl Released {
    fn paths(&self) -> impl Iterator<Item = Path> + '_ {
        self.names
            .iter()
            .map(|name| self.dir.prefix().clone().join(name.as_str()))
    }
}

/// When and how the janitor works.
#[derive(Debug, Clone, Copy)]
pub struct JanitorOptions {
    /// How long released files stay readable.
    pub retention: Duration,
    /// Between sweeps; zero: only at start-up.
    pub sweep_interval: Duration,
    /// Unnamed files younger than this are left to a later sweep.
    pub sweep_grace: Duration,
}

impl Default for JanitorOptions {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(600),
            sweep_interval: Duration::from_secs(600),
            sweep_grace: Duration::from_secs(3600),
        }
    }
}

/// Deletes released files when due.
#[derive(Debug, Clone)]
pub struct Janitor {
    runtime: Arc<RuntimeEnv>,
    options: JanitorOptions,
    due: Arc<Mutex<VecDeque<(Instant, Released)>>>,
}

impl Janitor {
    pub fn new(runtime: Arc<RuntimeEnv>, options: JanitorOptions) -> Self {
        Self {
            runtime,
            options,
            due: Arc::default(),
        }
    }

    pub fn options(&self) -> JanitorOptions {
        self.options
    }

    /// Deletes `released` once the retention has passed.
    pub fn release(&self, released: Vec<Released>) {
        if released.is_empty() {
            return;
        }
        let at = Instant::now() + self.options.retention;
        let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        due.extend(released.into_iter().map(|r| (at, r)));
    }

    /// The files released and not yet deleted.
    pub fn pending(&self) -> HashSet<Path> {
        let due = self.due.lock().unwrap_or_else(|e| e.into_inner());
        due.iter().flat_map(|(_, r)| r.paths()).collect()
    }

    /// Deletes the released files whose retention has passed.
    pub async fn delete_due(&self) {
        let now = Instant::now();
        let ready: Vec<Released> = {
            let mut due = self.due.lock().unwrap_or_else(|e| e.into_inner());
            let mut ready = vec![];
            while due.front().is_some_and(|(at, _)| *at <= now) {
                ready.extend(due.pop_front().map(|(_, r)| r));
            }
            ready
        };
        for released in ready {
            if let Err(e) = self.delete(&released).await {
                tracing::warn!(dir = %released.dir, "deleting released files: {}", e.message());
            }
        }
    }

    async fn delete(&self, released: &Released) -> Result<(), Error> {
        let store = self
            .runtime
            .object_store(&released.dir)
            .map_err(|e| Error::internal(e.to_string()))?;
        for path in released.paths() {
            match store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error("deleting a released file", &e)),
            }
        }
        if released.dropped && released.dir.scheme() == "file" {
            let _ = std::fs::remove_dir(format!("/{}", released.dir.prefix()));
        }
        Ok(())
    }
}
