//! The worker's Flight service: `DoGet` on a `TaskStreamTicket` serves one
//! task output channel, to a peer worker or to the coordinator. Every other
//! Flight call is unimplemented: workers are not a client-facing endpoint.

use std::pin::Pin;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use squadron_proto::StreamKey;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::stream::StreamManager;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

pub struct WorkerFlight {
    streams: StreamManager,
}

impl WorkerFlight {
    pub fn new(streams: StreamManager) -> Self {
        Self { streams }
    }
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
        let key = StreamKey::from_ticket(&ticket.ticket)
            .ok_or_else(|| Status::invalid_argument("the ticket is not a task stream ticket"))?;
        let pending = self
            .streams
            .take(&key)
            .ok_or_else(|| Status::not_found(format!("no task stream {key} on this worker")))?;
        let batches = ReceiverStream::new(pending.receiver).map_err(FlightError::from);
        let flight = FlightDataEncoderBuilder::new()
            .with_schema(pending.schema)
            .build(batches)
            .map_err(Status::from);
        Ok(Response::new(flight.boxed()))
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
        _request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(not_here("DoAction"))
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(not_here("ListActions"))
    }
}
