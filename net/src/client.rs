//! Cached gRPC channels to peers (other workers, or workers seen from the
//! coordinator). Reading a task output stream is `stream::fetch`.
//!
//! One lazily connected channel per URL, shared by all tasks: tonic
//! multiplexes calls over it. A channel whose connection failed is evicted,
//! so a worker restarted on the same address is reached again by the next
//! call instead of every call repeating the old transport error. Connects
//! time out and HTTP/2 keepalive pings detect a peer that paused or was cut
//! off, instead of waiting on it forever.

use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use dashmap::DashMap;
use datafusion::common::{DataFusionError, Result};
use squadron_proto::v1::worker_service_client::WorkerServiceClient;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::tls::client::ClusterClientTls;

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

/// Largest HTTP/2 frame a peer may send on our channels. Streams carry
/// Flight messages of up to a few MiB; at the default 16 KiB each is cut
/// into hundreds of frames, each one read, checked and copied on its own.
pub const MAX_FRAME: u32 = 1024 * 1024;

/// Peer channels kept open at once; far more than a cluster has workers.
pub const MAX_CHANNELS: usize = 1024;

#[derive(Debug, Clone, Default)]
pub struct PeerClients {
    /// At most `MAX_CHANNELS`: workers come and go under a dynamic
    /// resolver, and a channel to one long gone is dropped to make room.
    channels: Arc<DashMap<String, Channel>>,
    /// Mutual TLS with the cluster CA; plaintext when `None` (insecure mode).
    tls: Option<ClusterClientTls>,
}

impl PeerClients {
    pub fn new(tls: Option<ClusterClientTls>) -> Self {
        Self {
            channels: Arc::default(),
            tls,
        }
    }

    pub fn channel(&self, url: &str) -> Result<Channel> {
        if let Some(channel) = self.channels.get(url) {
            return Ok(channel.clone());
        }
        let bad = |e: &dyn std::fmt::Display| {
            DataFusionError::Configuration(format!("bad worker URL {url}: {e}"))
        };
        let mut endpoint = match &self.tls {
            // Peers are dialed over TLS whatever scheme a URL was given with.
            Some(tls) => {
                let target = url.replacen("http://", "https://", 1);
                Endpoint::from_shared(target)
                    .map_err(|e| bad(&e))?
                    .tls_config(tls.config())
                    .map_err(|e| bad(&e))?
            }
            None if url.starts_with("https://") => {
                return Err(DataFusionError::Configuration(format!(
                    "{url} needs TLS: give --cluster-ca, --cluster-cert and --cluster-key"
                )))
            }
            None => Endpoint::from_shared(url.to_string()).map_err(|e| bad(&e))?,
        };
        endpoint = endpoint
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME)
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        let channel = endpoint.connect_lazy();
        if self.channels.len() >= MAX_CHANNELS {
            // Any one: a channel still in use stays alive in its callers
            // and is re-created on next use.
            let evicted = self.channels.iter().next().map(|e| e.key().clone());
            if let Some(evicted) = evicted {
                self.channels.remove(&evicted);
            }
        }
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

    /// Channels kept now.
    pub fn channels(&self) -> usize {
        self.channels.len()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn channels_to_many_peers_stay_bounded() {
        let clients = PeerClients::new(None);
        for port in 0..MAX_CHANNELS + 50 {
            clients
                .channel(&format!("http://127.0.0.1:{}", 10_000 + port))
                .unwrap();
        }
        assert_eq!(clients.channels(), MAX_CHANNELS);
        // The newest is kept.
        let newest = format!("http://127.0.0.1:{}", 10_000 + MAX_CHANNELS + 49);
        assert!(clients.channels.contains_key(&newest));
    }
}
