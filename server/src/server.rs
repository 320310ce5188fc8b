//! Starting a coordinator: workers, tables, session, Flight SQL listener.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};
use squadron_exec::plan::guard::DataRoots;
use squadron_net::client::{PeerClients, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_MESSAGE_BYTES};
use squadron_net::tls::client::ClusterClientTls;
use squadron_net::tls::conn::incoming;
use squadron_net::tls::server_config::{server_config, ReloadingCert};
use squadron_net::tls::ClusterTlsFiles;
use squadron_net::zero_copy_do_get::{MessageLimits, ZeroCopyDoGet};
use squadron_storage::object_stores::{ObjectStores, StoreOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;
use tonic_health::ServingStatus;
use tower::util::MapResponseLayer;

use crate::catalog::delta::DeltaTableFactory;
use crate::catalog::TableSpec;
use crate::engine::Engine;
use crate::flight_sql::front::too_large_response;
use crate::flight_sql::{SquadronFlight, SquadronFlightSql};
use crate::local_workers::{EmbeddedWorker, LaunchWorkers, LocalWorkerOptions, WorkerProcesses};
use crate::security::auth::Authenticator;
use crate::security::layer::AuthLayer;
use crate::security::ClientTlsFiles;
use crate::warehouse::janitor::{Janitor, JanitorOptions};
use crate::warehouse::sweep;
use crate::warehouse::{Warehouse, WarehouseCatalog};
use squadron_common::spill_dir::SpillSettings;
use squadron_coordinator::cluster::{
    normalize_url, DiscoveredWorkers, Discovery, StaticResolver, WorkerHealth, WorkerResolver,
};
use squadron_coordinator::queries::LiveQueries;
use squadron_coordinator::scheduler::JobRunner;
use squadron_coordinator::statements::JobLimits;
use squadron_coordinator::Coordinator;
use squadron_exec::squadron_options::{with_squadron_options, RetryPolicy, SquadronOptions};
use squadron_planner::context::coordinator_session_config;
use squadron_planner::local::DEFAULT_COORDINATOR_SCAN_LIMIT;
use squadron_storage::FOOTER_CACHE_BYTES;

/// Largest message a client may send (a parameter or ingest batch):
/// larger ones are RESOURCE_EXHAUSTED. Clients split ingested tables into
/// batches far below this.
pub const CLIENT_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Calls one client connection may have open at once (HTTP/2
/// MAX_CONCURRENT_STREAMS); more are refused by the transport.
pub const CLIENT_STREAMS_PER_CONNECTION: u32 = 128;

/// Default of `--max-queries-per-user`: above the 32 that run at once,
/// so one busy client can fill the cluster but not the whole queue.
pub const DEFAULT_MAX_QUERIES_PER_USER: usize = 64;

/// The default of `--coordinator-memory-limit`: the plans the coordinator
/// runs itself are small by design (`planner::local`), and they share the
/// threads that serve every client.
pub const DEFAULT_COORDINATOR_MEMORY_LIMIT: usize = 1 << 30;

/// A way to start embedded workers (see `local_workers::LaunchWorkers`).
#[derive(Clone)]
pub struct Launcher(pub Arc<dyn LaunchWorkers>);

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Launcher")
    }
}

