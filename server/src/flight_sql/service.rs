//! The Flight SQL front end: what outside clients (ADBC, JDBC, pyarrow)
//! talk to.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::SqlInfoData;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys,
    CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementIngest, CommandStatementQuery,
    CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, IpcMessage,
    SchemaAsIpc,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use squadron_net::stream::encoder::flight_data;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::action_types::extra_action_types;
use super::metadata;
use super::poll_store::{new_poll_store, PollStore};
use super::prepared::{Prepared, PreparedStore};
use super::quotas::{QuotaSlot, UserQuotas};
use super::session_options::{
    self, SetSessionOptionsRequest, CLOSE_SESSION, GET_SESSION_OPTIONS, SET_SESSION_OPTIONS,
};
use super::sessions::{Caller, Sessions, DEFAULT_CAPACITY, DEFAULT_IDLE_TTL, SESSION_COOKIE};
use super::statements::{Pending, StartedQuery, StatementStore};
use crate::engine::Engine;
use crate::security::auth::Authenticator;
use crate::security::tickets::HandleSigner;
use crate::updates::ingest::ingest;
use crate::updates::{run_update, run_update_now};
use datafusion::logical_expr::LogicalPlan;
use squadron_coordinator::coordinator::is_update;
use squadron_coordinator::coordinator::{Coordinator, PlannedQuery, Reuse, Work};
use squadron_coordinator::output::encode_batches;
use squadron_coordinator::session::{changes_session, Session};
use squadron_net::tls::conn::remote_addr;
use squadron_planner::templates::StatementKey;

pub struct SquadronFlightSql {
    /// The coordinator, with the catalog statements commit to.
    coordinator: Arc<Engine>,
    state: Arc<ClientState>,
    sql_info: SqlInfoData,
    /// Logins and tokens; `None` in insecure mode.
    auth: Option<Arc<Authenticator>>,
}

/// What the server keeps for its clients, by handle.
pub struct ClientState {
    pub statements: StatementStore,
    pub prepared: PreparedStore,
    pub sessions: Sessions,
    pub polls: PollStore,
    /// Queries each user has in flight.
    pub quotas: UserQuotas,
    /// Signs the handles clients hold and binds them to their user.
    pub signer: Arc<HandleSigner>,
}

impl ClientState {
    /// Drops every entry idle for its TTL.
    fn expire(&self) {
        self.statements.expire();
        self.prepared.expire();
        self.sessions.expire();
        self.polls.expire();
    }
}

/// How often idle handles and sessions are looked for: they are dropped
/// even when no new one is made.
const REAP_EVERY: Duration = Duration::from_secs(15);

impl SquadronFlightSql {
    /// Serves `coordinator` to clients checked by `auth`, each user
    /// running at most `max_queries_per_user` queries at once.
    pub fn new(
        coordinator: Arc<Engine>,
        auth: Option<Arc<Authenticator>>,
        max_queries_per_user: usize,
    ) -> Self {
        let shared = Arc::clone(coordinator.shared_session());
        let signer = Arc::new(HandleSigner::random());
        let state = Arc::new(ClientState {
            statements: StatementStore::default(),
            prepared: PreparedStore::default(),
            sessions: Sessions::new(
                shared,
                Arc::clone(&signer),
                DEFAULT_IDLE_TTL,
                DEFAULT_CAPACITY,
            ),
            polls: new_poll_store(),
            quotas: UserQuotas::new(max_queries_per_user),
            signer,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let state = Arc::downgrade(&state);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(REAP_EVERY);
                loop {
                    tick.tick().await;
                    match state.upgrade() {
                        Some(state) => state.expire(),
                        None => return,
                    }
                }
            });
        }
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

    /// Plans `logical` for `caller`. `SET` and `RESET` change the caller's
    /// own session (opened now) and answer no rows.
    pub(super) async fn plan_for(
        &self,
        caller: &Caller,
        logical: LogicalPlan,
    ) -> Result<PlannedQuery, Status> {
        if changes_session(&logical) {
            let (session, _) = self.state.sessions.open(caller)?;
            session.apply_statement(&logical).await?;
            return Ok(PlannedQuery {
                schema: Arc::new(Schema::empty()),
                work: Work::Immediate(vec![]),
                settings: vec![],
            });
        }
        let session = self.state.sessions.current(caller);
        self.coordinator.plan_logical(&session, logical).await
    }

