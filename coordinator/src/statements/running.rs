//! The running jobs: registered while they run, stopped by timeout or
//! cancel, their progress, and a short record of the finished ones.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_flight::FlightData;
use dashmap::DashMap;
use tokio::sync::mpsc::{Sender, WeakSender};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::scheduler::stoppable::Deadline;
use crate::scheduler::{JobProgress, JobReport, Placement, TaskRun};
use squadron_planner::JobGraph;

/// The jobs running now, by job id (to stop them and report their
/// progress), and the record of recently finished ones. Cheap to clone:
/// a job's own future keeps one to record itself when it ends.
#[derive(Clone)]
pub(super) struct RunningJobs {
    query_timeout: Option<Duration>,
    jobs: Arc<DashMap<String, RunningJob>>,
    history: Arc<Mutex<VecDeque<JobRecord>>>,
}

/// How many finished jobs `recent_jobs` remembers.
const JOB_HISTORY: usize = 256;
/// How many task attempts those jobs remember in all: the oldest jobs'
/// are forgotten first (their other figures are kept).
const TASK_RUNS_HISTORY: usize = 20_000;

/// A job running now.
struct RunningJob {
    cancel: CancellationToken,
    progress: Arc<JobProgress>,
    /// The job's output, to see whether it waits for its reader; `None`
    /// for a plan computed as its reader reads it (always waiting for it).
    output: Option<WeakSender<Result<FlightData, Status>>>,
}

/// A job entered among the running ones, with its progress.
pub(super) struct RegisteredJob {
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
    /// Tasks run again on their own (retry policy 'task').
    pub tasks_rerun: u32,
    /// The workers each stage's tasks ran on in the last attempt, by stage
    /// then partition.
    pub placement: Vec<Vec<String>>,
    /// Its task attempts (`system.tasks`), read when asked: the last
    /// statuses arrive after the job ended. `None` once the history forgot
    /// them.
    pub progress: Option<Arc<JobProgress>>,
}

impl JobRecord {
    pub fn workers_used(&self) -> Vec<String> {
        let mut all: Vec<String> = self.placement.iter().flatten().cloned().collect();
        all.sort();
        all.dedup();
        all
    }
}

impl RunningJobs {
    /// No job yet; each is stopped after `query_timeout`.
    pub(super) fn new(query_timeout: Option<Duration>) -> Self {
        Self {
            query_timeout,
            jobs: Arc::default(),
            history: Arc::default(),
        }
    }

    /// `run` (given the job's progress) as the running job `job_id`,
    /// stopped when it runs longer than the query timeout or is cancelled;
    /// the client then reads why on `output`.
    pub(super) fn supervise<F, R>(
        &self,
        job_id: &str,
        output: &Sender<Result<FlightData, Status>>,
        run: F,
    ) -> impl Future<Output = (JobReport, Arc<JobProgress>)> + Send + 'static
    where
        F: FnOnce(Arc<JobProgress>) -> R,
        R: Future<Output = JobReport> + Send + 'static,
    {
        let (cancel, entry) = self.register(job_id, Some(output));
        let progress = Arc::clone(&entry.progress);
        let stop = self.stopped(cancel, self.deadline());
        let output = output.clone();
        let run = run(Arc::clone(&progress));
        async move {
            // Stopping drops the run with the future: its tasks stop.
            let stopped = |outcome| JobReport {
                outcome,
                attempts: 0,
                rows: 0,
                placement: None,
                tasks_rerun: 0,
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
            // A completed job's tasks report their ends just after
            // (`hold_until_reported`); any other's are over now.
            if report.outcome != "completed" {
                progress.job_ended();
            }
            (report, progress)
        }
    }

    /// Enters `job_id` among the running jobs until the entry is dropped;
    /// its token cancels it. At most one entry per admitted job: bounded
    /// by the admission limit.
    pub(super) fn register(
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
        self.jobs.insert(job_id.to_string(), job);
        let entry = RunningEntry {
            running: Arc::clone(&self.jobs),
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
    pub(super) fn deadline(&self) -> Option<Deadline> {
        self.query_timeout.map(Deadline::after)
    }

    /// Resolves with the status a job is stopped with: DEADLINE_EXCEEDED
    /// at `deadline`, CANCELLED when `cancel` fires.
    pub(super) fn stopped(
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
    pub(super) fn cancel(&self, job_id: &str) -> bool {
        match self.jobs.get(job_id) {
            Some(job) => {
                job.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// How far the running job `job_id` is; `None` once it has ended.
    pub(super) fn progress(&self, job_id: &str) -> Option<Progress> {
        let job = self.jobs.get(job_id)?;
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

    /// The task attempts of job `job_id`, running or remembered.
    pub(super) fn runs(&self, job_id: &str) -> Option<Vec<TaskRun>> {
        self.job(job_id).map(|progress| progress.runs())
    }

    /// What job `job_id` did so far, running or remembered.
    pub(super) fn job(&self, job_id: &str) -> Option<Arc<JobProgress>> {
        if let Some(job) = self.jobs.get(job_id) {
            return Some(Arc::clone(&job.progress));
        }
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        history
            .iter()
            .rev()
            .find(|job| job.job_id == job_id)
            .and_then(|job| job.progress.clone())
    }

    /// The most recent jobs, oldest first.
    pub(super) fn recent_jobs(&self) -> Vec<JobRecord> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Records the finished job `job_id`, forgetting the oldest beyond
    /// `JOB_HISTORY`.
    pub(super) fn remember(
        &self,
        job_id: &str,
        graph: &JobGraph,
        placement: &Placement,
        report: &JobReport,
        progress: Arc<JobProgress>,
    ) {
        let record = JobRecord {
            job_id: job_id.to_string(),
            stages: graph.stages.len(),
            tasks: graph.task_count(),
            attempts: report.attempts,
            tasks_rerun: report.tasks_rerun,
            placement: graph
                .stages
                .iter()
                .map(|s| {
                    (0..s.tasks)
                        .map(|p| placement.worker_of(s.id, p).to_string())
                        .collect()
                })
                .collect(),
            progress: Some(progress),
        };
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history.len() == JOB_HISTORY {
            history.pop_front();
        }
        history.push_back(record);
        let count = |job: &JobRecord| job.progress.as_ref().map_or(0, |p| p.run_count());
        let mut kept: usize = history.iter().map(count).sum();
        for job in history.iter_mut() {
            if kept <= TASK_RUNS_HISTORY {
                break;
            }
            kept -= count(job);
            job.progress = None;
        }
    }
}
