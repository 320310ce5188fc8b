//! The worker's Flight service: `DoGet` on a `TaskStreamTicket` serves one
//! task output channel, to a peer worker or to the coordinator; the action
//! `squadron.filter_stream` gives such a channel its consumer's filter.
//! Every other Flight call is unimplemented: workers are not a
//! client-facing endpoint.

use std::pin::Pin;

use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use squadron_proto::v1::StreamFilter;
use squadron_proto::{StreamKey, FILTER_STREAM_ACTION};
use tonic::{Request, Response, Status, Streaming};

use squadron_exec::stream::filter::decode_filter;
use squadron_exec::stream::manager::REGISTRATION_WAIT;
use squadron_exec::stream::{PendingStream, StreamManager};
use squadron_net::stream::encoder::flight_data;
use squadron_net::stream::end_marker::end_message;
use squadron_net::stream::flight_batches::for_flight;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

pub struct WorkerFlight {
    streams: StreamManager,
}

impl WorkerFlight {
    pub fn new(streams: StreamManager) -> Self {
        Self { streams }
    }
}

/// A task output stream as Flight data: the schema, the batches, then the
/// completion marker. The reader yields its end only when the producer
/// finished, so the marker is never sent for a stream cut short; after an
/// error nothing more is sent.
fn serve_stream(pending: PendingStream) -> impl Stream<Item = Result<FlightData, Status>> {
    let (rows, batches) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (counted_rows, counted_batches) = (Arc::clone(&rows), Arc::clone(&batches));
    let data = pending
        .reader
        .map(move |item| {
            let batch = item.map_err(FlightError::from)?;
            counted_rows.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
            counted_batches.fetch_add(1, Ordering::Relaxed);
            let pieces = for_flight(batch).into_iter().map(Ok::<_, FlightError>);
            Ok::<_, FlightError>(futures::stream::iter(pieces))
        })
        .try_flatten();
    let end = futures::stream::once(async move {
        Ok(end_message(
            rows.load(Ordering::Relaxed),
            batches.load(Ordering::Relaxed),
        ))
    });
    flight_data(pending.schema, data)
        .chain(end)
        .map_err(Status::from)
        .inspect({
            // Looked up once per stream, not per message.
            let sent_bytes = metrics::counter!(crate::metrics::SHUFFLE_BYTES);
            let sent_batches = metrics::counter!(crate::metrics::SHUFFLE_BATCHES);
            move |item| {
                if let Ok(data) = item {
                    let bytes = data.data_header.len() + data.data_body.len();
                    sent_bytes.increment(bytes as u64);
                    if !data.data_body.is_empty() {
                        sent_batches.increment(1);
                    }
                }
            }
        })
        .scan(false, |failed, item| {
            let stop = *failed;
            *failed |= item.is_err();
            futures::future::ready((!stop).then_some(item))
        })
}

/// Gives the stream a `StreamFilter` names the filter in it; the answer
/// says whether the stream was still there to take it.
async fn filter_stream(streams: &StreamManager, body: &[u8]) -> Result<bool, Status> {
    let request = StreamFilter::decode(body)
        .map_err(|e| Status::invalid_argument(format!("a malformed StreamFilter: {e}")))?;
    let (key, signature) = StreamKey::from_ticket(&request.ticket)
        .ok_or_else(|| Status::invalid_argument("the ticket is not a task stream ticket"))?;
    let Some(schema) = streams.filterable_schema(&key, REGISTRATION_WAIT).await else {
        return Ok(false);
    };
    let filter = decode_filter(&request.filter, &schema)
        .map_err(|e| Status::invalid_argument(format!("the filter for {key}: {e}")))?;
    Ok(streams.set_filter(&key, Some(&signature), filter)?)
}

fn not_here(call: &str) -> Status {
    Status::unimplemented(format!("{call} is not served by a Squadron worker"))
}

#[tonic::async_trait]
impl FlightService for WorkerFlight {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let ticket = request.into_inner();
        let (key, signature) = StreamKey::from_ticket(&ticket.ticket)
            .ok_or_else(|| Status::invalid_argument("the ticket is not a task stream ticket"))?;
        // The producer may not have registered yet: its task was sent at
        // the same time as the consumer's.
        let pending = self
            .streams
            .take_when_registered(&key, REGISTRATION_WAIT, Some(&signature))
            .await?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no task stream {key} on this worker (none registered within {REGISTRATION_WAIT:?})"
                ))
            })?;
        Ok(Response::new(serve_stream(pending).boxed()))
    }

    async fn handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(not_here("Handshake"))
    }

    async fn list_flights(
        &self,
        _request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(not_here("ListFlights"))
    }

    async fn get_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(not_here("GetFlightInfo"))
    }

    async fn poll_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(not_here("PollFlightInfo"))
    }

    async fn get_schema(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(not_here("GetSchema"))
    }

    async fn do_put(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(not_here("DoPut"))
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(not_here("DoExchange"))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != FILTER_STREAM_ACTION {
            return Err(Status::unimplemented(format!(
                "a Squadron worker serves only the action {FILTER_STREAM_ACTION}, not {:?}",
                action.r#type
            )));
        }
        let taken = filter_stream(&self.streams, &action.body).await?;
        let answer = arrow_flight::Result::new(if taken { "applied" } else { "gone" });
        Ok(Response::new(
            futures::stream::once(async { Ok(answer) }).boxed(),
        ))
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(not_here("ListActions"))
    }
}
