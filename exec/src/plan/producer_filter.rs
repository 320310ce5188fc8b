//! A stage read's filter, sent to the tasks that produce what it reads.
//!
//! A join's dynamic filter over a stage read (see
//! `dynamic_filters::stage_reads`) drops rows only once they have crossed
//! the network. Sent to the producers, it drops them before they are
//! queued, encoded and sent: in TPC-H q18 the 624 order keys of big orders
//! stop the shuffle of all 60 M line items at SF10. The read fetches its
//! streams at once (a producer must never wait on a reader that has not
//! connected), so the filter follows separately once the join above
//! completes it: to the producers on this worker directly, to the others
//! as the Flight action `squadron.filter_stream` under the stream's signed
//! ticket. Rows already queued or sent pass; the read's own filter drops
//! them. Losing the filter on the way costs only the work it would save,
//! so failures are logged, not raised.

use std::sync::Arc;

use arrow_flight::Action;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::{DynamicFilterPhysicalExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;
use futures::StreamExt;
use prost::Message;
use squadron_proto::v1::StreamFilter;
use squadron_proto::{StreamKey, FILTER_STREAM_ACTION};
use tokio_util::task::AbortOnDropHandle;

use crate::stream::filter::encode_filter;
use crate::stream::manager::REGISTRATION_WAIT;
use crate::stream::StreamManager;
use squadron_net::client::PeerClients;
use squadron_net::stream::StreamSecret;

/// How a read reaches the producers of its streams (from its binding).
#[derive(Clone)]
pub struct Producers {
    pub clients: PeerClients,
    /// This worker's streams, and the URL it is known by.
    pub local: StreamManager,
    pub own_url: String,
    /// Signs the streams' tickets.
    pub secret: StreamSecret,
}

/// Starts sending `filter` to the producers of `streams` once it is
/// complete; dropping the handle stops it (the read is gone).
pub fn send_when_complete(
    filter: Arc<dyn PhysicalExpr>,
    binding: Producers,
    streams: Vec<(String, StreamKey)>,
) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        let Some(dynamic) = filter.downcast_ref::<DynamicFilterPhysicalExpr>() else {
            return;
        };
        dynamic.wait_complete().await;
        let current = match dynamic.current() {
            Ok(current) => current,
            Err(e) => return tracing::debug!("a producer filter: {e}"),
        };
        if keeps_every_row(&current) {
            return;
        }
        let encoded = match encode_filter(&current) {
            Ok(encoded) => encoded,
            Err(e) => return tracing::debug!("a producer filter cannot be encoded: {e}"),
        };
        let sends = streams.into_iter().map(|(url, key)| {
            let (binding, current, encoded) = (&binding, &current, &encoded);
            async move {
                if url == binding.own_url {
                    // Registered, or its producer has not started yet.
                    let local = &binding.local;
                    if local
                        .filterable_schema(&key, REGISTRATION_WAIT)
                        .await
                        .is_none()
                    {
                        return;
                    }
                    if let Err(e) = local.set_filter(&key, None, Arc::clone(current)) {
                        tracing::debug!("filtering {key} here: {e}");
                    }
                    return;
                }
                if let Err(e) = send(binding, &url, &key, encoded.clone()).await {
                    tracing::debug!("filtering {key} on {url}: {e}");
                }
            }
        });
        futures::stream::iter(sends)
            .buffer_unordered(8)
            .collect::<Vec<()>>()
            .await;
    }))
}

fn keeps_every_row(filter: &Arc<dyn PhysicalExpr>) -> bool {
    filter
        .downcast_ref::<Literal>()
        .is_some_and(|l| l.value() == &ScalarValue::Boolean(Some(true)))
}

async fn send(
    binding: &Producers,
    url: &str,
    key: &StreamKey,
    filter: Vec<u8>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let body = StreamFilter {
        ticket: binding.secret.ticket(key),
        filter,
    }
    .encode_to_vec();
    let mut client = binding.clients.flight(url)?;
    let mut answers = client
        .do_action(Action::new(FILTER_STREAM_ACTION, body))
        .await?
        .into_inner();
    while answers.message().await?.is_some() {}
    Ok(())
}
