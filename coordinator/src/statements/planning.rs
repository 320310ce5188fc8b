//! From SQL (or a bound prepared statement, or a template) to a planned
//! statement: the steps of `squadron_planner::pipeline` the coordinator
//! drives, and where a plan runs.

use crate::scheduler::policy::RETRY_POLICY;
use squadron_exec::squadron_options::RetryPolicy;
use squadron_planner::column_origins::{column_origins, ColumnOrigin};
use std::sync::Arc;
use std::time::Instant;

use datafusion::common::Result as DataFusionResult;
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::Statement;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;
use squadron_common::error::Error;
use squadron_exec::plan::ready_to_execute;
use squadron_exec::squadron_options::SquadronOptions;
use squadron_exec::write::{TableWriteExec, WriteTarget};

use crate::session::Session;
use squadron_planner::cached_footers::CachedFooters;
use squadron_planner::local::{computes_in_proportion, reads_little, reads_no_table};
use squadron_planner::placeholders::number_placeholders;
use squadron_planner::templates::{Instance, StatementKey, Template};
use squadron_planner::volatile::VolatileRefusal;
use squadron_planner::{
    build_job_graph, encode_stages, for_clients, prune_scan_ranges, without_scan_range_pruning,
    JobGraph,
};

use super::missing_tables::or_not_found;
use super::{
    is_update, parameter_names, update_schema, Coordinator, LocalRun, PlannedQuery, Reuse, Work,
};

impl Coordinator {
    /// How `plan` runs on the coordinator, if it does (see
    /// `planner::local`).
    pub(super) fn runs_here(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        session: &Session,
    ) -> Option<LocalRun> {
        if reads_no_table(plan) {
            return Some(match computes_in_proportion(plan) {
                true => LocalRun::AsRead,
                false => LocalRun::Supervised,
            });
        }
        let footers = session
            .ctx()
            .runtime_env()
            .cache_manager
            .get_file_metadata_cache();
        // Reading little implies computing in proportion.
        // The session's `squadron.coordinator_scan_limit`.
        let limit = session.squadron_options().coordinator_scan_limit;
        reads_little(plan, &CachedFooters::new(footers), limit).then_some(LocalRun::AtOnce)
    }

