//! The coordinator: plans statements, runs them as distributed jobs and
//! keeps a short record of recent jobs.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::FlightData;
use dashmap::DashMap;
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::Statement;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};
use squadron_common::error::to_status;
use squadron_exec::plan::guard::DataRoots;
use squadron_exec::plan::ready_to_execute;
use squadron_exec::squadron_options::SquadronOptions;
use squadron_exec::write::{TableWriteExec, WriteTarget};
use tokio::sync::mpsc::{Sender, WeakSender};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::output::{encode_batches, schema_message, JobStream, OUTPUT_BUFFER};
use crate::queries::{LiveQueries, QueryLog, QueryRow};
use crate::scheduler::admission::Slot;
use crate::scheduler::stoppable::{until_stopped, Deadline};
use crate::scheduler::{
    run_locally, started_at_once, Admission, JobIds, JobProgress, JobReport, JobRunner, Placement,
};
use crate::session::Session;
use squadron_planner::cached_footers::CachedFooters;
use squadron_planner::local::{computes_in_proportion, reads_little, reads_no_table};
use squadron_planner::placeholders::number_placeholders;
use squadron_planner::templates::{Instance, StatementKey, Template};
use squadron_planner::{
    build_job_graph, build_job_graph_verbose, encode_stages, for_clients, prune_scan_ranges,
    without_scan_range_pruning, JobGraph,
};

/// The placeholders of a statement (`$1`, `$2`, … or `$name`), in order.
pub fn parameter_names(plan: &LogicalPlan) -> Result<Vec<String>, Status> {
    let mut names: Vec<String> = plan
        .get_parameter_types()
        .map_err(|e| to_status(&e))?
        .into_keys()
        .collect();
    // `$10` after `$9`: by number where there is one.
    names.sort_by_key(|n| (n[1..].parse::<u64>().unwrap_or(u64::MAX), n.clone()));
    Ok(names)
}

/// How many finished jobs `recent_jobs` remembers.
const JOB_HISTORY: usize = 256;

/// A planned statement, ready to run.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    pub schema: SchemaRef,
    pub work: Work,
    /// The settings the planning session changed; its tasks carry them.
    pub settings: Vec<(String, String)>,
}

impl PlannedQuery {
    /// Stages the query runs as on the workers (0 when it runs here).
    pub fn stage_count(&self) -> usize {
        match &self.work {
            Work::Distributed(graph) => graph.stages.len(),
            _ => 0,
        }
    }

    /// Whether starting it before its client's DoGet saves time: it reads
    /// tables (on the workers, or a few row groups here).
    pub fn worth_starting_early(&self) -> bool {
        matches!(
            self.work,
            Work::Distributed(_)
                | Work::Local {
                    run: LocalRun::AtOnce,
                    ..
                }
        )
    }
}

/// What a session's templates did for a statement (`plan_from_template`).
pub enum Reuse {
    /// Planned from a template.
    Planned(Box<PlannedQuery>),
    /// No template of its shape yet: plan it and keep one.
    Unknown,
    /// Its shape was checked and does not qualify.
    DoesNotQualify,
    /// The template was made from a table or files since changed: plan
    /// it and keep a new one.
    Stale,
    /// A constant does not convert exactly to the type the template has
    /// for it: plan it, and keep the template for the next one.
    Inexact,
}

/// How the coordinator runs a plan it answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalRun {
    /// Bounded, over constants only (`SELECT 1`): computed in the request
    /// as the client reads it.
    AsRead,
    /// Bounded, reading a few row groups (a lookup): started at once on
    /// the serving threads, so that when it is started early (see
    /// `worth_starting_early`) the read overlaps the client's round trip
    /// from the FlightInfo to its DoGet.
    AtOnce,
    /// Not bounded by its inputs (a join, a recursive query over
    /// constants): on the execution threads, supervised (timeout, cancel).
    /// The hop there and back costs more than a bounded plan does.
    Supervised,
}

#[derive(Debug, Clone)]
pub enum Work {
    /// A query to run on the workers, its stage plans encoded.
    Distributed(Arc<JobGraph>),
    /// A query that reads no table (`SELECT 1`, `information_schema`) or
    /// little (see `planner::local`), run on the coordinator in its session.
    Local {
        plan: Arc<dyn ExecutionPlan>,
        task_ctx: Arc<TaskContext>,
        run: LocalRun,
    },
    /// An answer the coordinator computed itself (EXPLAIN).
    Immediate(Vec<RecordBatch>),
    /// A DDL or DML statement, run when fetched; its answer is one row
    /// with the rows it wrote (`count`).
    Update(LogicalPlan, Arc<Session>),
}

