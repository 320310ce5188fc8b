//! Serving a worker: the control service, the Flight stream service and the
//! gRPC health service on one listener.

use std::net::SocketAddr;
use std::sync::Arc;

use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use squadron_proto::v1::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic_health::ServingStatus;

use crate::service::{WorkerControl, WorkerFlight};
use crate::task::runner::TaskResources;
use crate::task::{Failpoint, StagePlans, TaskRegistry, TaskRunner};
use squadron_common::spill_dir::{OwnedDir, SpillSettings};
use squadron_exec::plan::guard::DataRoots;
use squadron_exec::stream::{RetainedMemory, StreamManager};
use squadron_net::client::{PeerClients, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_MESSAGE_BYTES};
use squadron_net::tls::client::ClusterClientTls;
use squadron_net::tls::conn::{incoming, peer_roles};
use squadron_net::tls::server_config::{server_config, ReloadingCert};
use squadron_net::tls::{ClusterTlsFiles, Role};
use squadron_net::zero_copy_do_get::{MessageLimits, ZeroCopyDoGet};
use squadron_storage::object_stores::{ObjectStores, StoreOptions};
use squadron_storage::FOOTER_CACHE_BYTES;

/// How often a draining worker checks whether its work is done.
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How to run a worker.
#[derive(Debug, Clone, Default)]
pub struct WorkerOptions {
    /// Memory for query execution (operators and exchange buffers), in
    /// bytes; unlimited when `None`. Operators that can spill do so when it
    /// runs short; a query that still needs more fails with
    /// RESOURCE_EXHAUSTED while other queries keep running.
    pub memory_limit: Option<usize>,
    /// Where and how much this worker spills (in a directory of its own
    /// in the root); DataFusion's own temporary directory, without a limit
    /// of ours, when `None` (tests).
    pub spill: Option<SpillSettings>,
    /// Test-only fault injection (see `task::failpoint`).
    pub failpoint: Option<Arc<Failpoint>>,
    /// Mutual TLS inside the cluster; plaintext and open to anyone who
    /// reaches the port when `None` (`--insecure`).
    pub cluster_tls: Option<ClusterTlsFiles>,
    /// Where task plans may read files (`--data-root`); anywhere when empty.
    pub data_roots: DataRoots,
    /// Options of remote stores (`--store`); credentials come from the
    /// environment.
    pub stores: Vec<StoreOptions>,
}

/// The in-memory share of retained exchange outputs: a quarter of
/// `--memory-limit`, or this without one.
const DEFAULT_RETAINED_MEMORY: usize = 1 << 30;

/// A worker's shared state.
#[derive(Clone)]
pub struct Worker {
    pub streams: StreamManager,
    pub tasks: TaskRegistry,
    /// Decoded plans shared by the running tasks of a stage.
    pub stage_plans: StagePlans,
    pub clients: PeerClients,
    runtime: Arc<RuntimeEnv>,
    retained_memory: Arc<RetainedMemory>,
    /// Bytes of exchange output spilled (for the metrics).
    spilled: Arc<std::sync::atomic::AtomicU64>,
    /// Where it spills; removed when the last clone of the worker goes.
    _spill_dir: Option<Arc<OwnedDir>>,
    failpoint: Option<Arc<Failpoint>>,
    data_roots: DataRoots,
    /// The listener's TLS settings (cluster mTLS), when on.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Kept alive for its reload watcher.
    _cert: Option<Arc<ReloadingCert>>,
}

impl Worker {
    pub fn new(options: WorkerOptions) -> anyhow::Result<Self> {
        let mut runtime = RuntimeEnvBuilder::new()
            .with_object_store_registry(Arc::new(ObjectStores::new(options.stores.clone())))
            .with_metadata_cache_limit(FOOTER_CACHE_BYTES);
        let mut spill_dir = None;
        if let Some(spill) = &options.spill {
            let (dir, disk) = spill.claim("worker-")?;
            runtime = runtime.with_disk_manager_builder(disk);
            spill_dir = Some(Arc::new(dir));
        }
        let retained_memory = RetainedMemory::new(
            options
                .memory_limit
                .map_or(DEFAULT_RETAINED_MEMORY, |limit| limit / 4),
        );
        if let Some(limit) = options.memory_limit {
            // Track the largest consumers so an out-of-memory error names them.
            let pool: Arc<dyn MemoryPool> = Arc::new(TrackConsumersPool::new(
                FairSpillPool::new(limit),
                std::num::NonZeroUsize::new(3).expect("non-zero"),
            ));
            runtime = runtime.with_memory_pool(pool);
        }
        let (clients, tls, cert) = match &options.cluster_tls {
            Some(files) => {
                let cert = ReloadingCert::load(&files.cert, &files.key)?;
                let config = server_config(Arc::clone(&cert), Some(&files.ca))?;
                let clients = PeerClients::new(Some(ClusterClientTls::load(files)?));
                (clients, Some(config), Some(cert))
            }
            None => (PeerClients::default(), None, None),
        };
        Ok(Self {
            streams: StreamManager::default(),
            tasks: TaskRegistry::default(),
            stage_plans: StagePlans::default(),
            clients,
            runtime: runtime.build_arc()?,
            retained_memory,
            spilled: Arc::default(),
            _spill_dir: spill_dir,
            failpoint: options.failpoint,
            data_roots: options.data_roots,
            tls,
            _cert: cert,
        })
    }

