//! Serving a worker: the control service and the Flight stream service on
//! one listener.

use std::net::SocketAddr;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use squadron_proto::v1::worker_service_server::WorkerServiceServer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::client::{PeerClients, MAX_MESSAGE_BYTES};
use crate::service::{WorkerControl, WorkerFlight};
use crate::stream::StreamManager;
use crate::task::{TaskRegistry, TaskRunner};

/// A worker's shared state.
#[derive(Clone, Default)]
pub struct Worker {
    pub streams: StreamManager,
    pub tasks: TaskRegistry,
    pub clients: PeerClients,
}

impl Worker {
    /// Serves the worker on a bound listener until `shutdown` resolves.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let runner = TaskRunner::new(
            self.streams.clone(),
            self.tasks.clone(),
            self.clients.clone(),
        );
        let control = WorkerControl::new(runner, self.streams.clone(), self.tasks.clone());
        let flight = WorkerFlight::new(self.streams.clone());
        tokio::spawn(expire_orphaned_streams(self.streams.clone()));
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
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
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
            .await?;
        Ok(())
    }
}

/// Binds a worker on `addr` and serves it in the background; returns the
/// URL peers reach it at and its state. Used for the coordinator's embedded
/// workers.
pub async fn spawn_worker(addr: SocketAddr) -> anyhow::Result<(String, Worker)> {
    let listener = TcpListener::bind(addr).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let worker = Worker::default();
    let serving = worker.clone();
    tokio::spawn(async move {
        if let Err(e) = serving.serve(listener, std::future::pending()).await {
            tracing::error!("embedded worker stopped: {e}");
        }
    });
    Ok((url, worker))
}

/// Drops streams nobody fetched for a long time. Normally a job's streams
/// are fetched or dropped by CleanUpJob; this bounds what a coordinator that
/// died mid-job leaves behind.
async fn expire_orphaned_streams(streams: StreamManager) {
    let mut tick = tokio::time::interval(ORPHAN_CHECK_INTERVAL);
    loop {
        tick.tick().await;
        let dropped = streams.drop_older_than(ORPHANED_STREAM_TTL);
        if dropped > 0 {
            tracing::warn!(dropped, "dropped task streams nobody fetched");
        }
    }
}

const ORPHAN_CHECK_INTERVAL: Duration = Duration::from_secs(60);
const ORPHANED_STREAM_TTL: Duration = Duration::from_secs(600);
