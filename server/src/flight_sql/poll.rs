//! `PollFlightInfo` and `GetSchema`.
//!
//! PollFlightInfo starts the query at once and answers with its
//! FlightInfo (one endpoint, readable right away), the share of its tasks
//! finished, and a descriptor to poll again with. The query is complete
//! for polling when every task has finished, or when its output waits for
//! the reader (the rest of the rows come as the client reads them: a
//! client polling until completion before reading must not wait for a
//! query that waits for it). A started query nobody reads is stopped when
//! its poll entry expires.
//!
//! GetSchema answers the result schema of a command without running it.

use super::column_metadata::described;
use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::sql::{Any, Command, ProstMessageExt, TicketStatementQuery};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, PollInfo, SchemaAsIpc, SchemaResult,
    Ticket,
};
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use prost::Message;
use squadron_coordinator::statements::origins_in;
use tonic::{Request, Status};

use super::poll_store::Polled;
use super::service::SquadronFlightSql;
use super::sessions::Caller;
use squadron_coordinator::session::changes_session;
use squadron_coordinator::statements::is_update;
use squadron_coordinator::statements::{update_schema, PlannedQuery};
use squadron_planner::client_types::client_schema;

/// The descriptor command that names a polled query.
const POLL_TYPE_URL: &str = "type.googleapis.com/squadron.PolledQuery";

impl SquadronFlightSql {
    pub async fn poll(&self, request: Request<FlightDescriptor>) -> Result<PollInfo, Status> {
        let command = command_of(request.get_ref())?;
        let caller = Caller::of(&request);
        if command.type_url == POLL_TYPE_URL {
            let id = self.id_of(&caller, &command.value);
            return self.poll_again(&caller, &id);
        }
        let planned = match Command::try_from(command).map_err(|e| bad_command(&e))? {
            Command::CommandStatementQuery(query) => self.plan_sql(&caller, &query.query).await?,
            Command::CommandPreparedStatementQuery(query) => {
                let prepared = self
                    .prepared_of(&caller, &query.prepared_statement_handle)
                    .await?;
                self.plan_for(&caller, prepared.bound_plan()?).await?
            }
            // Metadata answers are ready at once.
            _ => {
                let info = arrow_flight::flight_service_server::FlightService::get_flight_info(
                    self, request,
                )
                .await?
                .into_inner();
                return with_progress(PollInfo::new().with_info(info), 1.0);
            }
        };
        self.start(&caller, planned, request.into_inner()).await
    }

    /// Runs `planned` now and keeps its rows for the ticket's DoGet.
    async fn start(
        &self,
        caller: &Caller,
        planned: PlannedQuery,
        descriptor: FlightDescriptor,
    ) -> Result<PollInfo, Status> {
        let id = uuid::Uuid::new_v4().to_string();
        let handle = self.state().signer.sign(caller.user(), &id);
        let ticket = TicketStatementQuery {
            statement_handle: handle.into_bytes().into(),
        };
        let info = FlightInfo::new()
            .try_with_schema(&described(&planned.schema, &planned.origins))
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(
                FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
            )
            .with_descriptor(descriptor)
            .with_total_records(-1)
            .with_ordered(true);
        let job_id = self.state().signer.job_id(&id);
        let slot = self.state().quotas.admit(caller)?;
        let stream = self.run_query(caller, slot, &job_id, planned).await?;
        let polled = Polled::new(info, stream);
        // Refused at capacity: the stream is dropped and the query stops.
        self.state()
            .polls
            .insert_at(id.clone(), polled, &caller.quota_key())?;
        self.poll_again(caller, &id)
    }

    /// `id` is the polled query's id (its handle opened for `caller`).
    fn poll_again(&self, caller: &Caller, id: &str) -> Result<PollInfo, Status> {
        let info = self
            .state()
            .polls
            .with(id, |polled| polled.info().clone())
            .ok_or_else(|| {
                Status::not_found("unknown polled query (expired, cancelled, or never started)")
            })?;
        let done = PollInfo::new().with_info(info.clone());
        let Some(progress) = self.coordinator().progress(&self.state().signer.job_id(id)) else {
            return with_progress(done, 1.0);
        };
        if progress.waiting_for_client {
            return with_progress(done, progress.fraction);
        }
        let again = Any {
            type_url: POLL_TYPE_URL.into(),
            value: self
                .state()
                .signer
                .sign(caller.user(), id)
                .into_bytes()
                .into(),
        };
        let pending = PollInfo::new()
            .with_info(info)
            .with_descriptor(FlightDescriptor::new_cmd(again.encode_to_vec()));
        with_progress(pending, progress.fraction)
    }

    /// The schema a command's results will have, without running it.
    pub async fn schema_of(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<SchemaResult, Status> {
        let caller = Caller::of(&request);
        let command = command_of(request.get_ref())?;
        let schema = match Command::try_from(command).map_err(|e| bad_command(&e))? {
            Command::CommandStatementQuery(query) => {
                let session = self.state().sessions.current(&caller);
                let plan = self
                    .coordinator()
                    .logical_plan(&session, &query.query)
                    .await?;
                if changes_session(&plan) {
                    Schema::empty()
                } else if is_update(&plan) {
                    update_schema(&plan).as_ref().clone()
                } else {
                    let origins = origins_in(&session, &plan);
                    described(&client_schema(plan.schema().as_arrow()), &origins)
                }
            }
            Command::CommandPreparedStatementQuery(query) => {
                let id = self.id_of(&caller, &query.prepared_statement_handle);
                self.state().prepared.get(&id)?.dataset.as_ref().clone()
            }
            _ => {
                let info = arrow_flight::flight_service_server::FlightService::get_flight_info(
                    self, request,
                )
                .await?
                .into_inner();
                return Ok(SchemaResult {
                    schema: info.schema,
                });
            }
        };
        let message: IpcMessage = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
        Ok(SchemaResult { schema: message.0 })
    }
}

fn command_of(descriptor: &FlightDescriptor) -> Result<Any, Status> {
    if descriptor.r#type() != DescriptorType::Cmd {
        return Err(Status::invalid_argument(
            "the descriptor must be a command (Flight SQL serves no paths)",
        ));
    }
    Any::decode(descriptor.cmd.clone())
        .map_err(|e| Status::invalid_argument(format!("a malformed command: {e}")))
}

fn bad_command(e: &impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("a malformed Flight SQL command: {e}"))
}

/// `poll` with `progress` (0.0 to 1.0).
fn with_progress(poll: PollInfo, progress: f64) -> Result<PollInfo, Status> {
    poll.try_with_progress(progress.clamp(0.0, 1.0))
        .map_err(|e| Status::internal(format!("progress {progress}: {e}")))
}