    /// Plans one SQL statement for `caller`; one that differs from an
    /// earlier one only in its constants re-uses its plan (see
    /// `planner::templates`).
    pub async fn plan_sql(&self, caller: &Caller, sql: &str) -> Result<PlannedQuery, Status> {
        let session = self.state.sessions.current(caller);
        let key = self.coordinator.statement_key(&session, sql);
        let keep = match self.planned_from_template(&session, key.as_ref()).await? {
            Ok(planned) => return Ok(planned),
            Err(keep) => keep,
        };
        let logical = self.coordinator.logical_plan(&session, sql).await?;
        if let (true, Some(key)) = (keep, key) {
            self.coordinator
                .keep_template(&session, key, &logical)
                .await;
        }
        self.plan_for(caller, logical).await
    }

    /// The statement of `key` planned from its session's template, or
    /// else whether its planning should leave a template.
    async fn planned_from_template(
        &self,
        session: &Arc<Session>,
        key: Option<&StatementKey>,
    ) -> Result<Result<PlannedQuery, bool>, Status> {
        let Some(key) = key else {
            return Ok(Err(false));
        };
        Ok(
            match self.coordinator.plan_from_template(session, key).await? {
                Reuse::Planned(planned) => Ok(*planned),
                Reuse::Unknown | Reuse::Stale => Err(true),
                Reuse::DoesNotQualify | Reuse::Inexact => Err(false),
            },
        )
    }

    /// Keeps a planned statement for its DoGet (started already when
    /// `start_early` finds room) and describes it: one endpoint without a
    /// location, so clients read through the connection they already have.
    async fn statement_info(
        &self,
        caller: &Caller,
        planned: PlannedQuery,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = planned.schema.clone();
        let user = caller.quota_key();
        // Before starting anything: a query started for a statement the
        // store then refuses would be dispatched only to be stopped.
        self.state.statements.check_room(&user)?;
        let id = uuid::Uuid::new_v4().to_string();
        let pending = self.start_early(caller, &id, planned).await?;
        self.state
            .statements
            .insert_at(id.clone(), pending, &user)?;
        let handle = self.state.signer.sign(caller.user(), &id);
        let ticket = TicketStatementQuery {
            statement_handle: handle.into_bytes().into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema.as_ref())
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor)
            .with_total_records(-1)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    /// Starts a query that reads tables now, before its client's DoGet: that
    /// comes a round trip after the FlightInfo (0.4 ms with raw pyarrow,
    /// more through the drivers), by when the tasks are running. Only
    /// with room to spare (at most half the running slots taken, and a
    /// slot of the caller's quota free): a started statement nobody fetches
    /// holds its slots until it expires, and must not keep fetched ones
    /// waiting. Otherwise the statement waits for its DoGet to start.
    async fn start_early(
        &self,
        caller: &Caller,
        id: &str,
        planned: PlannedQuery,
    ) -> Result<Pending, Status> {
        if !planned.worth_starting_early() || !self.coordinator.has_room_to_start_early() {
            return Ok(Pending::Planned(planned));
        }
        let Ok(slot) = self.state.quotas.admit(caller) else {
            return Ok(Pending::Planned(planned));
        };
        let job_id = self.state.signer.job_id(id);
        let stream = self.run_query(caller, slot, &job_id, planned).await?;
        Ok(Pending::Started(StartedQuery::new(stream)))
    }

    /// Cancels the statements `info`'s tickets name: one not fetched yet
    /// is dropped, a running one stopped on every worker.
    fn cancel(&self, caller: &Caller, info: &FlightInfo) -> CancelStatus {
        let mut status = CancelStatus::NotCancellable;
        for ticket in info.endpoint.iter().filter_map(|e| e.ticket.as_ref()) {
            let handle = Any::decode(ticket.ticket.clone())
                .ok()
                .and_then(|any| any.unpack::<TicketStatementQuery>().ok().flatten())
                .map(|t| self.id_of(caller, &t.statement_handle));
            if let Some(id) = handle {
                // A polled query not read yet stops with its stream.
                let polled = self.state.polls.remove(&id);
                let discarded = self.state.statements.discard(&id);
                let running = self.coordinator.cancel(&self.state.signer.job_id(&id));
                if discarded || running || polled {
                    status = CancelStatus::Cancelled;
                }
            }
        }
        status
    }

