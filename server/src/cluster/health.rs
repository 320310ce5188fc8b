//! Which workers are reachable now.
//!
//! A worker is taken out of placement when one of its task streams breaks,
//! when a stream from it cannot be read, or when a health probe (the
//! standard gRPC health service) fails; it is used again as soon as a probe
//! passes, so a worker restarted on the same address rejoins without a
//! coordinator restart. Probes run in the background every `interval`, and
//! on demand after a job failed, to tell a lost worker from a bad query.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use futures::future::join_all;
use squadron_worker::client::PeerClients;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::resolver::WorkerResolver;

/// How long one probe may take before it counts as missed.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Background probes missed in a row before a worker counts as lost.
const MISSES_TO_LOSE: u32 = 2;

#[derive(Clone)]
pub struct WorkerHealth {
    // Only lost workers have an entry (since when); the background prober
    // drops entries of workers the resolver no longer lists.
    lost: Arc<DashMap<String, Instant>>,
    clients: PeerClients,
    // Counts losses, so running jobs learn of one at once (a paused worker
    // keeps its connections open: nothing else would tell them).
    losses: Arc<watch::Sender<u64>>,
}

impl WorkerHealth {
    pub fn new(clients: PeerClients) -> Self {
        Self {
            lost: Arc::new(DashMap::new()),
            clients,
            losses: Arc::new(watch::channel(0).0),
        }
    }

    /// Resolves with the first of `workers` found lost, now or later: a
    /// running job's watch for a worker that paused or vanished without
    /// breaking its connections.
    pub async fn first_lost(&self, workers: &[String]) -> String {
        let mut losses = self.losses.subscribe();
        loop {
            if let Some(url) = workers.iter().find(|w| self.is_lost(w)) {
                return url.clone();
            }
            if losses.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The workers of `urls` that are not known to be lost.
    pub fn healthy(&self, urls: Vec<String>) -> Vec<String> {
        urls.into_iter()
            .filter(|u| !self.lost.contains_key(u))
            .collect()
    }

    pub fn is_lost(&self, url: &str) -> bool {
        self.lost.contains_key(url)
    }

    /// Takes a worker out of placement until a probe passes.
    pub fn mark_lost(&self, url: &str) {
        if self.lost.insert(url.to_string(), Instant::now()).is_none() {
            tracing::warn!(
                url,
                "worker lost: no new tasks until it answers a health probe"
            );
            self.losses.send_modify(|n| *n += 1);
        }
        self.clients.forget_if_broken(url, tonic::Code::Unavailable);
    }

    fn mark_healthy(&self, url: &str) {
        if let Some((_, since)) = self.lost.remove(url) {
            tracing::info!(url, lost_for = ?since.elapsed(), "worker is back");
        }
    }

    /// Probes `urls` now and marks each lost or healthy by its answer;
    /// returns the ones that did not answer SERVING. Used after a job
    /// failed, when one missed probe is evidence enough.
    pub async fn probe(&self, urls: &[String]) -> Vec<String> {
        let mut lost = vec![];
        for (url, serving) in probe_all(&self.clients, urls).await {
            if serving {
                self.mark_healthy(url);
            } else {
                self.mark_lost(url);
                lost.push(url.clone());
            }
        }
        lost
    }

    /// Probes the resolver's workers every `interval` in the background,
    /// until the returned handle is dropped.
    pub fn spawn_prober(
        &self,
        resolver: Arc<dyn WorkerResolver>,
        interval: Duration,
    ) -> AbortOnDropHandle<()> {
        let health = self.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            // Workers are taken to be up at start; the first probe follows
            // one interval later (a failure before that marks them lost).
            let start = tokio::time::Instant::now() + interval;
            let mut tick = tokio::time::interval_at(start, interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // A single missed probe may be a busy machine: in the
            // background, a worker is lost after two in a row.
            let mut misses: HashMap<String, u32> = HashMap::new();
            loop {
                tick.tick().await;
                let urls = resolver.get_urls();
                health.lost.retain(|url, _| urls.contains(url));
                misses.retain(|url, _| urls.contains(url));
                for (url, serving) in probe_all(&health.clients, &urls).await {
                    if serving {
                        misses.remove(url);
                        health.mark_healthy(url);
                        continue;
                    }
                    let missed = misses.entry(url.clone()).or_default();
                    *missed += 1;
                    if *missed >= MISSES_TO_LOSE {
                        health.mark_lost(url);
                    }
                }
            }
        }))
    }
}

async fn probe_all<'a>(clients: &PeerClients, urls: &'a [String]) -> Vec<(&'a String, bool)> {
    join_all(
        urls.iter()
            .map(|url| async move { (url, probe_one(clients, url).await) }),
    )
    .await
}

async fn probe_one(clients: &PeerClients, url: &str) -> bool {
    let Ok(channel) = clients.channel(url) else {
        return false;
    };
    let mut client = HealthClient::new(channel);
    let check = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(PROBE_TIMEOUT, check).await {
        Ok(Ok(response)) => response.into_inner().status() == ServingStatus::Serving,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_waiting_on_its_workers_learns_of_a_loss_at_once() {
        let health = WorkerHealth::new(PeerClients::default());
        let workers = vec!["http://a:1".to_string(), "http://b:2".to_string()];
        let watch = {
            let health = health.clone();
            let workers = workers.clone();
            tokio::spawn(async move { health.first_lost(&workers).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        health.mark_lost("http://c:3");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !watch.is_finished(),
            "another worker's loss is not this job's"
        );
        health.mark_lost("http://b:2");
        let lost = tokio::time::timeout(Duration::from_secs(5), watch)
            .await
            .expect("woken by the loss")
            .unwrap();
        assert_eq!(lost, "http://b:2");
        assert_eq!(health.healthy(workers), vec!["http://a:1".to_string()]);
    }
}
