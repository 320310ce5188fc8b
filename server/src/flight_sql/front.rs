//! The Flight service clients reach: arrow-rs's Flight SQL dispatch, plus
//! the two Flight RPCs it does not route to a Flight SQL service
//! (`GetSchema`, `PollFlightInfo`), answered by `poll`.

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use tonic::{Request, Response, Status, Streaming};

use super::command_check::check_command;
use super::service::SquadronFlightSql;
use squadron_coordinator::metrics::{command_of, flight_request, known_command};

type Sql = SquadronFlightSql;

/// Wraps the Flight SQL service; every RPC but two goes straight to it.
pub struct SquadronFlight {
    sql: Arc<Sql>,
}

impl SquadronFlight {
    pub fn new(sql: Arc<Sql>) -> Self {
        Self { sql }
    }
}

#[tonic::async_trait]
impl FlightService for SquadronFlight {
    type HandshakeStream = <Sql as FlightService>::HandshakeStream;
    type ListFlightsStream = <Sql as FlightService>::ListFlightsStream;
    type DoGetStream = <Sql as FlightService>::DoGetStream;
    type DoPutStream = <Sql as FlightService>::DoPutStream;
    type DoActionStream = <Sql as FlightService>::DoActionStream;
    type ListActionsStream = <Sql as FlightService>::ListActionsStream;
    type DoExchangeStream = <Sql as FlightService>::DoExchangeStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let result = FlightService::handshake(&*self.sql, request).await;
        flight_request("Handshake", "-", &result);
        result
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        let result = FlightService::list_flights(&*self.sql, request).await;
        flight_request("ListFlights", "-", &result);
        result
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = command_of(&request.get_ref().cmd);
        let result = match check_command(&request.get_ref().cmd, "command") {
            Ok(()) => FlightService::get_flight_info(&*self.sql, request).await,
            Err(status) => Err(status),
        };
        flight_request("GetFlightInfo", command, &result);
        result
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        let command = command_of(&request.get_ref().cmd);
        let result = self.sql.poll(request).await.map(Response::new);
        flight_request("PollFlightInfo", command, &result);
        result
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let command = command_of(&request.get_ref().cmd);
        let result = self.sql.schema_of(request).await.map(Response::new);
        flight_request("GetSchema", command, &result);
        result
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let command = command_of(&request.get_ref().ticket);
        let result = match check_command(&request.get_ref().ticket, "ticket") {
            Ok(()) => FlightService::do_get(&*self.sql, request).await,
            Err(status) => Err(status),
        };
        flight_request("DoGet", command, &result);
        result
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let result = FlightService::do_put(&*self.sql, request)
            .await
            .map_err(too_large_is_exhausted);
        flight_request("DoPut", "-", &result);
        result
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        let result = FlightService::do_exchange(&*self.sql, request).await;
        flight_request("DoExchange", "-", &result);
        result
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let command = known_command(&request.get_ref().r#type);
        let result = FlightService::do_action(&*self.sql, request).await;
        flight_request("DoAction", command, &result);
        result
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let result = FlightService::list_actions(&*self.sql, request).await;
        flight_request("ListActions", "-", &result);
        result
    }
}

/// tonic reports a message over the size limit as OUT_OF_RANGE; to a client
/// it is a resource limit. `too_large_response` applies this to every
/// answer on its way out; DoPut (where clients send large messages) also
/// applies it here, so its request metric counts the status the client
/// gets.
fn too_large_is_exhausted(status: Status) -> Status {
    if status.code() == tonic::Code::OutOfRange && status.message().contains("too large") {
        Status::resource_exhausted(format!(
            "{} (the server takes messages up to {} MiB: send smaller batches)",
            status.message(),
            crate::CLIENT_MESSAGE_BYTES >> 20
        ))
    } else {
        status
    }
}

/// The same for every call: tonic refuses an oversized unary request
/// before any handler runs, in a trailers-only response whose status is in
/// the headers. (A tower `map_response` on the server.)
pub fn too_large_response(
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    if let Some(status) = Status::from_header_map(response.headers()) {
        if status.code() == tonic::Code::OutOfRange {
            let remapped = too_large_is_exhausted(status);
            if remapped.code() != tonic::Code::OutOfRange {
                let _ = remapped.add_header(response.headers_mut());
            }
        }
    }
    response
}