    /// Bytes of task output this worker spilled so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.spilled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Execution memory its tasks hold now (operators and exchanges).
    pub fn memory_reserved(&self) -> usize {
        self.runtime.memory_pool.reserved()
    }

    /// The scheme peers reach this worker with.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Serves the worker on a bound listener until `shutdown` resolves; then
    /// reports NOT_SERVING, refuses new tasks, lets running ones finish and
    /// their streams be read, and stops.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        crate::metrics::describe_worker();
        let _memory = crate::metrics::report_memory(
            Arc::clone(&self.runtime),
            Arc::clone(&self.retained_memory),
            Arc::clone(&self.spilled),
        );
        let runner = TaskRunner::new(
            self.streams.clone(),
            self.tasks.clone(),
            self.stage_plans.clone(),
            self.clients.clone(),
            TaskResources {
                runtime: Arc::clone(&self.runtime),
                retained_memory: Arc::clone(&self.retained_memory),
                spilled: Arc::clone(&self.spilled),
            },
            self.failpoint.clone(),
            self.data_roots.clone(),
        );
        let draining = CancellationToken::new();
        let control = WorkerControl::new(
            runner,
            self.streams.clone(),
            self.tasks.clone(),
            draining.clone(),
        );
        let flight = Arc::new(WorkerFlight::new(self.streams.clone()));
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_service_status("", ServingStatus::Serving).await;
        let (tasks, streams) = (self.tasks.clone(), self.streams.clone());
        let shutdown = async move {
            shutdown.await;
            // Load balancers and the coordinator stop sending work first,
            // and new tasks are refused; the server keeps answering (health
            // says NOT_SERVING, the coordinator sees a draining worker, not
            // a lost one) until the running tasks ended and their streams
            // were read. Only then does it stop accepting connections.
            health
                .set_service_status("", ServingStatus::NotServing)
                .await;
            draining.cancel();
            while !(tasks.is_empty() && streams.is_empty()) {
                tokio::time::sleep(DRAIN_POLL).await;
            }
        };
        if let Some(cert) = &self._cert {
            cert.watch();
        }
        let enforce = self.tls.is_some();
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(health_service)
            .add_service(InterceptedService::new(
                WorkerServiceServer::new(control)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
                require_role(&[Role::Coordinator], enforce),
            ))
            .add_service(InterceptedService::new(
                ZeroCopyDoGet::serving(
                    flight,
                    MessageLimits {
                        decoding: MAX_MESSAGE_BYTES,
                        encoding: MAX_MESSAGE_BYTES,
                    },
                ),
                require_role(&[Role::Coordinator, Role::Worker], enforce),
            ))
            .serve_with_incoming_shutdown(incoming(listener, self.tls.clone()), shutdown)
            .await?;
        Ok(())
    }
}

/// Lets through only callers whose cluster certificate names one of
/// `roles`: the coordinator alone starts and stops tasks; workers and the
/// coordinator read streams. Off in insecure mode (`enforce` false).
fn require_role(
    roles: &'static [Role],
    enforce: bool,
) -> impl Fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |request| {
        if !enforce || peer_roles(&request).iter().any(|r| roles.contains(r)) {
            Ok(request)
        } else {
            Err(tonic::Status::permission_denied(format!(
                "this call needs a cluster certificate with the role {}",
                roles
                    .iter()
                    .map(|r| r.uri())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )))
        }
    }
}

/// Binds a worker on `addr` and serves it in the background; returns the
/// URL peers reach it at and its state. Used by tests that start workers
/// in their own process (the coordinator runs its embedded workers as
/// child processes).
pub async fn spawn_worker(
    addr: SocketAddr,
    options: WorkerOptions,
) -> anyhow::Result<(String, Worker)> {
    let listener = TcpListener::bind(addr).await?;
    let worker = Worker::new(options)?;
    let url = format!("{}://{}", worker.scheme(), listener.local_addr()?);
    let serving = worker.clone();
    tokio::spawn(async move {
        if let Err(e) = serving.serve(listener, std::future::pending()).await {
            tracing::error!("embedded worker stopped: {e}");
        }
    });
    Ok((url, worker))
}
