//! Workers found at run time: a file of URLs, or the addresses a DNS name
//! resolves to (a Kubernetes headless Service). Refreshed in the
//! background; planning reads the last snapshot and never waits.
//!
//! A refresh that fails (file missing, DNS down) keeps the previous list:
//! a discovery outage must not empty the cluster. Workers that leave the
//! list get no new tasks; new ones get tasks from the next query on.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::task::AbortOnDropHandle;

use super::resolver::{normalize_url, WorkerResolver};

/// Where workers are discovered (`--workers-file`, `--workers-dns`).
#[derive(Debug, Clone)]
pub enum Discovery {
    /// A file with one worker URL (or host:port) per line; `#` comments.
    File(PathBuf),
    /// `NAME:PORT`: every A/AAAA address of NAME, at PORT, with `scheme`.
    Dns { name: String, scheme: &'static str },
}

impl Discovery {
    /// The workers now, or why they cannot be listed.
    pub async fn list(&self) -> anyhow::Result<Vec<String>> {
        let mut urls = match self {
            Discovery::File(path) => {
                let text = tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
                text.lines()
                    .map(|line| line.split('#').next().unwrap_or_default().trim())
                    .filter(|line| !line.is_empty())
                    .map(normalize_url)
                    .collect::<Vec<_>>()
            }
            Discovery::Dns { name, scheme } => tokio::net::lookup_host(name.as_str())
                .await
                .map_err(|e| anyhow::anyhow!("resolving {name}: {e}"))?
                .map(|addr| format!("{scheme}://{addr}"))
                .collect(),
        };
        urls.sort();
        urls.dedup();
        Ok(urls)
    }
}

/// A resolver over a `Discovery`, refreshed every `interval`.
pub struct DiscoveredWorkers {
    urls: Arc<RwLock<Arc<Vec<String>>>>,
    _refresh: AbortOnDropHandle<()>,
}

impl DiscoveredWorkers {
    /// Lists the workers once (an error here is a start-up error), then
    /// refreshes in the background until dropped.
    pub async fn start(discovery: Discovery, interval: Duration) -> anyhow::Result<Self> {
        let first = discovery.list().await?;
        tracing::info!(workers = first.len(), ?discovery, "workers discovered");
        let urls = Arc::new(RwLock::new(Arc::new(first)));
        let shared = Arc::clone(&urls);
        let refresh = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                match discovery.list().await {
                    Ok(now) => {
                        let mut current = shared.write().unwrap_or_else(|e| e.into_inner());
                        if **current != now {
                            tracing::info!(before = ?**current, after = ?now, "workers changed");
                            *current = Arc::new(now);
                        }
                    }
                    Err(e) => tracing::warn!("refreshing the worker list, keeping the last: {e}"),
                }
            }
        });
        Ok(Self {
            urls,
            _refresh: AbortOnDropHandle::new(refresh),
        })
    }
}

impl WorkerResolver for DiscoveredWorkers {
    fn get_urls(&self) -> Vec<String> {
        let urls = self.urls.read().unwrap_or_else(|e| e.into_inner());
        urls.as_ref().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_of_workers_is_followed_and_an_outage_keeps_the_last_list() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("workers");
        std::fs::write(&file, "# the pool\nw1:1\n\nhttp://w2:2  # second\nw1:1\n").unwrap();
        let workers =
            DiscoveredWorkers::start(Discovery::File(file.clone()), Duration::from_millis(20))
                .await
                .unwrap();
        assert_eq!(workers.get_urls(), vec!["http://w1:1", "http://w2:2"]);
        std::fs::write(&file, "w3:3\n").unwrap();
        let changed = async {
            while workers.get_urls() != vec!["http://w3:3"] {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), changed)
            .await
            .expect("the new list is picked up");
        std::fs::remove_file(&file).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(workers.get_urls(), vec!["http://w3:3"]);
        assert!(
            DiscoveredWorkers::start(Discovery::File(file), Duration::from_secs(1))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_dns_name_gives_one_worker_per_address() {
        let discovery = Discovery::Dns {
            name: "localhost:50061".into(),
            scheme: "https",
        };
        let urls = discovery.list().await.unwrap();
        assert!(!urls.is_empty());
        assert!(urls
            .iter()
            .all(|u| u.starts_with("https://") && u.ends_with(":50061")));
        assert!(
            urls.iter().any(|u| u == "https://127.0.0.1:50061"),
            "{urls:?}"
        );
        let unknown = Discovery::Dns {
            name: "no-such-host.invalid:1".into(),
            scheme: "http",
        };
        assert!(unknown.list().await.is_err());
    }
}