/// Whether `plan` is a DDL or DML statement (the server's `updates` run
/// them).
pub fn is_update(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_)
    )
}

/// The result of a DDL or DML statement read as a query, as single-node
/// DataFusion answers it: DML gives one row with the rows it wrote
/// (`count`), DDL gives nothing (no columns, no rows).
pub fn update_schema(plan: &LogicalPlan) -> SchemaRef {
    if matches!(plan, LogicalPlan::Ddl(_)) {
        return Arc::new(Schema::empty());
    }
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::Int64,
        false,
    )]))
}

/// A job running now.
struct RunningJob {
    cancel: CancellationToken,
    progress: Arc<JobProgress>,
    /// The job's output, to see whether it waits for its reader; `None`
    /// for a plan computed as its reader reads it (always waiting for it).
    output: Option<WeakSender<Result<FlightData, Status>>>,
}

/// A job entered among the running ones, with its progress.
struct RegisteredJob {
    progress: Arc<JobProgress>,
    _entry: RunningEntry,
}

/// Ends a running job's entry when the job's stream or future is dropped.
struct RunningEntry {
    running: Arc<DashMap<String, RunningJob>>,
    job_id: String,
}

impl Drop for RunningEntry {
    fn drop(&mut self) {
        self.running.remove(&self.job_id);
    }
}

/// How far a running job is.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Tasks finished out of all tasks, 0.0 to 1.0.
    pub fraction: f64,
    pub finished: usize,
    pub tasks: usize,
    /// The output buffer is full: the rest comes as the client reads.
    pub waiting_for_client: bool,
}

/// What the coordinator remembers of a job it ran.
#[derive(Debug, Clone)]
pub struct JobRecord {
    pub job_id: String,
    pub stages: usize,
    pub tasks: usize,
    /// Attempts the job took (more than 1 after a lost worker).
    pub attempts: u32,
    /// The workers each stage's tasks ran on in the last attempt, by stage
    /// then partition.
    pub placement: Vec<Vec<String>>,
}

impl JobRecord {
    pub fn workers_used(&self) -> Vec<String> {
        let mut all: Vec<String> = self.placement.iter().flatten().cloned().collect();
        all.sort();
        all.dedup();
        all
    }
}

/// How the coordinator runs jobs.
#[derive(Debug, Clone)]
pub struct JobLimits {
    /// Attempts per job when workers are lost (`--task-max-attempts`).
    pub max_attempts: u32,
    /// A job still running after this is stopped with DEADLINE_EXCEEDED.
    pub query_timeout: Option<Duration>,
    /// Jobs running at once, and waiting for a slot, before RESOURCE_EXHAUSTED.
    pub max_concurrent_queries: usize,
    pub max_queued_queries: usize,
}

impl Default for JobLimits {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            query_timeout: None,
            max_concurrent_queries: 32,
            max_queued_queries: 128,
        }
    }
}

pub struct Coordinator {
    shared: Arc<Session>,
    runner: Arc<JobRunner>,
    admission: Admission,
    query_timeout: Option<Duration>,
    history: Arc<Mutex<VecDeque<JobRecord>>>,
    /// Distributed jobs running now, by job id, to cancel them and report
    /// their progress.
    running: Arc<DashMap<String, RunningJob>>,
    /// Where clients may create external tables; nowhere when `None`.
    table_roots: Option<DataRoots>,
    /// Running and recently ended queries (`system.queries`).
    queries: Arc<QueryLog>,
}

impl Coordinator {
    pub fn new(ctx: SessionContext, runner: JobRunner, limits: &JobLimits) -> Self {
        Self {
            shared: Arc::new(Session::shared(ctx)),
            runner: Arc::new(runner),
            admission: Admission::new(limits.max_concurrent_queries, limits.max_queued_queries),
            query_timeout: limits.query_timeout,
            history: Arc::new(Mutex::new(VecDeque::new())),
            running: Arc::new(DashMap::new()),
            table_roots: None,
            queries: Arc::default(),
        }
    }

