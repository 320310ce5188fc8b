//! Which retry policy runs a job: whole-job retry (`job_runner.rs`, the
//! default) or the fault-tolerant mode (`fault_tolerant.rs`), by the
//! `squadron.retry_policy` the job's tasks carry.

use std::borrow::Cow;
use std::sync::Arc;

use squadron_exec::squadron_options::RetryPolicy;
use squadron_planner::JobGraph;

use super::dispatch::JobIds;
use super::fault_tolerant::FaultTolerantRun;
use super::job_runner::{JobReport, JobRunner};
use super::progress::JobProgress;
use crate::output::job_output::OutputSender;

/// The setting that chooses the fault-tolerant mode.
pub const RETRY_POLICY: &str = "squadron.retry_policy";

impl JobRunner {
    /// Runs `graph` until it completes, fails for good, or the client goes.
    /// `session_settings` (what the client's session changed) are sent
    /// with every task on top of the server's settings.
    pub async fn run(
        &self,
        ids: JobIds<'_>,
        graph: &JobGraph,
        session_settings: &[(String, String)],
        progress: &Arc<JobProgress>,
        tx: &OutputSender,
    ) -> JobReport {
        let mut settings = if session_settings.is_empty() {
            Cow::Borrowed(&self.settings)
        } else {
            let mut all = self.settings.clone();
            all.extend(session_settings.iter().cloned());
            Cow::Owned(all)
        };
        if settings.get(RETRY_POLICY).map(String::as_str) == Some(RetryPolicy::Task.name()) {
            if !graph.writes_files() {
                return FaultTolerantRun::run(self, ids, graph, &settings, progress, tx).await;
            }
            // A write retries with its whole job; its outputs need not stay.
            settings.to_mut().remove(RETRY_POLICY);
        }
        self.run_whole_job(ids, graph, &settings, progress, tx)
            .await
    }
}
