//! Planning a client's statement in its session, re-using the plan of an
//! earlier one of the same shape where it can.

use squadron_planner::current_user::mentions_current_user;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use tonic::Status;

use super::prepared::Prepared;
use super::sessions::Caller;
use datafusion::logical_expr::LogicalPlan;
use squadron_coordinator::session::{changes_session, Session};
use squadron_coordinator::statements::{PlannedQuery, Reuse, Work};
use squadron_planner::templates::StatementKey;

use super::service::SquadronFlightSql;

impl SquadronFlightSql {
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
                statement: None,
                origins: vec![],
            });
        }
        let session = self.state.sessions.current(caller);
        Ok(self.coordinator.plan_logical(&session, logical).await?)
    }

    /// Plans one SQL statement for `caller`; one that differs from an
    /// earlier one only in its constants re-uses its plan (see
    /// `planner::templates`).
    pub async fn plan_sql(&self, caller: &Caller, sql: &str) -> Result<PlannedQuery, Status> {
        let planned = self.plan_sql_uncounted(caller, sql).await;
        let mut planned = self.counted(caller, Some(sql), planned)?;
        planned.statement = Some(sql.into());
        Ok(planned)
    }

    /// `result`, a statement's planning; a failure counts as a failed
    /// query (`system.queries`, `squadron_queries_total`), as every
    /// statement that never ran would otherwise go unseen.
    pub(super) fn counted<T>(
        &self,
        caller: &Caller,
        sql: Option<&str>,
        result: Result<T, Status>,
    ) -> Result<T, Status> {
        if let Err(status) = &result {
            self.coordinator
                .queries()
                .failed_to_start(caller.user(), sql, status);
        }
        result
    }

    async fn plan_sql_uncounted(&self, caller: &Caller, sql: &str) -> Result<PlannedQuery, Status> {
        let session = self.state.sessions.current(caller);
        let key = self.coordinator.statement_key(&session, sql);
        let keep = match self.planned_from_template(&session, key.as_ref()).await? {
            Ok(planned) => return Ok(planned),
            Err(keep) => keep,
        };
        let logical = self.coordinator.logical_plan(&session, sql).await?;
        // A plan that answers its user's name is not kept for other users.
        let keep = keep && !mentions_current_user(&logical);
        let logical = caller.bound(logical)?;
        if let (true, Some(key)) = (keep, key) {
            self.coordinator
                .keep_template(&session, key, &logical)
                .await;
        }
        self.plan_for(caller, logical).await
    }

    /// The statement of `key` planned from its session's template, or
    /// else whether its planning should leave a template.
    pub(super) async fn planned_from_template(
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

    /// Plans a prepared statement as its tables are now, re-using the plan
    /// of an earlier run where its session kept one.
    pub(super) async fn plan_prepared(
        &self,
        caller: &Caller,
        prepared: Prepared,
    ) -> Result<PlannedQuery, Status> {
        let session = self.state.sessions.current(caller);
        let key = prepared.key.clone().filter(|_| prepared.bound.is_none());
        Ok(
            match self.planned_from_template(&session, key.as_ref()).await? {
                Ok(planned) => planned,
                Err(keep) => {
                    let prepared = self.with_current_tables(caller, prepared).await?;
                    if let (true, Some(key)) = (keep, key) {
                        self.coordinator
                            .keep_template(&session, key, &prepared.plan)
                            .await;
                    }
                    self.plan_for(caller, prepared.bound_plan()?).await?
                }
            },
        )
    }
}
