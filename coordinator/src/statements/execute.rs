//! Running a planned statement: admitted, on the workers or here, its
//! answer as Flight messages.

use std::sync::Arc;
use std::time::Instant;

use datafusion::physical_plan::execute_stream;
use futures::{StreamExt, TryStreamExt};
use squadron_common::error::to_status;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::output::OutputSender;
use crate::output::{encode_batches, schema_message, JobStream, OUTPUT_BUFFER};
use crate::scheduler::stoppable::until_stopped;
use crate::scheduler::{run_locally, started_at_once, JobIds, JobProgress, JobReport};
use squadron_planner::JobGraph;
use std::future::Future;

use super::{Coordinator, LocalRun, PlannedQuery, Work};

impl Coordinator {
    /// Job `job_id` running `graph` on the workers for the current query,
    /// its output on `tx`, stopped by the query timeout or a cancel;
    /// resolves with its report and what its tasks did.
    pub(super) fn supervised_job(
        &self,
        job_id: &str,
        graph: &Arc<JobGraph>,
        settings: Vec<(String, String)>,
        tx: &OutputSender,
    ) -> impl Future<Output = (JobReport, Arc<JobProgress>)> + Send + 'static {
        let runner = Arc::clone(&self.runner);
        let query_id = crate::queries::current_query_id();
        let (graph, owned_id, sender) = (Arc::clone(graph), job_id.to_string(), tx.clone());
        let run = move |progress: Arc<JobProgress>| async move {
            progress.set_graph(&graph);
            let ids = JobIds {
                job_id: &owned_id,
                query_id: &query_id,
            };
            runner.run(ids, &graph, &settings, &progress, &sender).await
        };
        self.running.supervise(job_id, tx, run)
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
                let (cancel, entry) = self.running.register(job_id, None);
                let deadline = self.running.deadline();
                let stop = self.running.stopped(cancel, deadline.clone());
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
                let job = self.running.supervise(job_id, &tx, |_| run);
                let job_id = job_id.to_string();
                let job = async move {
                    let _slot = slot;
                    let (report, _) = job.await;
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
            Work::Analyze { graph, verbose } => {
                return self.analyze(job_id, graph, settings, verbose, schema).await;
            }
            Work::Distributed(graph) => graph,
        };
        let slot = self.admission.admit().await?;
        let (tx, rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
        let running = self.running.clone();
        let run = self.supervised_job(job_id, &graph, settings, &tx);
        let job_id = job_id.to_string();
        // The client's stream ends when the last sender is gone: this one
        // lives until the job is remembered, so a client that read the
        // whole answer finds its job among the recent ones.
        let open_until_remembered = tx.clone();
        let job = async move {
            let _slot = slot;
            let started = Instant::now();
            let (report, progress) = run.await;
            tracing::info!(
                job_id,
                stages = graph.stages.len(),
                tasks = graph.task_count(),
                attempts = report.attempts,
                tasks_rerun = report.tasks_rerun,
                rows = report.rows,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "job {}",
                report.outcome
            );
            if let Some(placement) = &report.placement {
                running.remember(&job_id, &graph, placement, &report, progress);
            }
            drop(open_until_remembered);
        };
        // The job's log lines carry the query's id (the caller's span).
        tokio::spawn(tracing::Instrument::in_current_span(job));
        let first = futures::stream::once(std::future::ready(Ok(schema_message(&schema))));
        Ok(first.chain(ReceiverStream::new(rx)).boxed())
    }
}