    /// Plans one SQL statement in `session`.
    pub async fn plan(&self, session: &Arc<Session>, sql: &str) -> Result<PlannedQuery, Error> {
        let started = Instant::now();
        let planned = self.plan_statement(session, sql).await;
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            "planned a statement"
        );
        planned
    }

    async fn plan_statement(
        &self,
        session: &Arc<Session>,
        sql: &str,
    ) -> Result<PlannedQuery, Error> {
        let logical = self.logical_plan(session, sql).await?;
        tracing::trace!("logical plan ready");
        self.plan_logical(session, logical).await
    }

    /// The key under which a client's statement `sql` may re-use a plan
    /// (see `planner::templates`); `None` when plans are not re-used or
    /// it has no constant to swap.
    pub fn statement_key(&self, session: &Session, sql: &str) -> Option<StatementKey> {
        // Read in place: a clone of the state costs more than the parse.
        let state = session.ctx().state_ref();
        let state = state.read();
        if !SquadronOptions::of(state.config_options()).reuse_plans {
            return None;
        }
        StatementKey::of(&state, sql)
    }

    /// The statement of `key` planned from the session's template of its
    /// shape, if it has one that fits; `Err` only for a failure after the
    /// template was taken.
    pub async fn plan_from_template(
        &self,
        session: &Arc<Session>,
        key: &StatementKey,
    ) -> Result<Reuse, Error> {
        let template = match session.templates().get(&key.shape) {
            None => return Ok(Reuse::Unknown),
            Some(None) => return Ok(Reuse::DoesNotQualify),
            Some(Some(template)) => template,
        };
        let started = Instant::now();
        let state = session.ctx().state();
        let plan = match template
            .instantiate(session.ctx(), &state, &key.values)
            .await
        {
            Ok(Instance::Plan(plan)) => plan,
            Ok(Instance::Inexact) => return Ok(Reuse::Inexact),
            Ok(Instance::Stale) | Err(_) => return Ok(Reuse::Stale),
        };
        let plan = prune_scan_ranges(&state, plan).map_err(Error::from)?;
        let mut planned = self.planned(session, plan, session.changed_settings())?;
        planned.origins = template.origins().to_vec();
        metrics::histogram!(crate::metrics::PLANNING_SECONDS)
            .record(started.elapsed().as_secs_f64());
        metrics::counter!(crate::metrics::PLANS_REUSED).increment(1);
        session.templates().note_reuse();
        Ok(Reuse::Planned(Box::new(planned)))
    }

    /// Keeps the template of the statement of `key`, planned as `logical`
    /// (from SQL, not optimized), or remembers that its shape does not
    /// qualify. Planned once more, without the pruning that depends on
    /// the values; only the first statement of a shape pays for it.
    pub async fn keep_template(
        &self,
        session: &Arc<Session>,
        key: StatementKey,
        logical: &LogicalPlan,
    ) {
        let generation = session.templates().generation();
        let template = match Template::table_of(logical, &key.values) {
            None => None,
            Some(table) => {
                let state = session.ctx().state();
                let unpruned = without_scan_range_pruning(&state);
                let captured = match unpruned
                    .create_physical_plan(logical)
                    .await
                    .and_then(for_clients)
                {
                    Ok(plan) => Template::capture(&state, plan, table, key.values)
                        .await
                        .map(|t| t.map(|t| t.with_origins(origins_in(session, logical)))),
                    Err(e) => Err(e),
                };
                match captured {
                    Ok(template) => template.map(Arc::new),
                    Err(e) => {
                        tracing::debug!(error = %e, "no plan template");
                        None
                    }
                }
            }
        };
        session.templates().insert(key.shape, template, generation);
    }

    /// The logical plan of one SQL statement, its names resolved in
    /// `session`.
    /// NOT_FOUND when it reads a table that does not exist.
    pub async fn logical_plan(&self, session: &Session, sql: &str) -> Result<LogicalPlan, Error> {
        let state = session.ctx().state();
        let sql = number_placeholders(sql);
        match state.create_logical_plan(&sql).await {
            Ok(plan) => Ok(plan),
            Err(e) => Err(or_not_found(&state, &sql, Error::from(e)).await),
        }
    }

    /// Plans a statement already turned into a logical plan (a prepared
    /// statement with its parameters bound).
    pub async fn plan_logical(
        &self,
        session: &Arc<Session>,
        logical: LogicalPlan,
    ) -> Result<PlannedQuery, Error> {
        self.plan_logical_for(session, logical, Reader::Client)
            .await
    }

    /// Plans the input of a statement that writes rows (CREATE TABLE AS,
    /// INSERT, COPY, UPDATE's rewrite): its rows keep DataFusion's types
    /// (string views, dictionaries), which the written files record.
    pub async fn plan_for_writing(
        &self,
        session: &Arc<Session>,
        logical: LogicalPlan,
    ) -> Result<PlannedQuery, Error> {
        self.plan_logical_for(session, logical, Reader::Writer)
            .await
    }

    /// The physical plan of the rows a statement writes into a created
    /// table (CREATE TABLE AS, INSERT, UPDATE's rewrite); `plan_write`
    /// runs it.
    pub async fn plan_rows_to_write(
        &self,
        session: &Arc<Session>,
        logical: &LogicalPlan,
    ) -> Result<Arc<dyn ExecutionPlan>, Error> {
        let parameters = parameter_names(logical)?;
        if !parameters.is_empty() {
            return Err(Error::invalid_argument(format!(
                "the statement has parameters ({}): prepare it and bind values",
                parameters.join(", ")
            )));
        }
        session
            .ctx()
            .state()
            .create_physical_plan(logical)
            .await
            .map_err(Error::from)
    }

    /// A physical plan made ready to run as a job (here or on the
    /// workers), as a query's would be.
    pub fn plan_job(
        &self,
        session: &Arc<Session>,
        plan: Arc<dyn ExecutionPlan>,
    ) -> Result<PlannedQuery, Error> {
        self.planned(session, plan, session.changed_settings())
    }

    /// Plans writing `rows` into a created table: the tasks that compute
    /// them write part files (`TableWriteExec`) and answer only what they
    /// wrote. Those answers are gathered and sorted before any leaves the
    /// job, so none reaches the coordinator until every write finished: a
    /// worker lost half-way lets the job run again whole (new attempt, new
    /// files) rather than fail for answers already sent.
    pub fn plan_write(
        &self,
        session: &Arc<Session>,
        rows: Arc<dyn ExecutionPlan>,
        target: WriteTarget,
    ) -> Result<PlannedQuery, Error> {
        let write: Arc<dyn ExecutionPlan> = Arc::new(TableWriteExec::new(rows, target));
        let path = col("path", &write.schema()).map_err(Error::from)?;
        let ordering = LexOrdering::new([PhysicalSortExpr::new_default(path)])
            .ok_or_else(|| Error::internal("an empty ordering of a write's answers"))?;
        let gathered = Arc::new(CoalescePartitionsExec::new(write));
        let plan = Arc::new(SortExec::new(ordering, gathered));
        self.planned(session, plan, session.changed_settings())
    }

    async fn plan_logical_for(
        &self,
        session: &Arc<Session>,
        logical: LogicalPlan,
        reader: Reader,
    ) -> Result<PlannedQuery, Error> {
        let parameters = parameter_names(&logical)?;
        if !parameters.is_empty() {
            return Err(Error::invalid_argument(format!(
                "the statement has parameters ({}): prepare it and bind values",
                parameters.join(", ")
            )));
        }
        let started = Instant::now();
        let planned = self.plan_physical(session, logical, reader).await;
        metrics::histogram!(crate::metrics::PLANNING_SECONDS)
            .record(started.elapsed().as_secs_f64());
        planned
    }

    async fn plan_physical(
        &self,
        session: &Arc<Session>,
        logical: LogicalPlan,
        reader: Reader,
    ) -> Result<PlannedQuery, Error> {
        let state = session.ctx().state();
        let mut settings = session.changed_settings();
        // The server's default policy travels with the tasks too: a worker
        // retains outputs only when told.
        let policy = session.squadron_options().retry_policy;
        if policy != RetryPolicy::default() && !settings.iter().any(|(k, _)| k == RETRY_POLICY) {
            settings.push((RETRY_POLICY.to_string(), policy.name().to_string()));
        }
        match &logical {
            LogicalPlan::Explain(explain) => {
                self.explain(session, &logical, explain, settings).await
            }
            LogicalPlan::Analyze(analyze) if is_update(&analyze.input) => Err(
                Error::unimplemented("EXPLAIN ANALYZE of a DDL or DML statement is not supported"),
            ),
            LogicalPlan::Analyze(analyze) => {
                let inner = state
                    .create_physical_plan(&analyze.input)
                    .await
                    .map_err(Error::from)?;
                if self.runs_here(&inner, session).is_some() {
                    // DataFusion's own EXPLAIN ANALYZE, run here.
                    let plan = state
                        .create_physical_plan(&logical)
                        .await
                        .map_err(Error::from)?;
                    return local(session, plan, LocalRun::Supervised, settings);
                }
                Ok(PlannedQuery {
                    schema: analyze.schema.inner().clone(),
                    work: Work::Analyze {
                        graph: Arc::new(stages(session, inner).map_err(Error::from)?),
                        verbose: analyze.verbose,
                    },
                    settings,
                    statement: None,
                    origins: vec![],
                })
            }
            plan if is_update(plan) => Ok(PlannedQuery {
                schema: update_schema(plan),
                work: Work::Update(logical, Arc::clone(session)),
                settings,
                statement: None,
                origins: vec![],
            }),
            LogicalPlan::Statement(Statement::SetVariable(_) | Statement::ResetVariable(_)) => {
                Err(Error::internal(
                    "SET changes a client session and is applied by the Flight SQL service",
                ))
            }
            LogicalPlan::Copy(_) | LogicalPlan::Statement(_) => Err(Error::unimplemented(format!(
                "not supported yet: {}",
                logical.display()
            ))),
            _ => {
                let plan = state
                    .create_physical_plan(&logical)
                    .await
                    .and_then(|plan| match reader {
                        Reader::Client => for_clients(plan),
                        Reader::Writer => Ok(plan),
                    })
                    .map_err(Error::from)?;
                tracing::trace!("physical plan ready");
                let mut planned = self.planned(session, plan, settings)?;
                planned.origins = origins_in(session, &logical);
                Ok(planned)
            }
        }
    }

    /// A physical plan made ready to run: here, or cut into stages.
    pub(super) fn planned(
        &self,
        session: &Arc<Session>,
        plan: Arc<dyn ExecutionPlan>,
        settings: Vec<(String, String)>,
    ) -> Result<PlannedQuery, Error> {
        if let Some(run) = self.runs_here(&plan, session) {
            return local(session, plan, run, settings);
        }
        let schema = plan.schema();
        let graph = match stages(session, Arc::clone(&plan)) {
            // Rare (a volatile expression no cut evaluates as often as the
            // plan does): one process answers as DataFusion does.
            Err(refused) if VolatileRefusal::is(&refused) => {
                tracing::debug!("{refused}; running on the coordinator");
                return local(session, plan, LocalRun::Supervised, settings);
            }
            graph => graph.map_err(Error::from)?,
        };
        Ok(PlannedQuery {
            schema,
            work: Work::Distributed(Arc::new(graph)),
            settings,
            statement: None,
            origins: vec![],
        })
    }
}