    /// How `plan` runs on the coordinator, if it does (see
    /// `planner::local`).
    fn runs_here(&self, plan: &Arc<dyn ExecutionPlan>, session: &Session) -> Option<LocalRun> {
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

    /// Running and recently ended queries.
    pub fn queries(&self) -> &Arc<QueryLog> {
        &self.queries
    }

    /// Lets clients create external tables under `roots` (`--data-root`).
    pub fn with_table_roots(mut self, roots: Option<DataRoots>) -> Self {
        self.table_roots = roots;
        self
    }

    /// PERMISSION_DENIED unless a client may define a table at `location`.
    /// Checked before DataFusion lists or reads anything there.
    pub fn check_table_location(&self, location: &str) -> Result<(), Status> {
        self.check_location(location, "external tables may be created")
    }

    /// The same confinement for the files `COPY … TO` writes.
    pub fn check_copy_location(&self, location: &str) -> Result<(), Status> {
        self.check_location(location, "COPY may write")
    }

    fn check_location(&self, location: &str, what: &str) -> Result<(), Status> {
        match &self.table_roots {
            Some(roots) if roots.allows_location(location) => Ok(()),
            Some(_) => Err(Status::permission_denied(format!(
                "{location} is outside the server's --data-root: {what} only there"
            ))),
            None => Err(Status::permission_denied(format!(
                "{location}: {what} nowhere unless the server is started with --data-root DIR|URL"
            ))),
        }
    }

    /// The server's own session (its catalogs are every session's).
    pub fn session(&self) -> &SessionContext {
        self.shared.ctx()
    }

    /// The session of clients that changed no setting.
    pub fn shared_session(&self) -> &Arc<Session> {
        &self.shared
    }

    /// Jobs running now.
    pub fn running_jobs(&self) -> usize {
        self.admission.running()
    }

    /// Whether fewer than half the running slots are taken: room to start
    /// a query before its client asks for the rows.
    pub fn has_room_to_start_early(&self) -> bool {
        self.admission.mostly_free()
    }

    /// Plans one SQL statement in `session`.
    pub async fn plan(&self, session: &Arc<Session>, sql: &str) -> Result<PlannedQuery, Status> {
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
    ) -> Result<PlannedQuery, Status> {
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
    ) -> Result<Reuse, Status> {
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
        let plan = prune_scan_ranges(&state, plan).map_err(|e| to_status(&e))?;
        let planned = self.planned(session, plan, session.changed_settings())?;
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
                    Ok(plan) => Template::capture(&state, plan, table, key.values).await,
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
    pub async fn logical_plan(&self, session: &Session, sql: &str) -> Result<LogicalPlan, Status> {
        session
            .ctx()
            .state()
            .create_logical_plan(&number_placeholders(sql))
            .await
            .map_err(|e| to_status(&e))
    }

    /// Plans a statement already turned into a logical plan (a prepared
    /// statement with its parameters bound).
    pub async fn plan_logical(
        &self,
        session: &Arc<Session>,
        logical: LogicalPlan,
    ) -> Result<PlannedQuery, Status> {
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
    ) -> Result<PlannedQuery, Status> {
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
    ) -> Result<Arc<dyn ExecutionPlan>, Status> {
        let parameters = parameter_names(logical)?;
        if !parameters.is_empty() {
            return Err(Status::invalid_argument(format!(
                "the statement has parameters ({}): prepare it and bind values",
                parameters.join(", ")
            )));
        }
        session
            .ctx()
            .state()
            .create_physical_plan(logical)
            .await
            .map_err(|e| to_status(&e))
    }

    /// A physical plan made ready to run as a job (here or on the
    /// workers), as a query's would be.
    pub fn plan_job(
        &self,
        session: &Arc<Session>,
        plan: Arc<dyn ExecutionPlan>,
    ) -> Result<PlannedQuery, Status> {
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
    ) -> Result<PlannedQuery, Status> {
        let write: Arc<dyn ExecutionPlan> = Arc::new(TableWriteExec::new(rows, target));
        let path = col("path", &write.schema()).map_err(|e| to_status(&e))?;
        let ordering = LexOrdering::new([PhysicalSortExpr::new_default(path)])
            .ok_or_else(|| Status::internal("an empty ordering of a write's answers"))?;
        let gathered = Arc::new(CoalescePartitionsExec::new(write));
        let plan = Arc::new(SortExec::new(ordering, gathered));
        self.planned(session, plan, session.changed_settings())
    }

    async fn plan_logical_for(
        &self,
        session: &Arc<Session>,
        logical: LogicalPlan,
        reader: Reader,
    ) -> Result<PlannedQuery, Status> {
        let parameters = parameter_names(&logical)?;
        if !parameters.is_empty() {
            return Err(Status::invalid_argument(format!(
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
    ) -> Result<PlannedQuery, Status> {
        let state = session.ctx().state();
        let settings = session.changed_settings();
        match &logical {
            LogicalPlan::Explain(explain) => {
                let batches = session
                    .ctx()
                    .execute_logical_plan(logical.clone())
                    .await
                    .map_err(|e| to_status(&e))?
                    .collect()
                    .await
                    .map_err(|e| to_status(&e))?;
                let inner = state
                    .create_physical_plan(&explain.plan)
                    .await
                    .map_err(|e| to_status(&e))?;
                // VERBOSE adds the plan after each distributed pass
                // (`squadron_planner::pipeline`), as DataFusion's rows show
                // it after each of its rules.
                let mut rows = vec![];
                match self.runs_here(&inner, session) {
                    Some(_) => rows.push((
                        "distributed_plan".to_string(),
                        "Runs on the coordinator: it reads no table, or little \
                         (--coordinator-scan-limit)"
                            .to_string(),
                    )),
                    None => {
                        let (graph, steps) =
                            build_job_graph_verbose(inner, &session.squadron_options())
                                .map_err(|e| to_status(&e))?;
                        if explain.verbose {
                            rows.extend(steps);
                        }
                        rows.push(("distributed_plan".to_string(), graph.to_string()));
                    }
                }
                let schema = explain.schema.inner().clone();
                let (types, plans): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
                let stages = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(StringArray::from(types)),
                        Arc::new(StringArray::from(plans)),
                    ],
                )
                .map_err(|e| Status::internal(e.to_string()))?;
                let mut all = batches;
                all.push(stages);
                Ok(PlannedQuery {
                    schema,
                    work: Work::Immediate(all),
                    settings,
                })
            }
            LogicalPlan::Analyze(_) => Err(Status::unimplemented(
                "EXPLAIN ANALYZE is not supported yet; use EXPLAIN",
            )),
            plan if is_update(plan) => Ok(PlannedQuery {
                schema: update_schema(plan),
                work: Work::Update(logical, Arc::clone(session)),
                settings,
            }),
            LogicalPlan::Statement(Statement::SetVariable(_) | Statement::ResetVariable(_)) => {
                Err(Status::internal(
                    "SET changes a client session and is applied by the Flight SQL service",
                ))
            }
            LogicalPlan::Copy(_) | LogicalPlan::Statement(_) => Err(Status::unimplemented(
                format!("not supported yet: {}", logical.display()),
            )),
            _ => {
                let plan = state
                    .create_physical_plan(&logical)
                    .await
                    .and_then(|plan| match reader {
                        Reader::Client => for_clients(plan),
                        Reader::Writer => Ok(plan),
                    })
                    .map_err(|e| to_status(&e))?;
                tracing::trace!("physical plan ready");
                self.planned(session, plan, settings)
            }
        }
    }

    /// A physical plan made ready to run: here, or cut into stages.
    fn planned(
        &self,
        session: &Arc<Session>,
        plan: Arc<dyn ExecutionPlan>,
        settings: Vec<(String, String)>,
    ) -> Result<PlannedQuery, Status> {
        let schema = plan.schema();
        if let Some(run) = self.runs_here(&plan, session) {
            let task_ctx = session.task_ctx();
            // Run as a worker runs it (see `ready_to_execute`).
            let plan = ready_to_execute(plan, &task_ctx).map_err(|e| to_status(&e))?;
            return Ok(PlannedQuery {
                schema,
                work: Work::Local {
                    plan,
                    task_ctx,
                    run,
                },
                settings,
            });
        }
        let mut graph =
            build_job_graph(plan, &session.squadron_options()).map_err(|e| to_status(&e))?;
        tracing::trace!("stages cut");
        encode_stages(&mut graph).map_err(|e| to_status(&e))?;
        Ok(PlannedQuery {
            schema,
            work: Work::Distributed(Arc::new(graph)),
            settings,
        })
    }

    /// Waits for an admission slot (or is refused with RESOURCE_EXHAUSTED);
    /// the statement runs while the slot is held.
    pub async fn admit(&self) -> Result<Slot, Status> {
        self.admission.admit().await
    }

    /// Runs a planned statement; the stream yields its result as Flight
    /// messages. Waits for an admission slot first (or is refused with
    /// RESOURCE_EXHAUSTED).
    pub async fn execute(&self, job_id: &str, query: PlannedQuery) -> Result<JobStream, Status> {
        let schema = query.schema;
        let settings = query.settings;
        let graph = match query.work {
            Work::Immediate(batches) => {
                let batches = futures::stream::iter(batches.into_iter().map(Ok));
                return Ok(encode_batches(schema, batches));
            }
            Work::Local {
                plan,
                task_ctx,
                run: run @ (LocalRun::AsRead | LocalRun::AtOnce),
            } => {
                let slot = self.admission.admit().await?;
                let batches = execute_stream(plan, task_ctx)
                    .map_err(|e| to_status(&e))?
                    .map_err(|e| to_status(&e));
                // Timeout and cancel stop it as they stop a job; the slot
                // is held until the answer is sent or dropped.
                let (cancel, entry) = self.register(job_id, None);
                let deadline = self.deadline();
                let stop = self.stopped(cancel, deadline.clone());
                let messages = until_stopped(
                    encode_batches(schema, batches),
                    stop,
                    deadline,
                    (slot, entry),
                );
                if run == LocalRun::AsRead {
                    return Ok(messages);
                }
                return Ok(started_at_once(messages));
            }
            Work::Local {
                plan,
                task_ctx,
                run: LocalRun::Supervised,
            } => {
                let slot = self.admission.admit().await?;
                let (tx, rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
                let run = run_locally(schema, plan, task_ctx, tx.clone());
                let job = self.supervise(job_id, &tx, |_| run);
                let job_id = job_id.to_string();
                let job = async move {
                    let _slot = slot;
                    let report = job.await;
                    tracing::debug!(job_id, "job on the coordinator {}", report.outcome);
                };
                tokio::spawn(tracing::Instrument::in_current_span(job));
                return Ok(ReceiverStream::new(rx).boxed());
            }
            Work::Update(..) => {
                // The Flight SQL service runs them first
                // (`updates::run_update_now`), as they are described.
                return Err(Status::internal(
                    "a DDL or DML statement reached the query executor",
                ));
            }
            Work::Distributed(graph) => graph,
        };
        let slot = self.admission.admit().await?;
        let (tx, rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
        let runner = Arc::clone(&self.runner);
        let history = Arc::clone(&self.history);
        let job_id = job_id.to_string();
        let query_id = crate::queries::current_query_id();
        let run = {
            let (graph, job_id, tx) = (Arc::clone(&graph), job_id.clone(), tx.clone());
            move |progress: Arc<JobProgress>| async move {
                let ids = JobIds {
                    job_id: &job_id,
                    query_id: &query_id,
                };
                runner.run(ids, &graph, &settings, &progress, &tx).await
            }
        };
        let run = self.supervise(&job_id, &tx, run);
        let job = async move {
            let _slot = slot;
            let started = Instant::now();
            let report = run.await;
            tracing::info!(
                job_id,
                stages = graph.stages.len(),
                tasks = graph.task_count(),
                attempts = report.attempts,
                rows = report.rows,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "job {}",
                report.outcome
            );
            if let Some(placement) = &report.placement {
                remember(&history, &job_id, &graph, placement, report.attempts);
            }
        };
        // The job's log lines carry the query's id (the caller's span).
        tokio::spawn(tracing::Instrument::in_current_span(job));
        let first = futures::stream::once(std::future::ready(Ok(schema_message(&schema))));
        Ok(first.chain(ReceiverStream::new(rx)).boxed())
    }

    /// `run` (given the job's progress) as the running job `job_id`,
    /// stopped when it runs longer than the query timeout or is cancelled;
    /// the client then reads why on `output`.
    fn supervise<F, R>(
        &self,
        job_id: &str,
        output: &Sender<Result<FlightData, Status>>,
        run: F,
    ) -> impl Future<Output = JobReport> + Send + 'static
    where
        F: FnOnce(Arc<JobProgress>) -> R,
        R: Future<Output = JobReport> + Send + 'static,
    {
        let (cancel, entry) = self.register(job_id, Some(output));
        let progress = Arc::clone(&entry.progress);
        let stop = self.stopped(cancel, self.deadline());
        let output = output.clone();
        let run = run(progress);
        async move {
            // Stopping drops the run with the future: its tasks stop.
            let stopped = |outcome| JobReport {
                outcome,
                attempts: 0,
                rows: 0,
                placement: None,
            };
            let report = tokio::select! {
                report = run => report,
                status = stop => {
                    let outcome = match status.code() {
                        tonic::Code::DeadlineExceeded => "stopped: query timeout",
                        _ => "stopped: cancelled",
                    };
                    let _ = output.send(Err(status)).await;
                    stopped(outcome)
                }
            };
            drop(entry);
            report
        }
    }

    /// Enters `job_id` among the running jobs until the entry is dropped;
    /// its token cancels it. At most one entry per admitted job: bounded
    /// by the admission limit.
    fn register(
        &self,
        job_id: &str,
        output: Option<&Sender<Result<FlightData, Status>>>,
    ) -> (CancellationToken, RegisteredJob) {
        let cancel = CancellationToken::new();
        let progress = Arc::new(JobProgress::default());
        let job = RunningJob {
            cancel: cancel.clone(),
            progress: Arc::clone(&progress),
            output: output.map(Sender::downgrade),
        };
        self.running.insert(job_id.to_string(), job);
        let entry = RunningEntry {
            running: Arc::clone(&self.running),
            job_id: job_id.to_string(),
        };
        (
            cancel,
            RegisteredJob {
                progress,
                _entry: entry,
            },
        )
    }

    /// When a query starting now must be over (`--query-timeout`).
    fn deadline(&self) -> Option<Deadline> {
        self.query_timeout.map(Deadline::after)
    }

    /// Resolves with the status a job is stopped with: DEADLINE_EXCEEDED
    /// at `deadline`, CANCELLED when `cancel` fires.
    fn stopped(
        &self,
        cancel: CancellationToken,
        deadline: Option<Deadline>,
    ) -> impl Future<Output = Status> + Send + 'static {
        async move {
            let timeout = async {
                match deadline {
                    Some(deadline) => deadline.reached().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                status = timeout => status,
                _ = cancel.cancelled() => Status::cancelled("the query was cancelled"),
            }
        }
    }

    /// Stops the running job `job_id` on every worker; its client gets
    /// CANCELLED. False when no such job is running.
    pub fn cancel(&self, job_id: &str) -> bool {
        match self.running.get(job_id) {
            Some(job) => {
                job.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// How far the running job `job_id` is; `None` once it has ended.
    pub fn progress(&self, job_id: &str) -> Option<Progress> {
        let job = self.running.get(job_id)?;
        let (finished, tasks) = job.progress.counts();
        let waiting_for_client = match &job.output {
            Some(output) => output
                .upgrade()
                .is_some_and(|output| output.capacity() == 0),
            None => true,
        };
        Some(Progress {
            fraction: job.progress.fraction(),
            finished,
            tasks,
            waiting_for_client,
        })
    }

    /// The most recent jobs, oldest first.
    pub fn recent_jobs(&self) -> Vec<JobRecord> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

impl LiveQueries for Coordinator {
    fn live_queries(&self) -> Vec<(QueryRow, Option<(usize, usize)>)> {
        self.queries
            .rows()
            .into_iter()
            .map(|row| {
                let progress = match row.state {
                    "running" => self.progress(&row.job_id).map(|p| (p.finished, p.tasks)),
                    _ => None,
                };
                (row, progress)
            })
            .collect()
    }
}

fn remember(
    history: &Mutex<VecDeque<JobRecord>>,
    job_id: &str,
    graph: &JobGraph,
    placement: &Placement,
    attempts: u32,
) {
    let record = JobRecord {
        job_id: job_id.to_string(),
        stages: graph.stages.len(),
        tasks: graph.task_count(),
        attempts,
        placement: graph
            .stages
            .iter()
            .map(|s| {
                (0..s.tasks)
                    .map(|p| placement.worker_of(s.id, p).to_string())
                    .collect()
            })
            .collect(),
    };
    let mut history = history.lock().unwrap_or_else(|e| e.into_inner());
    if history.len() == JOB_HISTORY {
        history.pop_front();
    }
    history.push_back(record);
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
