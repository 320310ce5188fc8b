//! Running a job to its end: place, dispatch, stream the output, and retry
//! on the healthy workers when a worker was lost.
//!
//! This is the default policy (`policy.rs` chooses; the fault-tolerant
//! mode is `fault_tolerant.rs`). Retry is per job: a failed attempt is
//! stopped whole and the job runs again with the next attempt number
//! (stream keys carry it, so streams of different attempts never mix).
//! That is sound without persisting any intermediate output, which keeps
//! the happy path free of disk; the fault-tolerant mode retains outputs to
//! re-run single tasks. A job is retried only while no row has reached the
//! client: after that a retry could duplicate rows, so the query fails with
//! a clear error instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tonic::{Code, Status};

use super::dispatch::{is_query_error, start_job, Attempt, JobIds, TaskFailure};
use super::placement::Placement;
use super::progress::JobProgress;
use crate::cluster::{WorkerHealth, WorkerResolver};
use crate::output::job_output::{
    lost_worker, open_output, stream_output, AttemptEnd, OutputSender,
};
use datafusion::execution::disk_manager::{DiskManager, DiskManagerBuilder};
use squadron_common::spill_dir::OwnedDir;
use squadron_net::stream::StreamSecret;
use squadron_planner::JobGraph;

pub struct JobRunner {
    pub resolver: Arc<dyn WorkerResolver>,
    /// Also holds the channels to the workers (`health.clients()`).
    pub health: WorkerHealth,
    /// Attempts per job, at least 1 (`--task-max-attempts`).
    pub max_attempts: u32,
    /// Planning options that differ from the defaults, sent with every
    /// task so execution sees them too.
    pub settings: HashMap<String, String>,
    next_worker: AtomicUsize,
    /// Where fault-tolerant results spool past memory (`--spill-dir`).
    pub spool_disk: Option<Arc<DiskManager>>,
    /// The directory `spool_disk` writes in, removed with the runner.
    _spool_dir: Option<OwnedDir>,
}

/// What happened to a job, for the log and the job record.
#[derive(Debug)]
pub struct JobReport {
    pub outcome: &'static str,
    pub attempts: u32,
    pub rows: u64,
    /// The placement of the last attempt that started.
    pub placement: Option<Placement>,
    /// Tasks run again on their own (retry policy 'task').
    pub tasks_rerun: u32,
}

impl JobRunner {
    pub fn new(
        resolver: Arc<dyn WorkerResolver>,
        health: WorkerHealth,
        max_attempts: u32,
        settings: HashMap<String, String>,
    ) -> Self {
        Self {
            resolver,
            health,
            max_attempts: max_attempts.max(1),
            settings,
            next_worker: AtomicUsize::new(0),
            spool_disk: None,
            _spool_dir: None,
        }
    }

    /// Fault-tolerant results spool past memory to `disk`, in `dir`
    /// (`SpillSettings::claim`).
    pub fn with_spool(
        mut self,
        (dir, disk): (OwnedDir, DiskManagerBuilder),
    ) -> anyhow::Result<Self> {
        self.spool_disk = Some(Arc::new(disk.build()?));
        self._spool_dir = Some(dir);
        Ok(self)
    }

    /// Runs `graph` with whole-job retry (the default policy; see
    /// `policy.rs` for the choice) with `settings` sent to every task.
    pub(super) async fn run_whole_job(
        &self,
        ids: JobIds<'_>,
        graph: &JobGraph,
        settings: &HashMap<String, String>,
        progress: &Arc<JobProgress>,
        tx: &OutputSender,
    ) -> JobReport {
        let mut report = JobReport {
            outcome: "failed",
            attempts: 0,
            rows: 0,
            placement: None,
            tasks_rerun: 0,
        };
        loop {
            let attempt = report.attempts;
            report.attempts += 1;
            let placement = match self.place(graph).await {
                Ok(placement) => placement,
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                    return report;
                }
            };
            report.placement = Some(placement.clone());
            let used = placement.workers_used();
            progress.start_attempt(graph.task_count());
            metrics::counter!(crate::metrics::STAGES).increment(graph.stages.len() as u64);
            if attempt > 0 {
                metrics::counter!(crate::metrics::JOB_RETRIES).increment(1);
            }
            let this = Attempt {
                number: attempt,
                secret: StreamSecret::generate(),
            };
            let output = open_output(ids.job_id, &this, graph, &placement, self.health.clients());
            let started = tokio::select! {
                started = start_job(ids, &this, graph, &placement, settings, progress, &self.health) => started,
                _ = tx.closed() => {
                    report.outcome = "cancelled: the client hung up";
                    return report;
                }
                url = self.health.first_lost(&used) => Err(lost_worker(url)),
            };
            let failure = match started {
                Err(failure) => failure,
                Ok(mut job) => {
                    let end = stream_output(
                        &mut job,
                        output,
                        &placement,
                        tx,
                        &mut report.rows,
                        &self.health,
                    )
                    .await;
                    if matches!(end, AttemptEnd::Completed) {
                        job.completed();
                    }
                    // Dropping the attempt stops whatever still runs.
                    drop(job);
                    match end {
                        AttemptEnd::Completed => {
                            report.outcome = "completed";
                            return report;
                        }
                        AttemptEnd::ClientGone => {
                            report.outcome = "cancelled: the client hung up";
                            return report;
                        }
                        AttemptEnd::Failed(failure) => failure,
                    }
                }
            };
            let retry = self.worker_was_lost(&failure, &placement).await;
            let last = report.attempts >= self.max_attempts;
            if !retry || last || report.rows > 0 {
                let status = final_error(failure.status, retry, report.rows, report.attempts);
                let _ = tx.send(Err(status)).await;
                return report;
            }
            tracing::warn!(
                job_id = ids.job_id,
                attempt,
                "retrying the job on the healthy workers: {}",
                failure.status.message()
            );
        }
    }

    /// Places `graph` round robin on the healthy workers, starting with
    /// the next one in turn; UNAVAILABLE when none is, even probed now.
    pub(super) async fn place(&self, graph: &JobGraph) -> Result<Placement, Status> {
        let known = self.resolver.get_urls();
        let workers = self.health.healthy_or_probed(known.clone()).await;
        if workers.is_empty() {
            return Err(Status::unavailable(format!(
                "no worker is reachable ({} known: {})",
                known.len(),
                known.join(", ")
            )));
        }
        let offset = self.next_worker.fetch_add(1, Ordering::Relaxed);
        Ok(Placement::round_robin(graph, workers, offset))
    }

    /// Whether a failure comes from a lost worker (so a retry may succeed)
    /// rather than from the query itself.
    async fn worker_was_lost(&self, failure: &TaskFailure, placement: &Placement) -> bool {
        if let Some(url) = &failure.lost_worker {
            self.health.mark_lost(url);
        }
        if is_query_error(failure.status.code()) {
            return false;
        }
        // A consumer that could not read a dead producer reports only the
        // symptom; probing the job's workers finds the cause.
        let lost = self.health.probe(&placement.workers_used()).await;
        failure.lost_worker.is_some()
            || !lost.is_empty()
            || matches!(failure.status.code(), Code::Unavailable | Code::Aborted)
    }
}

fn final_error(status: Status, worker_lost: bool, rows: u64, attempts: u32) -> Status {
    if !worker_lost {
        return status;
    }
    let why = if rows > 0 {
        format!(
            "{rows} rows were already sent, so the query cannot be retried without \
             duplicating them; run it again"
        )
    } else {
        format!("gave up after {attempts} attempts (--task-max-attempts)")
    };
    Status::new(status.code(), format!("{} ({why})", status.message()))
}
