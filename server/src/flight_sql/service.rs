//! The Flight SQL protocol handlers: what outside clients (ADBC, JDBC,
//! pyarrow) call. Each decodes its request and hands it on: `planning`,
//! `statement_runs`, `update_runs`, `metadata`, `session_options`,
//! `prepared`; `wire` has the shapes the answers share.

use squadron_planner::current_user::mentions_current_user;
use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::SqlInfoData;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, CommandGetCatalogs,
    CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult};
use arrow_flight::{FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket};
use datafusion::arrow::array::RecordBatch;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use squadron_common::error::Error;
use squadron_net::stream::encoder::flight_data;
use tonic::{Request, Response, Status, Streaming};

use super::action_types::extra_action_types;
pub use super::client_state::ClientState;
use super::metadata;
use super::prepared::Prepared;
use super::primary_keys;
use super::session_options::{
    self, SetSessionOptionsRequest, CLOSE_SESSION, GET_SESSION_OPTIONS, SET_SESSION_OPTIONS,
};
use super::sessions::{Caller, SESSION_COOKIE};
use super::statements::Pending;
use super::wire::{
    batch_stream, command_info, read_batches, schema_bytes, FlightDataStream, CANCEL_FLIGHT_INFO,
};
use crate::engine::Engine;
use crate::security::auth::Authenticator;
use crate::updates::ingest::ingest;
use squadron_coordinator::statements::Coordinator;
use squadron_net::tls::conn::remote_addr;

pub struct SquadronFlightSql {
    /// The coordinator, with the catalog statements commit to.
    pub(super) coordinator: Arc<Engine>,
    pub(super) state: Arc<ClientState>,
    pub(super) sql_info: SqlInfoData,
    /// Logins and tokens; `None` in insecure mode.
    pub(super) auth: Option<Arc<Authenticator>>,
}

impl SquadronFlightSql {
    /// Serves `coordinator` to clients checked by `auth`, each user
    /// running at most `max_queries_per_user` queries at once.
    pub fn new(
        coordinator: Arc<Engine>,
        auth: Option<Arc<Authenticator>>,
        max_queries_per_user: usize,
    ) -> Self {
        let state = ClientState::new(
            Arc::clone(coordinator.shared_session()),
            max_queries_per_user,
        );
        let sql_info = super::sql_info::sql_info(coordinator.session());
        Self {
            coordinator,
            state,
            sql_info,
            auth,
        }
    }

    /// The handles and sessions of clients.
    pub fn state(&self) -> &Arc<ClientState> {
        &self.state
    }

    pub fn coordinator(&self) -> &Arc<Coordinator> {
        self.coordinator.coordinator()
    }
}

