//! Which workers are reachable now.
//!
//! A worker is taken out of placement when one of its task streams breaks,
//! when a stream from it cannot be read, or when a health probe (the
//! standard gRPC health service) fails; it is used again as soon as a probe
//! passes, so a worker restarted on the same address rejoins without a
//! coordinator restart. Probes run in the background every `interval`, on
//! demand after a job failed, to tell a lost worker from a bad query, and
//! before a job is placed when no worker is known healthy.
//!
//! A worker that answers NOT_SERVING is alive but draining (shutting down
//! gracefully): it gets no new tasks, but the jobs running on it are left
//! to finish. Only a worker that does not answer is lost, which stops the
//! jobs running on it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dashmap::DashMap;
use futures::future::join_all;
use squadron_net::client::PeerClients;
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
    // Workers that answered NOT_SERVING (same bound as `lost`).
    draining: Arc<DashMap<String, Instant>>,
    clients: PeerClients,
    // Counts losses, so running jobs learn of one at once (a paused worker
    // keeps its connections open: nothing else would tell them).
    losses: Arc<watch::Sender<u64>>,
    // When each worker last answered SERVING (same bound as `lost`).
    last_seen: Arc<DashMap<String, SystemTime>>,
    // Tasks of running jobs placed on each worker (entries leave at zero).
    placed: Arc<DashMap<String, usize>>,
    // Whether at least one worker may take tasks, after the last probe
    // round: the coordinator's own health follows it.
    usable: Arc<watch::Sender<bool>>,
}

/// A task placed on a worker, counted there until dropped (with its job).
pub struct PlacedTask {
    placed: Arc<DashMap<String, usize>>,
    url: String,
}

impl Drop for PlacedTask {
    fn drop(&mut self) {
        if let Some(mut n) = self.placed.get_mut(&self.url) {
            *n = n.saturating_sub(1);
        }
        self.placed.remove_if(&self.url, |_, n| *n == 0);
    }
}

impl WorkerHealth {
    pub fn new(clients: PeerClients) -> Self {
        Self {
            lost: Arc::new(DashMap::new()),
            draining: Arc::new(DashMap::new()),
            clients,
            losses: Arc::new(watch::channel(0).0),
            last_seen: Arc::default(),
            placed: Arc::default(),
            usable: Arc::new(watch::channel(true).0),
        }
    }

    /// The channels to the workers (the ones probes use).
    pub fn clients(&self) -> &PeerClients {
        &self.clients
    }

    /// Whether any worker can take tasks; changes after each probe round.
    pub fn usable(&self) -> watch::Receiver<bool> {
        self.usable.subscribe()
    }