/// How to start a coordinator.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub listen: SocketAddr,
    /// Remote workers; when empty (and no `discovery`), `local_workers`
    /// embedded workers are started (`local_workers.rs`).
    pub workers: Vec<String>,
    /// Workers found at run time instead of a fixed list.
    pub discovery: Option<Discovery>,
    /// How often `discovery` is refreshed.
    pub discovery_interval: Duration,
    pub local_workers: usize,
    /// The `squadron-worker` binary embedded workers run; default: beside
    /// this executable.
    pub local_worker_binary: Option<PathBuf>,
    /// Starts the embedded workers some other way than as child processes
    /// (tests start them in their own process).
    pub local_worker_launcher: Option<Launcher>,
    pub tables: Vec<TableSpec>,
    /// Options of remote stores (`--store`), the same for the embedded
    /// workers.
    pub stores: Vec<StoreOptions>,
    /// Partitions (tasks) per stage; default twice the number of workers.
    pub partitions: Option<usize>,
    /// Planning options (`--set KEY=VALUE`), e.g.
    /// `datafusion.optimizer.prefer_hash_join=false`.
    pub settings: Vec<(String, String)>,
    /// Retries, timeout and admission.
    pub limits: JobLimits,
    /// Memory limit of each embedded worker.
    pub worker_memory_limit: Option<usize>,
    /// Memory for the plans the coordinator runs itself (lookups, queries
    /// over constants); a plan past it fails with RESOURCE_EXHAUSTED.
    pub coordinator_memory_limit: usize,
    /// How often workers are health-probed.
    pub health_interval: Duration,
    /// Where created tables and their catalog live (`--warehouse`: a
    /// directory or an object store URL); `data_dir` when not given.
    pub warehouse: Option<String>,
    /// The local data directory (`--data-dir`): the default warehouse, and
    /// where the catalog of earlier versions (`catalog.json`) is read from
    /// once. Without it or a warehouse, DDL that creates tables is refused.
    pub data_dir: Option<PathBuf>,
    /// When released and unnamed warehouse files are deleted.
    pub janitor: JanitorOptions,
    /// Client-facing TLS; plaintext when `None`.
    pub tls: Option<ClientTlsFiles>,
    /// Mutual TLS with the workers (embedded workers use the same
    /// identity); plaintext when `None`.
    pub cluster_tls: Option<ClusterTlsFiles>,
    /// Who may call; anyone when `None` (insecure mode).
    pub auth: Option<Arc<Authenticator>>,
    /// Where clients may create external tables; nowhere when `None`.
    pub table_roots: Option<DataRoots>,
    /// Queries one user (or, without authentication, one client address)
    /// may run or queue at once.
    pub max_queries_per_user: usize,
    /// Queries reading at most this many bytes of Parquet run on the
    /// coordinator (`--coordinator-scan-limit`); 0: none.
    pub coordinator_scan_limit: u64,
    /// Whether statements that differ only in their constants re-use a
    /// plan (`--reuse-plans`).
    pub reuse_plans: bool,
    /// The sessions' default `squadron.retry_policy` (`--retry-policy`).
    pub retry_policy: RetryPolicy,
    /// The sessions' default `squadron.dynamic_filters` (`--dynamic-filters`).
    pub dynamic_filters: bool,
    /// Where the coordinator spools and embedded workers spill.
    pub spill: SpillSettings,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:50051".parse().expect("valid address"),
            workers: vec![],
            discovery: None,
            discovery_interval: Duration::from_secs(5),
            local_workers: 2,
            local_worker_binary: None,
            local_worker_launcher: None,
            tables: vec![],
            stores: vec![],
            partitions: None,
            settings: vec![],
            limits: JobLimits::default(),
            worker_memory_limit: None,
            coordinator_memory_limit: DEFAULT_COORDINATOR_MEMORY_LIMIT,
            health_interval: Duration::from_secs(2),
            warehouse: None,
            data_dir: None,
            janitor: JanitorOptions::default(),
            tls: None,
            cluster_tls: None,
            auth: None,
            table_roots: Some(DataRoots::default()),
            max_queries_per_user: DEFAULT_MAX_QUERIES_PER_USER,
            coordinator_scan_limit: DEFAULT_COORDINATOR_SCAN_LIMIT,
            reuse_plans: true,
            retry_policy: RetryPolicy::default(),
            dynamic_filters: true,
            spill: SpillSettings::default(),
        }
    }
}

pub struct RunningServer {
    pub addr: SocketAddr,
    pub workers: Vec<String>,
    /// The embedded workers (empty with remote workers).
    pub local_workers: Vec<Box<dyn EmbeddedWorker>>,
    pub coordinator: Arc<Coordinator>,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<(), tonic::transport::Error>>,
    _prober: AbortOnDropHandle<()>,
    /// Deletes released and unnamed warehouse files.
    _janitor: Option<AbortOnDropHandle<()>>,
    /// The client-facing certificate, kept alive for its reload watcher.
    _cert: Option<Arc<ReloadingCert>>,
}

