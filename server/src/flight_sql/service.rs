//! The Flight SQL front end: what outside clients (ADBC, JDBC, pyarrow)
//! talk to.

use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{
    CommandGetSqlInfo, CommandStatementQuery, ProstMessageExt, SqlInfo, SqlSupportedTransaction,
    TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::statements::StatementStore;
use crate::coordinator::Coordinator;

pub struct SquadronFlightSql {
    coordinator: Arc<Coordinator>,
    statements: StatementStore,
    sql_info: SqlInfoData,
}

impl SquadronFlightSql {
    pub fn new(coordinator: Arc<Coordinator>) -> Self {
        Self {
            coordinator,
            statements: StatementStore::default(),
            sql_info: sql_info(),
        }
    }
}

fn sql_info() -> SqlInfoData {
    let mut builder = SqlInfoDataBuilder::new();
    builder.append(SqlInfo::FlightSqlServerName, "Squadron");
    builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    builder.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    builder.append(SqlInfo::FlightSqlServerReadOnly, true);
    builder.append(SqlInfo::FlightSqlServerSql, true);
    builder.append(SqlInfo::FlightSqlServerSubstrait, false);
    builder.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    builder.append(SqlInfo::FlightSqlServerCancel, false);
    builder.build().expect("static SqlInfo is valid")
}

type FlightDataStream = <SquadronFlightSql as FlightService>::DoGetStream;

#[tonic::async_trait]
impl FlightSqlService for SquadronFlightSql {
    type FlightService = SquadronFlightSql;

    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        // No authentication yet: every handshake succeeds.
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        Ok(Response::new(
            futures::stream::once(async { Ok(response) }).boxed(),
        ))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let planned = self.coordinator.plan(&query.query).await?;
        let schema = planned.schema.clone();
        let handle = self.statements.insert(planned)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.into_bytes().into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema.as_ref())
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner())
            .with_total_records(-1)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let handle = std::str::from_utf8(&ticket.statement_handle)
            .map_err(|_| Status::invalid_argument("the statement handle is not UTF-8"))?;
        let planned = self.statements.take(handle)?;
        let stream = self.coordinator.execute(handle, planned).await?;
        Ok(Response::new(stream))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(query.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema.as_ref())
            .map_err(|e| Status::internal(format!("encoding the SqlInfo schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let builder = query.into_builder(&self.sql_info);
        let schema = builder.schema();
        let batch = builder.build();
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(futures::stream::once(async { batch }))
            .map_err(Status::from);
        Ok(Response::new(stream.boxed()))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
