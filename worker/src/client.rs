//! Cached gRPC channels to peers (other workers, or workers seen from the
//! coordinator), and reading a task output stream from one.
//!
//! One lazily connected channel per URL, shared by all tasks: tonic
//! multiplexes calls over it. A channel whose connection failed is evicted,
//! so a worker restarted on the same address is reached again by the next
//! call instead of every call repeating the old transport error. Connects
//! time out and HTTP/2 keepalive pings detect a peer that paused or was cut
//! off, instead of waiting on it forever.

use std::sync::Arc;
use std::time::Duration;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::Ticket;
use dashmap::DashMap;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use futures::{Stream, StreamExt, TryStreamExt};
use squadron_proto::v1::worker_service_client::WorkerServiceClient;
use squadron_proto::StreamKey;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::AbortOnDropHandle;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::error::upstream_error;
use crate::stream::end_marker::{strip_end, EndSeen};

/// Largest gRPC message accepted from a peer. Flight batches are split into
/// messages of about 2 MiB by the encoder; this leaves ample headroom.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How long connecting to a peer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 keepalive: a ping this often, and a peer that does not answer one
/// within the timeout is gone. Servers use the same values.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 flow control. All streams from one peer share one connection,
/// and data a stream received but its reader has not consumed yet holds
/// connection credit. A consumer reads its inputs one after another (a
/// join's build side, then its probe side), so streams opened early sit
/// unread; with hyper's default 5 MiB connection window a few of them
/// exhausted it at TPC-H SF1 and starved the very stream the consumer was
/// reading: the query hung. The connection window is therefore no limit
/// of its own; what a peer may buffer is bounded per stream (2 MiB, about
/// one Flight message) times the streams a job opens.
pub const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
pub const CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// Batches a stream read from a peer buffers ahead of its consumer.
const READ_AHEAD: usize = 2;

#[derive(Debug, Clone, Default)]
pub struct PeerClients {
    // Bounded by the set of worker URLs the resolver ever returned.
    channels: Arc<DashMap<String, Channel>>,
}

impl PeerClients {
    pub fn channel(&self, url: &str) -> Result<Channel> {
        if let Some(channel) = self.channels.get(url) {
            return Ok(channel.clone());
        }
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| DataFusionError::Configuration(format!("bad worker URL {url}: {e}")))?
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        let channel = endpoint.connect_lazy();
        self.channels.insert(url.to_string(), channel.clone());
        Ok(channel)
    }

    /// Forgets the channel to `url` after a call on it failed for a reason
    /// that may be its connection: the next call connects afresh.
    pub fn forget_if_broken(&self, url: &str, code: Code) {
        if matches!(code, Code::Unavailable | Code::Unknown | Code::Cancelled) {
            self.channels.remove(url);
        }
    }

    pub fn flight(&self, url: &str) -> Result<FlightServiceClient<Channel>> {
        Ok(FlightServiceClient::new(self.channel(url)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    pub fn worker(&self, url: &str) -> Result<WorkerServiceClient<Channel>> {
        Ok(WorkerServiceClient::new(self.channel(url)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}

/// The batches of one task output stream, fetched with `DoGet`.
///
/// The fetch starts at once, in a task of its own that reads a little
/// ahead: a consumer that never polls the stream (a join whose build side
/// came out empty) still connects, and dropping the stream hangs up, which
/// releases the producer's channel. The stream is complete only if the
/// producer's completion marker arrived and its row count matches.
pub fn fetch_stream(
    clients: PeerClients,
    url: String,
    key: StreamKey,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let pump = tokio::spawn(async move {
        let describe = format!("{key} from {url}");
        tokio::select! {
            _ = tx.closed() => {}
            result = pump(&clients, &url, &key, &tx) => {
                if let Err(e) = result {
                    if let FlightError::Tonic(status) = &e {
                        clients.forget_if_broken(&url, status.code());
                    }
                    let status = match e {
                        FlightError::Tonic(status) => *status,
                        other => tonic::Status::internal(other.to_string()),
                    };
                    let _ = tx.send(Err(upstream_error(&describe, &status))).await;
                }
            }
        }
    });
    let guard = AbortOnDropHandle::new(pump);
    ReceiverStream::new(rx).map(move |item| {
        // The pump lives as long as the stream.
        let _ = &guard;
        item
    })
}

async fn pump(
    clients: &PeerClients,
    url: &str,
    key: &StreamKey,
    tx: &mpsc::Sender<Result<RecordBatch>>,
) -> std::result::Result<(), FlightError> {
    let mut client = clients
        .flight(url)
        .map_err(|e| FlightError::ExternalError(Box::new(e)))?;
    let response = client
        .do_get(Ticket::new(key.to_ticket()))
        .await
        .map_err(|status| FlightError::Tonic(Box::new(status)))?;
    let seen = EndSeen::default();
    let messages = response
        .into_inner()
        .map_err(|s| FlightError::Tonic(Box::new(s)));
    let mut batches =
        FlightRecordBatchStream::new_from_flight_data(strip_end(messages, seen.clone()));
    let mut rows = 0u64;
    while let Some(batch) = batches.try_next().await? {
        rows += batch.num_rows() as u64;
        if tx.send(Ok(batch)).await.is_err() {
            return Ok(());
        }
    }
    let sent = seen.rows()?;
    if sent != rows {
        return Err(FlightError::protocol(format!(
            "the producer sent {sent} rows but {rows} arrived"
        )));
    }
    Ok(())
}
