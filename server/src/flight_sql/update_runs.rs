//! DDL, DML and SET statements: run when described or put, listed as
//! queries while they run.

use tonic::Status;
use tracing::Instrument;

use super::sessions::Caller;
use crate::updates::{run_update, run_update_now};
use datafusion::logical_expr::LogicalPlan;
use squadron_coordinator::session::changes_session;
use squadron_coordinator::statements::is_update;
use squadron_coordinator::statements::{PlannedQuery, Work};

use super::service::SquadronFlightSql;

impl SquadronFlightSql {
    /// Runs DDL/DML or SET statements (one per bound parameter row) for
    /// `caller`; returns the rows they wrote.
    pub(super) async fn run_updates(
        &self,
        caller: &Caller,
        plans: Vec<LogicalPlan>,
        sql: Option<&str>,
    ) -> Result<i64, Status> {
        let _slot = self.state.quotas.admit(caller)?;
        self.as_query(caller, sql, self.run_plans(caller, plans))
            .await
    }

    /// A DDL or DML statement runs when it is described (GetFlightInfo),
    /// as single-node DataFusion runs it when planned: clients that never
    /// fetch its empty or `count` answer (ADBC's `cursor.execute`) still
    /// change the table, and errors come back at once. Its DoGet then
    /// sends the answer.
    pub(super) async fn updated_now(
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
                planned.statement.as_deref(),
                run_update_now(&self.coordinator, &schema, plan, &session),
            )
            .await?;
        Ok(PlannedQuery {
            schema,
            work: Work::Immediate(answer),
            settings: planned.settings,
            statement: planned.statement,
            origins: vec![],
        })
    }

    /// Runs `work` (DDL, DML, an ingest) as a query of `caller`: listed in
    /// `system.queries`, its log lines carrying the query id.
    pub(super) async fn as_query<T, E: Into<Status>>(
        &self,
        caller: &Caller,
        sql: Option<&str>,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, Status> {
        let query = self.coordinator.queries().start(caller.user(), "-", 0, sql);
        let span = tracing::info_span!(parent: None, "query", query_id = query.id());
        let result = squadron_coordinator::queries::within(query.id(), work.instrument(span))
            .await
            .map_err(Into::into);
        query.finish(&result);
        result
    }

    pub(super) async fn run_plans(
        &self,
        caller: &Caller,
        plans: Vec<LogicalPlan>,
    ) -> Result<i64, Status> {
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
}
