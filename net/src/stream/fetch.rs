//! Reading one task output stream from the worker that holds it (`DoGet`).
//!
//! Every fetch is verified the same way: the producer's completion marker
//! must arrive, and the rows the IPC headers announced must add up to the
//! rows it reports. Consumers then take the stream either decoded into
//! batches (tasks, which compute on it) or as raw Flight messages (the
//! coordinator's job output, which only forwards them to the client: no
//! decode and re-encode of every result byte on the coordinator).
//!
//! The fetch starts at once, in a task of its own that reads a little
//! ahead: a consumer that never polls the stream (a join whose build side
//! came out empty) still connects, and dropping the stream hangs up, which
//! releases the producer's channel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, Ticket};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use futures::{Stream, StreamExt, TryStreamExt};
use squadron_proto::StreamKey;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::AbortOnDropHandle;

use super::encoder::{cast_to_schema, changes_in_transit};
use super::end_marker::{strip_end, EndSeen};
use super::ipc_header::{message_kind, MessageKind};
use crate::client::PeerClients;
use squadron_common::error::upstream_error;

/// Items a stream read from a peer buffers ahead of its consumer.
const READ_AHEAD: usize = 2;

/// The batches of one task output stream, with the types of `schema`:
/// dictionary columns travel as their values (see `encoder`) and are
/// encoded again here, since the reading plan's operators were planned
/// for (and some assume) the dictionary type.
pub fn fetch_stream(
    clients: PeerClients,
    url: String,
    key: StreamKey,
    ticket: Vec<u8>,
    schema: SchemaRef,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let messages =
        verified_messages(clients.clone(), url.clone(), ticket).map_ok(|(data, _rows)| data);
    let recast = changes_in_transit(&schema);
    let batches =
        FlightRecordBatchStream::new_from_flight_data(messages).map(move |batch| match batch {
            Ok(batch) if recast => Ok(cast_to_schema(&batch, &schema)?),
            other => other,
        });
    read_ahead(clients, url, key, batches)
}

/// The record batch messages of one task output stream, undecoded, each
/// with its row count (the schema message is dropped: the reader sends its
/// own).
pub fn fetch_raw_stream(
    clients: PeerClients,
    url: String,
    key: StreamKey,
    ticket: Vec<u8>,
) -> impl Stream<Item = Result<(FlightData, u64)>> + Send + 'static {
    let messages = verified_messages(clients.clone(), url.clone(), ticket)
        .try_filter_map(|(data, rows)| futures::future::ready(Ok(rows.map(|rows| (data, rows)))));
    read_ahead(clients, url, key, messages)
}

/// DoGet of `ticket` (the stream's key, signed by its job attempt's
/// secret), with the completion marker stripped and checked against the rows
/// the IPC headers announced; the check fails the stream at its end. Each
/// message comes with its rows when it is a record batch (its header is
/// read once, here).
fn verified_messages(
    clients: PeerClients,
    url: String,
    ticket: Vec<u8>,
) -> impl Stream<Item = std::result::Result<(FlightData, Option<u64>), FlightError>> + Send + 'static
{
    let seen = EndSeen::default();
    let rows = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&rows);
    let end = seen.clone();
    let messages = futures::stream::once(async move {
        let mut client = clients
            .flight(&url)
            .map_err(|e| FlightError::ExternalError(Box::new(e)))?;
        let response = client
            .do_get(Ticket::new(ticket))
            .await
            .map_err(|status| FlightError::Tonic(Box::new(status)))?;
        Ok::<_, FlightError>(
            response
                .into_inner()
                .map_err(|s| FlightError::Tonic(Box::new(s))),
        )
    })
    .try_flatten();
    let counted_messages = strip_end(messages, seen).and_then(move |data| {
        let result = match message_kind(&data) {
            Ok(MessageKind::RecordBatch { rows }) => {
                counted.fetch_add(rows, Ordering::Relaxed);
                Ok((data, Some(rows)))
            }
            Ok(MessageKind::Schema) => Ok((data, None)),
            Ok(MessageKind::Other(name)) => Err(FlightError::protocol(format!(
                "an unexpected {name} message in a task output stream"
            ))),
            Err(e) => Err(e),
        };
        futures::future::ready(result)
    });
    let check = futures::stream::once(async move {
        let sent = end.rows()?;
        let arrived = rows.load(Ordering::Relaxed);
        if sent != arrived {
            return Err(FlightError::protocol(format!(
                "the producer sent {sent} rows but {arrived} arrived"
            )));
        }
        Ok(None)
    });
    counted_messages
        .map_ok(Some)
        .chain(check)
        .try_filter_map(|item| futures::future::ready(Ok(item)))
}

/// Runs `items` in a task of its own, `READ_AHEAD` items ahead of the
/// returned stream; errors name the stream and its worker.
fn read_ahead<T, S>(
    clients: PeerClients,
    url: String,
    key: StreamKey,
    items: S,
) -> impl Stream<Item = Result<T>> + Send + 'static
where
    T: Send + 'static,
    S: Stream<Item = std::result::Result<T, FlightError>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let pump = tokio::spawn(async move {
        let describe = format!("{key} from {url}");
        let forward = async {
            let mut items = std::pin::pin!(items);
            while let Some(item) = items.next().await {
                match item {
                    Ok(item) => {
                        if tx.send(Ok(item)).await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        };
        tokio::select! {
            _ = tx.closed() => {}
            result = forward => {
                if let Err(e) = result {
                    let status = match e {
                        FlightError::Tonic(status) => *status,
                        other => tonic::Status::internal(other.to_string()),
                    };
                    clients.forget_if_broken(&url, status.code());
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
