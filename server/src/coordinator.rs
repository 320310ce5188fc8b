//! The coordinator: plans statements, runs them as distributed jobs and
//! keeps a short record of recent jobs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use squadron_worker::client::PeerClients;
use squadron_worker::error::to_status;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::cluster::WorkerResolver;
use crate::output::{job_output, JobStream};
use crate::planner::{build_job_graph, JobGraph};
use crate::scheduler::{start_job, Placement};

/// How many finished jobs `recent_jobs` remembers.
const JOB_HISTORY: usize = 256;

/// A planned statement, ready to run.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    pub schema: SchemaRef,
    pub work: Work,
}

#[derive(Debug, Clone)]
pub enum Work {
    /// A query to run on the workers.
    Distributed(JobGraph),
    /// An answer the coordinator computed itself (EXPLAIN).
    Immediate(Vec<RecordBatch>),
}

/// What the coordinator remembers of a job it ran.
#[derive(Debug, Clone)]
pub struct JobRecord {
    pub job_id: String,
    pub stages: usize,
    pub tasks: usize,
    /// The workers each stage's tasks ran on, by stage then partition.
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

pub struct Coordinator {
    ctx: SessionContext,
    resolver: Arc<dyn WorkerResolver>,
    clients: PeerClients,
    next_worker: AtomicUsize,
    history: Mutex<VecDeque<JobRecord>>,
}

impl Coordinator {
    pub fn new(ctx: SessionContext, resolver: Arc<dyn WorkerResolver>) -> Self {
        Self {
            ctx,
            resolver,
            clients: PeerClients::default(),
            next_worker: AtomicUsize::new(0),
            history: Mutex::new(VecDeque::new()),
        }
    }

    /// Plans one SQL statement.
    pub async fn plan(&self, sql: &str) -> Result<PlannedQuery, Status> {
        let state = self.ctx.state();
        let logical = state
            .create_logical_plan(sql)
            .await
            .map_err(|e| to_status(&e))?;
        match &logical {
            LogicalPlan::Explain(explain) => {
                let batches = self
                    .ctx
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
                let graph = build_job_graph(inner).map_err(|e| to_status(&e))?;
                let schema = explain.schema.inner().clone();
                let stages = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(StringArray::from(vec!["distributed_plan"])),
                        Arc::new(StringArray::from(vec![graph.to_string()])),
                    ],
                )
                .map_err(|e| Status::internal(e.to_string()))?;
                let mut all = batches;
                all.push(stages);
                Ok(PlannedQuery {
                    schema,
                    work: Work::Immediate(all),
                })
            }
            LogicalPlan::Analyze(_) => Err(Status::unimplemented(
                "EXPLAIN ANALYZE is not supported yet; use EXPLAIN",
            )),
            LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_) => Err(Status::unimplemented(format!(
                "only queries are supported yet, not {}",
                logical.display()
            ))),
            _ => {
                let plan = state
                    .create_physical_plan(&logical)
                    .await
                    .map_err(|e| to_status(&e))?;
                let schema = plan.schema();
                let graph = build_job_graph(plan).map_err(|e| to_status(&e))?;
                Ok(PlannedQuery {
                    schema,
                    work: Work::Distributed(graph),
                })
            }
        }
    }

    /// Runs a planned statement; the stream yields its result.
    pub async fn execute(&self, job_id: &str, query: PlannedQuery) -> Result<JobStream, Status> {
        let graph = match query.work {
            Work::Immediate(batches) => {
                let (tx, rx) = tokio::sync::mpsc::channel(batches.len().max(1));
                for batch in batches {
                    let _ = tx.try_send(Ok(batch));
                }
                return Ok(ReceiverStream::new(rx));
            }
            Work::Distributed(graph) => graph,
        };
        let workers = self.resolver.get_urls();
        if workers.is_empty() {
            return Err(Status::unavailable("no workers are available"));
        }
        let offset = self.next_worker.fetch_add(1, Ordering::Relaxed);
        let placement = Placement::round_robin(&graph, workers, offset);
        let started = std::time::Instant::now();
        let job = start_job(job_id, &graph, &placement, &self.clients).await?;
        tracing::debug!(
            job_id,
            dispatch_ms = started.elapsed().as_millis() as u64,
            "all tasks accepted"
        );
        self.remember(job_id, &graph, &placement);
        Ok(job_output(job, &graph, &placement, &self.clients))
    }

    fn remember(&self, job_id: &str, graph: &JobGraph, placement: &Placement) {
        let record = JobRecord {
            job_id: job_id.to_string(),
            stages: graph.stages.len(),
            tasks: graph.task_count(),
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
        let mut history = self.history.lock().expect("history lock");
        if history.len() == JOB_HISTORY {
            history.pop_front();
        }
        history.push_back(record);
    }

    /// The most recent jobs, oldest first.
    pub fn recent_jobs(&self) -> Vec<JobRecord> {
        self.history
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }
}