    /// The id inside a handle `caller` holds. A handle issued to someone
    /// else, altered or made up gives an id no entry has, so the lookup
    /// answers NOT_FOUND like for an expired handle.
    pub(super) fn id_of(&self, caller: &Caller, handle: &[u8]) -> String {
        std::str::from_utf8(handle)
            .ok()
            .and_then(|handle| self.state.signer.open(caller.user(), handle))
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `planned` as job `job_id` for `caller`; it counts against the
    /// caller's quota (`slot`, taken before anything a retry needs is
    /// consumed) and in `system.queries` until its stream ends or is
    /// dropped. Its log lines carry its query id.
    pub(super) async fn run_query(
        &self,
        caller: &Caller,
        slot: QuotaSlot,
        job_id: &str,
        planned: PlannedQuery,
    ) -> Result<FlightDataStream, Status> {
        let query = self
            .coordinator
            .queries()
            .start(caller.user(), job_id, planned.stage_count());
        let span = tracing::info_span!("query", query_id = query.id());
        let execute = self.coordinator.execute(job_id, planned).instrument(span);
        let started = squadron_coordinator::queries::within(query.id(), execute).await;
        match started {
            Ok(stream) => Ok(Box::pin(query.track(stream).inspect(move |_| {
                let _counted_until_dropped = &slot;
            }))),
            Err(status) => {
                query.finish(&Err::<(), _>(status.clone()));
                Err(status)
            }
        }
    }

    /// The prepared statement a handle `caller` holds names, its tables
    /// bound as they are now (`rebind`).
    pub(super) async fn prepared_of(
        &self,
        caller: &Caller,
        handle: &[u8],
    ) -> Result<Prepared, Status> {
        let prepared = self.state.prepared.get(&self.id_of(caller, handle))?;
        self.with_current_tables(caller, prepared).await
    }

    async fn with_current_tables(
        &self,
        caller: &Caller,
        mut prepared: Prepared,
    ) -> Result<Prepared, Status> {
        let session = self.state.sessions.current(caller);
        prepared.plan = super::rebind::with_current_tables(&session, prepared.plan).await?;
        Ok(prepared)
    }

    /// Runs DDL/DML or SET statements (one per bound parameter row) for
    /// `caller`; returns the rows they wrote.
    async fn run_updates(&self, caller: &Caller, plans: Vec<LogicalPlan>) -> Result<i64, Status> {
        let _slot = self.state.quotas.admit(caller)?;
        self.as_query(caller, self.run_plans(caller, plans)).await
    }

    /// A DDL or DML statement runs when it is described (GetFlightInfo),
    /// as single-node DataFusion runs it when planned: clients that never
    /// fetch its empty or `count` answer (ADBC's `cursor.execute`) still
    /// change the table, and errors come back at once. Its DoGet then
    /// sends the answer.
    async fn updated_now(
        &self,
        caller: &Caller,
        planned: PlannedQuery,
    ) -> Result<PlannedQuery, Status> {
        let Work::Update(plan, session) = planned.work else {
            return Ok(planned);
        };
        let _slot = self.state.quotas.admit(caller)?;
        let schema = planned.schema;
        let answer = self
            .as_query(
                caller,
                run_update_now(&self.coordinator, &schema, plan, &session),
            )
            .await?;
        Ok(PlannedQuery {
            schema,
            work: Work::Immediate(answer),
            settings: planned.settings,
        })
    }

    /// Runs `work` (DDL, DML, an ingest) as a query of `caller`: listed in
    /// `system.queries`, its log lines carrying the query id.
    async fn as_query<T>(
        &self,
        caller: &Caller,
        work: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let query = self.coordinator.queries().start(caller.user(), "-", 0);
        let span = tracing::info_span!("query", query_id = query.id());
        let result = squadron_coordinator::queries::within(query.id(), work.instrument(span)).await;
        query.finish(&result);
        result
    }

    async fn run_plans(&self, caller: &Caller, plans: Vec<LogicalPlan>) -> Result<i64, Status> {
        let mut total = 0;
        for plan in plans {
            if changes_session(&plan) {
                let (session, _) = self.state.sessions.open(caller)?;
                session.apply_statement(&plan).await?;
                continue;
            }
            if !is_update(&plan) {
                return Err(Status::invalid_argument(
                    "not a DDL or DML statement: run queries with GetFlightInfo and DoGet",
                ));
            }
            let session = self.state.sessions.current(caller);
            total += run_update(&self.coordinator, &session, plan).await?;
        }
        Ok(total as i64)
    }

    /// Describes a metadata answer computed on the coordinator: its ticket
    /// is the command itself, answered again by DoGet.
    fn command_info(
        &self,
        command: impl ProstMessageExt,
        schema: &Schema,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(command.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor)
            .with_total_records(-1);
        Ok(Response::new(info))
    }
}

/// The Flight RPC action that cancels a FlightInfo's query.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The parameter batches of a DoPut.
async fn read_batches(stream: PeekableFlightDataStream) -> Result<Vec<RecordBatch>, Status> {
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(|e| Status::invalid_argument(format!("reading the parameter batches: {e}")))
}

/// A metadata answer as a DoGet stream.
fn batch_stream(batch: RecordBatch) -> Response<FlightDataStream> {
    let schema = batch.schema();
    Response::new(encode_batches(
        schema,
        futures::stream::once(async { Ok(batch) }),
    ))
}

/// A schema as the IPC bytes Flight SQL carries in prepared statement
/// results; none at all for an empty schema (a statement without rows or
/// without parameters), which every client reads as "no columns".
fn schema_bytes(schema: &SchemaRef) -> Result<prost::bytes::Bytes, Status> {
    if schema.fields().is_empty() {
        return Ok(Default::default());
    }
    let message: IpcMessage = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(message.0)
}

type FlightDataStream = <SquadronFlightSql as FlightService>::DoGetStream;

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
        let plan = self
            .coordinator
            .logical_plan(&session, &query.query)
            .await?;
        let key = self.coordinator.statement_key(&session, &query.query);
        let prepared = Prepared::new(plan)?.with_key(key);
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
        let session = self.state.sessions.current(&caller);
        let key = prepared.key.clone().filter(|_| prepared.bound.is_none());
        let planned = match self.planned_from_template(&session, key.as_ref()).await? {
            Ok(planned) => planned,
            Err(keep) => {
                let prepared = self.with_current_tables(&caller, prepared).await?;
                if let (true, Some(key)) = (keep, key) {
                    self.coordinator
                        .keep_template(&session, key, &prepared.plan)
                        .await;
                }
                self.plan_for(&caller, prepared.bound_plan()?).await?
            }
        };
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
            .await?;
        self.run_updates(&caller, vec![plan]).await
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
        self.run_updates(&caller, prepared.bound_plans()?).await
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
            stream.map_err(|e| Status::invalid_argument(format!("reading the ingested rows: {e}"))),
        );
        let work = ingest(&self.coordinator, &session, &command, schema, rows);
        let written = self.as_query(&caller, work).await?;
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
        self.command_info(query, &schema, request.into_inner())
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
        self.command_info(query, &schema, request.into_inner())
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
        self.command_info(query, &schema, request.into_inner())
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
        self.command_info(query, &schema, request.into_inner())
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
        self.command_info(
            query,
            &metadata::primary_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::primary_keys_schema(),
        )))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.command_info(
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
        self.command_info(
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
        self.command_info(
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
        self.command_info(query, &schema, request.into_inner())
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
                self.run_query(&caller, slot, &job_id, planned).await?
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
        let stream =
            flight_data(schema, futures::stream::once(async { batch })).map_err(Status::from);
        Ok(Response::new(stream.boxed()))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(extra_action_types().into_iter().map(Ok).collect())
    }
}
