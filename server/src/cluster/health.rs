//! Which workers are reachable now.
//!
//! A worker is taken out of placement when one of its task streams breaks,
//! when a stream from it cannot be read, or when a health probe (the
//! standard gRPC health service) fails; it is used again as soon as a probe
//! passes, so a worker restarted on the same address rejoins without a
//! coordinator restart. Probes run in the background every `interval`, and
//! on demand after a job failed, to tell a lost worker from a bad query.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use futures::future::join_all;
use squadron_worker::client::PeerClients;
use tokio_util::task::AbortOnDropHandle;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::resolver::WorkerResolver;

/// How long one probe may take before the worker counts as lost.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct WorkerHealth {
    // Only lost workers have an entry (since when); the background prober
    // drops entries of workers the resolver no longer lists.
    lost: Arc<DashMap<String, Instant>>,
    clients: PeerClients,
}

impl WorkerHealth {
    pub fn new(clients: PeerClients) -> Self {
        Self {
            lost: Arc::new(DashMap::new()),
            clients,
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
        }
        self.clients.forget_if_broken(url, tonic::Code::Unavailable);
    }

    fn mark_healthy(&self, url: &str) {
        if let Some((_, since)) = self.lost.remove(url) {
            tracing::info!(url, lost_for = ?since.elapsed(), "worker is back");
        }
    }

    /// Probes `urls` now; returns the ones that did not answer SERVING.
    pub async fn probe(&self, urls: &[String]) -> Vec<String> {
        let results = join_all(urls.iter().map(|url| async move {
            let serving = probe_one(&self.clients, url).await;
            if serving {
                self.mark_healthy(url);
            } else {
                self.mark_lost(url);
            }
            (url, serving)
        }))
        .await;
        results
            .into_iter()
            .filter(|(_, serving)| !serving)
            .map(|(url, _)| url.clone())
            .collect()
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
            loop {
                tick.tick().await;
                let urls = resolver.get_urls();
                health.lost.retain(|url, _| urls.contains(url));
                health.probe(&urls).await;
            }
        }))
    }
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
