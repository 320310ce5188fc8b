//! Serving a worker: the control service, the Flight stream service and the
//! gRPC health service on one listener.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use squadron_proto::v1::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

use crate::client::{PeerClients, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_MESSAGE_BYTES};
use crate::service::{WorkerControl, WorkerFlight};
use crate::stream::StreamManager;
use crate::task::{Failpoint, TaskRegistry, TaskRunner};

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
    /// Test-only fault injection (see `task::failpoint`).
    pub failpoint: Option<Arc<Failpoint>>,
}

/// A worker's shared state.
#[derive(Clone)]
pub struct Worker {
    pub streams: StreamManager,
    pub tasks: TaskRegistry,
    pub clients: PeerClients,
    runtime: Arc<RuntimeEnv>,
    failpoint: Option<Arc<Failpoint>>,
}

impl Worker {
    pub fn new(options: WorkerOptions) -> anyhow::Result<Self> {
        let mut runtime = RuntimeEnvBuilder::new();
        if let Some(limit) = options.memory_limit {
            // Track the largest consumers so an out-of-memory error names them.
            let pool: Arc<dyn MemoryPool> = Arc::new(TrackConsumersPool::new(
                FairSpillPool::new(limit),
                std::num::NonZeroUsize::new(3).expect("non-zero"),
            ));
            runtime = runtime.with_memory_pool(pool);
        }
        Ok(Self {
            streams: StreamManager::default(),
            tasks: TaskRegistry::default(),
            clients: PeerClients::default(),
            runtime: runtime.build_arc()?,
            failpoint: options.failpoint,
        })
    }

    /// Serves the worker on a bound listener until `shutdown` resolves; then
    /// reports NOT_SERVING, refuses new tasks, lets running ones finish and
    /// their streams be read, and stops.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let runner = TaskRunner::new(
            self.streams.clone(),
            self.tasks.clone(),
            self.clients.clone(),
            Arc::clone(&self.runtime),
            self.failpoint.clone(),
        );
        let draining = CancellationToken::new();
        let control = WorkerControl::new(
            runner,
            self.streams.clone(),
            self.tasks.clone(),
            draining.clone(),
        );
        let flight = WorkerFlight::new(self.streams.clone());
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
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(health_service)
            .add_service(
                WorkerServiceServer::new(control)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                FlightServiceServer::new(flight)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming(listener), shutdown)
            .await?;
        Ok(())
    }
}

/// Accepted connections with Nagle off: `Server::tcp_nodelay` applies only
/// to listeners tonic binds itself, and with Nagle on every small message
/// (a task status, a short stream) waits for a delayed ACK, about 40 ms.
pub fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Binds a worker on `addr` and serves it in the background; returns the
/// URL peers reach it at and its state. Used for the coordinator's embedded
/// workers.
pub async fn spawn_worker(
    addr: SocketAddr,
    options: WorkerOptions,
) -> anyhow::Result<(String, Worker)> {
    let listener = TcpListener::bind(addr).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let worker = Worker::new(options)?;
    let serving = worker.clone();
    tokio::spawn(async move {
        if let Err(e) = serving.serve(listener, std::future::pending()).await {
            tracing::error!("embedded worker stopped: {e}");
        }
    });
    Ok((url, worker))
}
