//! A client's statements from description to stream: kept for their DoGet
//! (started early when there is room), run against the caller's quota,
//! cancelled, and prepared ones bound to the tables as they are now.

use super::column_metadata::described;
use arrow_flight::sql::{Any, ProstMessageExt, TicketStatementQuery};
use arrow_flight::CancelStatus;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use futures::StreamExt;
use prost::Message;
use tonic::{Response, Status};
use tracing::Instrument;

use super::prepared::Prepared;
use super::quotas::QuotaSlot;
use super::sessions::Caller;
use super::statements::{Pending, StartedQuery};
use squadron_coordinator::statements::PlannedQuery;

use super::service::SquadronFlightSql;
use super::wire::FlightDataStream;

impl SquadronFlightSql {
    /// Keeps a planned statement for its DoGet (started already when
    /// `start_early` finds room) and describes it: one endpoint without a
    /// location, so clients read through the connection they already have.
    pub(super) async fn statement_info(
        &self,
        caller: &Caller,
        planned: PlannedQuery,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = described(&planned.schema, &planned.origins);
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
            .try_with_schema(&schema)
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
    pub(super) async fn start_early(
        &self,
        caller: &Caller,
        id: &str,
        planned: PlannedQuery,
    ) -> Result<Pending, Status> {
        if !planned.worth_starting_early() || !self.coordinator.has_room_to_start_early() {
            return Ok(Pending::Planned(Box::new(planned)));
        }
        let Ok(slot) = self.state.quotas.admit(caller) else {
            return Ok(Pending::Planned(Box::new(planned)));
        };
        let job_id = self.state.signer.job_id(id);
        let stream = self.run_query(caller, slot, &job_id, planned).await?;
        Ok(Pending::Started(StartedQuery::new(stream)))
    }

    /// Cancels the statements `info`'s tickets name: one not fetched yet
    /// is dropped, a running one stopped on every worker.
    pub(super) fn cancel(&self, caller: &Caller, info: &FlightInfo) -> CancelStatus {
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
        let query = self.coordinator.queries().start(
            caller.user(),
            job_id,
            planned.stage_count(),
            planned.statement.as_deref(),
        );
        let span = tracing::info_span!(parent: None, "query", query_id = query.id());
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

    pub(super) async fn with_current_tables(
        &self,
        caller: &Caller,
        mut prepared: Prepared,
    ) -> Result<Prepared, Status> {
        let session = self.state.sessions.current(caller);
        prepared.plan = super::rebind::with_current_tables(&session, prepared.plan).await?;
        Ok(prepared)
    }
}