impl RunningServer {
    /// The Flight SQL URI clients connect to.
    pub fn uri(&self) -> String {
        let scheme = if self._cert.is_some() {
            "grpc+tls"
        } else {
            "grpc"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Serves until `terminated` resolves (see
    /// `squadron_common::shutdown::termination`), then shuts down
    /// gracefully: no new calls, running queries get `grace` to finish.
    pub async fn serve_until_terminated(
        mut self,
        grace: Duration,
        terminated: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::select! {
            result = &mut self.handle => return Ok(result??),
            _ = terminated => {}
        }
        tracing::info!("stopping: no new queries, finishing running ones");
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let workers = std::mem::take(&mut self.local_workers);
        let handle = tokio::spawn(async move { Ok(self.handle.await??) });
        let drained = squadron_common::shutdown::drain(handle, grace, "coordinator").await;
        // Their tasks belong to the coordinator's queries, finished or
        // stopped by now.
        stop_workers(workers, grace).await;
        drained
    }

    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        (&mut self.handle).await??;
        stop_workers(std::mem::take(&mut self.local_workers), Duration::ZERO).await;
        Ok(())
    }
}

async fn stop_workers(workers: Vec<Box<dyn EmbeddedWorker>>, grace: Duration) {
    futures::future::join_all(workers.into_iter().map(|worker| worker.stop(grace))).await;
}

/// The coordinator's planning context (`squadron_planner::context`) with
/// the catalog's table factories (`CREATE EXTERNAL TABLE … STORED AS
/// DELTA`).
pub fn planning_context(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> SessionContext {
    let ctx = squadron_planner::context::planning_context(config, runtime);
    {
        let state = ctx.state_ref();
        let mut state = state.write();
        for name in ["DELTA", "DELTALAKE"] {
            state
                .table_factories_mut()
                .insert(name.to_string(), Arc::new(DeltaTableFactory));
        }
    }
    ctx
}

/// Tasks per stage when `--partitions` is not given: one per core the
/// workers have. Embedded workers share this machine, so its cores; the
/// cores of remote workers are not known here, so two per worker.
/// (Measured on 2 cores: TPC-H SF1 ran 1.11-1.19x single node with 2 tasks
/// per stage and 1.22-1.26x with 4, oversubscribed.)
fn default_partitions(local_workers: usize, workers: usize) -> usize {
    if local_workers > 0 {
        std::thread::available_parallelism().map_or(workers, |n| n.get())
    } else {
        2 * workers
    }
}

/// Keeps the coordinator's gRPC health (what load balancers probe) SERVING
/// while at least one worker may take tasks, NOT_SERVING while none can.
async fn follow_workers(
    reporter: tonic_health::server::HealthReporter,
    mut usable: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let status = if *usable.borrow_and_update() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        tracing::info!(?status, "coordinator health");
        reporter.set_service_status("", status).await;
        if usable.changed().await.is_err() {
            return;
        }
    }
}

/// Starts the coordinator (and its embedded workers when no remote ones
/// are given) and returns once it accepts connections.
pub async fn start(options: ServerOptions) -> anyhow::Result<RunningServer> {
    let mut local_workers = vec![];
    let warehouse_url = warehouse_location(&options)
        .map(|location| squadron_storage::format::location_url(&location))
        .transpose()?;
    let discovered = match &options.discovery {
        Some(discovery) => Some(Arc::new(
            DiscoveredWorkers::start(discovery.clone(), options.discovery_interval).await?,
        )),
        None => None,
    };
    let workers = if let Some(discovered) = &discovered {
        discovered.get_urls()
    } else if options.workers.is_empty() {
        if options.local_workers == 0 {
            anyhow::bail!("no workers: give --workers or --local-workers of at least 1");
        }
        let launcher = match &options.local_worker_launcher {
            Some(Launcher(launcher)) => Arc::clone(launcher),
            None => Arc::new(WorkerProcesses::new(options.local_worker_binary.clone())?),
        };
        // Same gRPC and Flight paths as a remote worker, on loopback.
        let worker_options = LocalWorkerOptions {
            memory_limit: options.worker_memory_limit,
            spill: Some(options.spill.clone()),
            cluster_tls: options.cluster_tls.clone(),
            warehouse: warehouse_url.clone(),
            stores: options.stores.clone(),
        };
        let started = futures::future::try_join_all(
            (0..options.local_workers).map(|_| launcher.launch(&worker_options)),
        )
        .await?;
        let mut urls = vec![];
        for (url, worker) in started {
            urls.push(url);
            local_workers.push(worker);
        }
        urls
    } else {
        options.workers.iter().map(|w| normalize_url(w)).collect()
    };
    let partitions = options
        .partitions
        .unwrap_or_else(|| default_partitions(local_workers.len(), workers.len()))
        .max(1);
    // The flags are the defaults of the sessions' `squadron.*` settings.
    let defaults = SquadronOptions {
        coordinator_scan_limit: options.coordinator_scan_limit,
        reuse_plans: options.reuse_plans,
        retry_policy: options.retry_policy,
        dynamic_filters: options.dynamic_filters,
        ..SquadronOptions::default()
    };
    let mut config = with_squadron_options(coordinator_session_config(partitions), defaults);
    for (key, value) in &options.settings {
        config
            .options_mut()
            .set(key, value)
            .map_err(|e| anyhow::anyhow!("--set {key}={value}: {e}"))?;
    }
    // Bounded, and never spilling: a plan run here that needs more than
    // the limit belongs on the workers, and fails rather than growing.
    let pool: Arc<dyn MemoryPool> = Arc::new(TrackConsumersPool::new(
        GreedyMemoryPool::new(options.coordinator_memory_limit),
        NonZeroUsize::new(3).expect("non-zero"),
    ));
    let runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(ObjectStores::new(options.stores.clone())))
        .with_memory_pool(pool)
        .with_metadata_cache_limit(FOOTER_CACHE_BYTES)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()?;
    let warehouse = match warehouse_location(&options) {
        Some(location) => Some(Warehouse::open(&location, &runtime)?),
        None => None,
    };
    let ctx = planning_context(config, runtime);
    for table in &options.tables {
        table
            .register(&ctx)
            .await
            .map_err(|e| anyhow::anyhow!("table {}: {e}", table.name))?;
    }
    let resolver: Arc<dyn WorkerResolver> = match discovered {
        Some(discovered) => discovered,
        None => Arc::new(StaticResolver::new(workers.clone())),
    };
    let cluster_client = match &options.cluster_tls {
        Some(files) => Some(ClusterClientTls::load(files)?),
        None => None,
    };
    let clients = PeerClients::new(cluster_client);
    let health = WorkerHealth::new(clients.clone());
    let prober = health.spawn_prober(Arc::clone(&resolver), options.health_interval);
    let runner = JobRunner::new(
        Arc::clone(&resolver),
        health.clone(),
        options.limits.max_attempts,
        options.settings.iter().cloned().collect(),
    )
    .with_spool(options.spill.claim("coordinator-")?)?;
    let coordinator = Coordinator::new(ctx, runner, &options.limits)
        .with_table_roots(options.table_roots.clone());
    let mut janitor = None;
    let mut catalog = None;
    if let Some(warehouse) = &warehouse {
        let ctx = coordinator.session().clone();
        let runtime = ctx.runtime_env();
        // The catalog of earlier versions lived in the data directory.
        let legacy = options
            .data_dir
            .as_deref()
            .filter(|_| warehouse.local_dir().is_some());
        let opened = WarehouseCatalog::open(
            Arc::clone(warehouse),
            legacy,
            Janitor::new(runtime, options.janitor),
            &ctx,
        )
        .await
        .map_err(|e| anyhow::anyhow!("the catalog in {}: {e}", warehouse.url()))?;
        janitor = Some(AbortOnDropHandle::new(sweep::spawn(
            Arc::clone(&opened),
            ctx,
        )));
        catalog = Some(opened);
    }
    let coordinator = Arc::new(coordinator);
    crate::catalog::system::register(
        coordinator.session(),
        Arc::downgrade(&coordinator) as Weak<dyn LiveQueries>,
        Arc::clone(&resolver),
        health.clone(),
    )?;
    let (tls, cert) = match &options.tls {
        Some(files) => {
            let cert = ReloadingCert::load(&files.cert, &files.key)?;
            cert.watch();
            let config = server_config(Arc::clone(&cert), files.client_ca.as_deref())?;
            (Some(config), Some(cert))
        }
        None => (None, None),
    };
    let listener = TcpListener::bind(options.listen).await?;
    let addr = listener.local_addr()?;
    let flight = Arc::new(SquadronFlight::new(Arc::new(SquadronFlightSql::new(
        Arc::new(Engine::new(Arc::clone(&coordinator), catalog)),
        options.auth.clone(),
        options.max_queries_per_user,
    ))));
    let service = ZeroCopyDoGet::serving(
        flight,
        MessageLimits {
            decoding: CLIENT_MESSAGE_BYTES,
            encoding: MAX_MESSAGE_BYTES,
        },
    );
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    let follower = AbortOnDropHandle::new(tokio::spawn(follow_workers(
        health_reporter.clone(),
        health.usable(),
    )));
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .max_concurrent_streams(Some(CLIENT_STREAMS_PER_CONNECTION))
            .layer(AuthLayer::new(options.auth.clone()))
            .layer(MapResponseLayer::new(too_large_response))
            .add_service(health_service)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming(listener, tls), async move {
                let _ = rx.await;
                drop(follower);
                health_reporter
                    .set_service_status("", ServingStatus::NotServing)
                    .await;
            }),
    );
    Ok(RunningServer {
        addr,
        workers,
        local_workers,
        coordinator,
        shutdown: Some(tx),
        handle,
        _prober: prober,
        _janitor: janitor,
        _cert: cert,
    })
}

/// The warehouse: `--warehouse`, else the data directory.
fn warehouse_location(options: &ServerOptions) -> Option<String> {
    options.warehouse.clone().or_else(|| {
        options
            .data_dir
            .as_ref()
            .map(|dir| dir.to_string_lossy().to_string())
    })
}