#[tonic::async_trait]
impl FlightSqlService for SquadronFlightSql {
    type FlightService = SquadronFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let message = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        let mut response = Response::new(futures::stream::once(async { Ok(message) }).boxed());
        // Insecure mode: every handshake succeeds.
        let Some(auth) = &self.auth else {
            return Ok(response);
        };
        let client = remote_addr(&request).map(|a| a.ip());
        let headers = request.metadata().clone().into_headers();
        let (principal, token) = auth.handshake(&headers, client)?;
        tracing::debug!(user = principal.user, "logged in");
        let bearer = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("the token is not a valid header value"))?;
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = Caller::of(&request);
        let planned = self.plan_sql(&caller, &query.query).await?;
        let planned = self.updated_now(&caller, planned).await?;
        self.statement_info(&caller, planned, request.into_inner())
            .await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let caller = Caller::of(&request);
        let session = self.state.sessions.current(&caller);
        let plan = self.coordinator.logical_plan(&session, &query.query).await;
        let plan = self.counted(&caller, Some(&query.query), plan.map_err(Status::from))?;
        // A plan that answers its user's name is not kept for other users.
        let key = self
            .coordinator
            .statement_key(&session, &query.query)
            .filter(|_| !mentions_current_user(&plan));
        let plan = caller.bound(plan)?;
        let origins = squadron_coordinator::statements::origins_in(&session, &plan);
        let prepared = self.counted(&caller, Some(&query.query), Prepared::new(plan))?;
        let prepared = prepared
            .with_key(key)
            .with_sql(&query.query)
            .with_origins(&origins);
        let dataset_schema = schema_bytes(&prepared.dataset)?;
        let parameter_schema = schema_bytes(&prepared.parameters)?;
        let id = self.state.prepared.insert(prepared, &caller.quota_key())?;
        let handle = self.state.signer.sign(caller.user(), &id);
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into_bytes().into(),
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let id = self.id_of(&Caller::of(&request), &query.prepared_statement_handle);
        let batches = read_batches(request.into_inner()).await?;
        self.state.prepared.bind(&id, &batches)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let caller = Caller::of(&request);
        let id = self.id_of(&caller, &query.prepared_statement_handle);
        let prepared = self.state.prepared.get(&id)?;
        let sql = prepared.sql.clone();
        let planned = self.plan_prepared(&caller, prepared).await;
        let mut planned = self.counted(&caller, sql.as_deref(), planned)?;
        planned.statement = sql;
        let planned = self.updated_now(&caller, planned).await?;
        self.statement_info(&caller, planned, request.into_inner())
            .await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        // Our FlightInfo hands out statement tickets; a client may still
        // redeem the command itself.
        let caller = Caller::of(&request);
        let prepared = self
            .prepared_of(&caller, &query.prepared_statement_handle)
            .await?;
        let slot = self.state.quotas.admit(&caller)?;
        let planned = self.plan_for(&caller, prepared.bound_plan()?).await?;
        let job_id = uuid::Uuid::new_v4().to_string();
        let stream = self.run_query(&caller, slot, &job_id, planned).await?;
        Ok(Response::new(stream))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = Caller::of(&request);
        let session = self.state.sessions.current(&caller);
        let plan = self
            .coordinator
            .logical_plan(&session, &command.query)
            .await;
        let plan = self.counted(&caller, Some(&command.query), plan.map_err(Status::from))?;
        let plan = caller.bound(plan)?;
        self.run_updates(&caller, vec![plan], Some(&command.query))
            .await
    }

    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = Caller::of(&request);
        let id = self.id_of(&caller, &command.prepared_statement_handle);
        // Parameter rows may come with the update itself (JDBC executeBatch).
        let batches = read_batches(request.into_inner()).await?;
        if batches.iter().any(|b| b.num_columns() > 0) {
            self.state.prepared.bind(&id, &batches)?;
        }
        let prepared = self.state.prepared.get(&id)?;
        let prepared = self.with_current_tables(&caller, prepared).await?;
        let sql = prepared.sql.clone();
        self.run_updates(&caller, prepared.bound_plans()?, sql.as_deref())
            .await
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let caller = Caller::of(&request);
        let _slot = self.state.quotas.admit(&caller)?;
        let session = self.state.sessions.current(&caller);
        let mut stream = FlightRecordBatchStream::new_from_flight_data(
            request.into_inner().map_err(FlightError::from),
        );
        let first = stream
            .try_next()
            .await
            .map_err(|e| Status::invalid_argument(format!("reading the ingested rows: {e}")))?;
        let schema = stream
            .schema()
            .cloned()
            .ok_or_else(|| Status::invalid_argument("the ingest sent no schema"))?;
        let rows = futures::stream::iter(first.map(Ok)).chain(
            stream.map_err(|e| Error::invalid_argument(format!("reading the ingested rows: {e}"))),
        );
        let work = ingest(&self.coordinator, &session, &command, schema, rows);
        let written = self.as_query(&caller, None, work).await?;
        Ok(written as i64)
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let caller = Caller::of(&request);
        let action = request.into_inner();
        let malformed = |e: prost::DecodeError| {
            Status::invalid_argument(format!("a malformed {}: {e}", action.r#type))
        };
        let (body, cookie) = match action.r#type.as_str() {
            CANCEL_FLIGHT_INFO => {
                let request =
                    CancelFlightInfoRequest::decode(action.body.clone()).map_err(malformed)?;
                let info = request.info.ok_or_else(|| {
                    Status::invalid_argument("CancelFlightInfo names no FlightInfo")
                })?;
                let result = CancelFlightInfoResult {
                    status: self.cancel(&caller, &info) as i32,
                };
                (result.encode_to_vec(), None)
            }
            SET_SESSION_OPTIONS => {
                let request =
                    SetSessionOptionsRequest::decode(action.body.clone()).map_err(malformed)?;
                let (result, id) =
                    session_options::set_options(&self.state.sessions, &caller, request)?;
                (result.encode_to_vec(), Some(id))
            }
            GET_SESSION_OPTIONS => (
                session_options::get_options(&self.state.sessions, &caller).encode_to_vec(),
                None,
            ),
            CLOSE_SESSION => (
                session_options::close(&self.state.sessions, &caller).encode_to_vec(),
                None,
            ),
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown action {other:?}"
                )));
            }
        };
        let result = arrow_flight::Result { body: body.into() };
        let mut response = Response::new(futures::stream::once(async { Ok(result) }).boxed());
        // Clients that keep cookies (the JDBC driver) find their session by
        // it; the others by their connection.
        if let Some(cookie) =
            cookie.and_then(|id| format!("{SESSION_COOKIE}={id}; HttpOnly").parse().ok())
        {
            response.metadata_mut().insert("set-cookie", cookie);
        }
        Ok(response)
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let caller = Caller::of(&request);
        let info = FlightInfo::decode(query.info)
            .map_err(|e| Status::invalid_argument(format!("a malformed FlightInfo: {e}")))?;
        // ActionCancelQuery's results number like CancelStatus.
        Ok(ActionCancelQueryResult {
            result: self.cancel(&caller, &info) as i32,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let id = self.id_of(&Caller::of(&request), &query.prepared_statement_handle);
        self.state.prepared.remove(&id)
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = metadata::catalogs(self.coordinator.session(), query)?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = metadata::db_schemas(self.coordinator.session(), query)?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = metadata::tables(self.coordinator.session(), query).await?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(metadata::table_types(query)?))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(
            query,
            &primary_keys::primary_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = primary_keys::primary_keys(self.coordinator.session(), query).await?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(
            query,
            &metadata::foreign_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::foreign_keys_schema(),
        )))
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(
            query,
            &metadata::foreign_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::foreign_keys_schema(),
        )))
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        command_info(
            query,
            &metadata::foreign_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::foreign_keys_schema(),
        )))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = metadata::XDBC_TYPES.schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = query
            .into_builder(&metadata::XDBC_TYPES)
            .build()
            .map_err(|e| Status::internal(format!("building type info: {e}")))?;
        Ok(batch_stream(batch))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let caller = Caller::of(&request);
        let id = self.id_of(&caller, &ticket.statement_handle);
        let polled = self.state.polls.with(&id, |p| p.take_stream()).flatten();
        if let Some(stream) = polled {
            return Ok(Response::new(stream));
        }
        if let Some(stream) = self.state.statements.take_started(&id) {
            return Ok(Response::new(stream));
        }
        // The quota slot first: a refused DoGet leaves the statement for
        // a retry.
        let slot = self.state.quotas.admit(&caller)?;
        let stream = match self.state.statements.take(&id)? {
            Pending::Started(started) => started.into_stream(),
            Pending::Planned(planned) => {
                let job_id = self.state.signer.job_id(&id);
                self.run_query(&caller, slot, &job_id, *planned).await?
            }
        };
        Ok(Response::new(stream))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let builder = query.into_builder(&self.sql_info);
        let schema = builder.schema();
        let batch = builder.build();
        let stream =
            flight_data(schema, futures::stream::once(async { batch })).map_err(Status::from);
        Ok(Response::new(stream.boxed()))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(extra_action_types().into_iter().map(Ok).collect())
    }
}