    /// How a worker is seen now: `healthy`, `draining` or `lost`.
    pub fn state_of(&self, url: &str) -> &'static str {
        if self.lost.contains_key(url) {
            "lost"
        } else if self.draining.contains_key(url) {
            "draining"
        } else {
            "healthy"
        }
    }

    /// When the worker last answered a probe SERVING.
    pub fn last_seen(&self, url: &str) -> Option<SystemTime> {
        self.last_seen.get(url).map(|t| *t)
    }

    /// Tasks of running jobs placed on the worker.
    pub fn placed_tasks(&self, url: &str) -> usize {
        self.placed.get(url).map_or(0, |n| *n)
    }

    /// Counts a task placed on `url` until the guard is dropped.
    pub fn place_task(&self, url: &str) -> PlacedTask {
        *self.placed.entry(url.to_string()).or_insert(0) += 1;
        PlacedTask {
            placed: Arc::clone(&self.placed),
            url: url.to_string(),
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

    /// The workers of `urls` that may take new tasks: not known to be lost
    /// or draining.
    pub fn healthy(&self, urls: Vec<String>) -> Vec<String> {
        urls.into_iter()
            .filter(|u| !self.lost.contains_key(u) && !self.draining.contains_key(u))
            .collect()
    }

    /// The workers of `urls` that may take new tasks, each probed first
    /// when none is known to: a worker taken out by missed probes (a busy
    /// machine) or by a broken stream may be back before the next
    /// background round, and a query should not fail for a probe not run.
    pub async fn healthy_or_probed(&self, urls: Vec<String>) -> Vec<String> {
        let healthy = self.healthy(urls.clone());
        if !healthy.is_empty() || urls.is_empty() {
            return healthy;
        }
        self.probe(&urls).await;
        self.healthy(urls)
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
        self.last_seen.insert(url.to_string(), SystemTime::now());
        if let Some((_, since)) = self.lost.remove(url) {
            tracing::info!(url, lost_for = ?since.elapsed(), "worker is back");
        }
        self.draining.remove(url);
    }

    fn mark_draining(&self, url: &str) {
        if self
            .draining
            .insert(url.to_string(), Instant::now())
            .is_none()
        {
            tracing::info!(url, "worker is draining: no new tasks");
        }
        self.lost.remove(url);
    }

    /// Applies one probe's answer; whether the worker can take tasks.
    fn record(&self, url: &str, probe: Probe, misses: Option<&mut u32>) -> bool {
        match probe {
            Probe::Serving => self.mark_healthy(url),
            Probe::Draining => self.mark_draining(url),
            Probe::Unreachable => match misses {
                Some(missed) => {
                    *missed += 1;
                    if *missed >= MISSES_TO_LOSE {
                        self.mark_lost(url);
                    }
                }
                None => self.mark_lost(url),
            },
        }
        probe == Probe::Serving
    }

    /// Probes `urls` now and records each answer; returns the ones that
    /// did not answer SERVING. Used after a job failed, when one missed
    /// probe is evidence enough.
    pub async fn probe(&self, urls: &[String]) -> Vec<String> {
        let mut unusable = vec![];
        for (url, probe) in probe_all(&self.clients, urls).await {
            if !self.record(url, probe, None) {
                unusable.push(url.clone());
            }
        }
        unusable
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
                health.draining.retain(|url, _| urls.contains(url));
                health.last_seen.retain(|url, _| urls.contains(url));
                misses.retain(|url, _| urls.contains(url));
                for (url, probe) in probe_all(&health.clients, &urls).await {
                    if probe != Probe::Unreachable {
                        misses.remove(url);
                        health.record(url, probe, None);
                        continue;
                    }
                    health.record(url, probe, Some(misses.entry(url.clone()).or_default()));
                }
                let healthy = health.healthy(urls.clone()).len();
                metrics::gauge!(crate::metrics::WORKERS_KNOWN).set(urls.len() as f64);
                metrics::gauge!(crate::metrics::WORKERS_HEALTHY).set(healthy as f64);
                health.usable.send_if_modified(|usable| {
                    let changed = *usable != (healthy > 0);
                    *usable = healthy > 0;
                    changed
                });
            }
        }))
    }
}

/// A health probe's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Probe {
    Serving,
    /// Answered, but not SERVING: shutting down gracefully.
    Draining,
    /// No answer in time, or no connection.
    Unreachable,
}

async fn probe_all<'a>(clients: &PeerClients, urls: &'a [String]) -> Vec<(&'a String, Probe)> {
    join_all(
        urls.iter()
            .map(|url| async move { (url, probe_one(clients, url).await) }),
    )
    .await
}

async fn probe_one(clients: &PeerClients, url: &str) -> Probe {
    let Ok(channel) = clients.channel(url) else {
        return Probe::Unreachable;
    };
    let mut client = HealthClient::new(channel);
    let check = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(PROBE_TIMEOUT, check).await {
        Ok(Ok(response)) if response.get_ref().status() == ServingStatus::Serving => Probe::Serving,
        Ok(Ok(_)) => Probe::Draining,
        _ => Probe::Unreachable,
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

    /// A worker answering SERVING at a local address, until dropped.
    async fn serving_worker() -> (String, AbortOnDropHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (_reporter, service) = tonic_health::server::health_reporter();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming);
        let handle = AbortOnDropHandle::new(tokio::spawn(async move {
            let _ = server.await;
        }));
        (url, handle)
    }

    #[tokio::test]
    async fn a_worker_marked_lost_that_answers_is_placed_again_at_once() {
        let (back, _server) = serving_worker().await;
        // Nothing listens there.
        let gone = "http://127.0.0.1:9".to_string();
        let health = WorkerHealth::new(PeerClients::default());
        health.mark_lost(&back);
        health.mark_lost(&gone);
        let workers = vec![back.clone(), gone];
        assert!(health.healthy(workers.clone()).is_empty());
        assert_eq!(health.healthy_or_probed(workers).await, vec![back]);
    }
}
