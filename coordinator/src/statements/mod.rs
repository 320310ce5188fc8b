//! The coordinator: plans statements, runs them as distributed jobs and
//! keeps a short record of recent jobs.
//!
//! - `planned`: a planned statement and what it runs as
//! - `planning`: SQL to a planned statement, and where it runs
//! - `explain`: EXPLAIN's answer
//! - `missing_tables`: NOT_FOUND for a statement reading a missing table
//! - `execute`: running a planned statement
//! - `running`: the running jobs (timeout, cancel, progress) and the record
//!   of finished ones

mod analyze;
mod analyze_report;
mod execute;
mod explain;
mod missing_tables;
mod planned;
mod planning;
mod running;

use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::SessionContext;
use squadron_common::error::Error;
use squadron_exec::plan::guard::DataRoots;

use crate::queries::{LiveQueries, QueryJob, QueryLog, QueryRow};
use crate::scheduler::admission::Slot;
use crate::scheduler::{Admission, JobRunner, TaskRun};
use crate::session::Session;

pub use planned::{is_update, parameter_names, update_schema, LocalRun, PlannedQuery, Reuse, Work};
pub use planning::origins_in;
use running::RunningJobs;
pub use running::{JobRecord, Progress};

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
    /// Jobs running now (distributed or here), to stop them and report
    /// their progress.
    running: RunningJobs,
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
            running: RunningJobs::new(limits.query_timeout),
            table_roots: None,
            queries: Arc::default(),
        }
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
    pub fn check_table_location(&self, location: &str) -> Result<(), Error> {
        self.check_location(location, "external tables may be created")
    }

    /// The same confinement for the files `COPY … TO` writes.
    pub fn check_copy_location(&self, location: &str) -> Result<(), Error> {
        self.check_location(location, "COPY may write")
    }

    fn check_location(&self, location: &str, what: &str) -> Result<(), Error> {
        match &self.table_roots {
            Some(roots) if roots.allows_location(location) => Ok(()),
            Some(_) => Err(Error::permission_denied(format!(
                "{location} is outside the server's --data-root: {what} only there"
            ))),
            None => Err(Error::permission_denied(format!(
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

    /// Waits for an admission slot (or is refused with RESOURCE_EXHAUSTED);
    /// the statement runs while the slot is held.
    pub async fn admit(&self) -> Result<Slot, Error> {
        self.admission.admit().await
    }

    /// Stops the running job `job_id` on every worker; its client gets
    /// CANCELLED. False when no such job is running.
    pub fn cancel(&self, job_id: &str) -> bool {
        self.running.cancel(job_id)
    }

    /// How far the running job `job_id` is; `None` once it has ended.
    pub fn progress(&self, job_id: &str) -> Option<Progress> {
        self.running.progress(job_id)
    }

    /// The most recent jobs, oldest first.
    pub fn recent_jobs(&self) -> Vec<JobRecord> {
        self.running.recent_jobs()
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

    fn query_job(&self, id: &str) -> Option<QueryJob> {
        let (query, progress) = self.live_queries().into_iter().find(|(q, _)| q.id == id)?;
        let job = self.running.job(&query.job_id);
        Some(QueryJob {
            graph: job.as_ref().and_then(|j| j.graph()),
            runs: job.map(|j| j.runs()).unwrap_or_default(),
            query,
            progress,
        })
    }

    fn live_tasks(&self) -> Vec<(String, TaskRun)> {
        self.queries
            .rows()
            .into_iter()
            .filter(|row| row.job_id != "-")
            .flat_map(|row| {
                let runs = self.running.runs(&row.job_id).unwrap_or_default();
                runs.into_iter().map(move |run| (row.id.clone(), run))
            })
            .collect()
    }
}
