//! Cached gRPC channels to peers (other workers, or workers seen from the
//! coordinator). One lazily connected channel per URL, shared by all tasks:
//! tonic multiplexes calls over it.

use std::sync::Arc;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::Ticket;
use dashmap::DashMap;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use futures::{Stream, TryStreamExt};
use squadron_proto::v1::worker_service_client::WorkerServiceClient;
use squadron_proto::StreamKey;
use tonic::transport::{Channel, Endpoint};

/// Largest gRPC message accepted from a peer. Flight batches are split into
/// messages of about 2 MiB by the encoder; this leaves ample headroom.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

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
            .tcp_nodelay(true);
        let channel = endpoint.connect_lazy();
        self.channels.insert(url.to_string(), channel.clone());
        Ok(channel)
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

/// The batches of one task output stream, fetched lazily with `DoGet`.
pub fn fetch_stream(
    clients: PeerClients,
    url: String,
    key: StreamKey,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let describe = format!("{key} from {url}");
    futures::stream::once(async move {
        let mut client = clients.flight(&url)?;
        let response = client
            .do_get(Ticket::new(key.to_ticket()))
            .await
            .map_err(|status| upstream_error(&describe, FlightError::Tonic(Box::new(status))))?;
        let batches = FlightRecordBatchStream::new_from_flight_data(
            response
                .into_inner()
                .map_err(|s| FlightError::Tonic(Box::new(s))),
        )
        .map_err(move |e| upstream_error(&describe, e));
        Ok::<_, DataFusionError>(batches)
    })
    .try_flatten()
}

/// Keeps the upstream status code, so a data error in one task reaches the
/// client as such and not as an internal failure.
fn upstream_error(describe: &str, e: FlightError) -> DataFusionError {
    let (code, message) = match e {
        FlightError::Tonic(status) => (status.code(), status.message().to_string()),
        other => (tonic::Code::Internal, other.to_string()),
    };
    let status = tonic::Status::new(code, format!("reading stream {describe}: {message}"));
    DataFusionError::External(Box::new(status))
}