/// The table each output column of `logical` is read from, names
/// completed with `session`'s defaults.
pub fn origins_in(session: &Session, logical: &LogicalPlan) -> Vec<Option<ColumnOrigin>> {
    column_origins(logical, session.ctx().state().config_options())
}

/// `plan` to run here as `run`, as a worker would run it (see
/// `ready_to_execute`).
fn local(
    session: &Arc<Session>,
    plan: Arc<dyn ExecutionPlan>,
    run: LocalRun,
    settings: Vec<(String, String)>,
) -> Result<PlannedQuery, Error> {
    let schema = plan.schema();
    let task_ctx = session.task_ctx();
    let plan = ready_to_execute(plan, &task_ctx).map_err(Error::from)?;
    Ok(PlannedQuery {
        schema,
        work: Work::Local {
            plan,
            task_ctx,
            run,
        },
        settings,
        statement: None,
        origins: vec![],
    })
}

/// `plan` cut into stages, encoded for the workers.
fn stages(session: &Arc<Session>, plan: Arc<dyn ExecutionPlan>) -> DataFusionResult<JobGraph> {
    let mut graph = build_job_graph(plan, &session.squadron_options())?;
    tracing::trace!("stages cut");
    encode_stages(&mut graph)?;
    Ok(graph)
}

/// Who reads a planned query's rows.
#[derive(Debug, Clone, Copy)]
enum Reader {
    /// A client: columns arrive in the types clients read
    /// (`planner::client_types`).
    Client,
    /// Squadron itself, writing them into a table's files.
    Writer,
}
