//! How far a running job is: tasks finished out of the tasks of its
//! current attempt (PollFlightInfo reports it to clients), and each task
//! attempt it ran, where and with what result (`system.tasks`, EXPLAIN
//! ANALYZE).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use squadron_planner::JobGraph;
use squadron_proto::v1::{TaskMetrics, TaskState, TaskStatus};

/// Task attempts one job records at most (a bound on its memory: beyond,
/// attempts run unrecorded).
pub const TASK_RUNS_KEPT: usize = 4096;

#[derive(Debug, Default)]
pub struct JobProgress {
    tasks: AtomicUsize,
    finished: AtomicUsize,
    runs: Mutex<Vec<TaskRun>>,
    /// Attempts recorded whose end was not reported yet, and a wake-up
    /// for each report.
    unreported: AtomicUsize,
    reported: tokio::sync::Notify,
    /// The job's stages, for those who look at it (the query UI).
    graph: std::sync::OnceLock<Arc<JobGraph>>,
}

/// One task attempt of a job.
#[derive(Debug, Clone)]
pub struct TaskRun {
    pub stage: u32,
    pub partition: u32,
    pub attempt: u32,
    pub worker: String,
    /// `running`, `succeeded`, `failed`, `cancelled`, `lost` (its worker
    /// went away first), `rerun` (given up for a new attempt), or
    /// `stopped` (still running when the job ended).
    pub state: &'static str,
    /// When the worker accepted it.
    pub started: SystemTime,
    pub ended: Option<SystemTime>,
    pub error: Option<String>,
    /// What the worker measured, when it reported an end.
    pub metrics: Option<TaskMetrics>,
    /// Its end was reported (or it was given up for a re-run).
    pub reported: bool,
}

/// Where a task attempt is recorded (`None`: beyond `TASK_RUNS_KEPT`).
pub type RunSlot = Option<usize>;

impl JobProgress {
    /// Records task `partition` of `stage`, attempt `attempt`, accepted by
    /// `worker` now.
    pub fn task_started(
        &self,
        stage: usize,
        partition: usize,
        attempt: u32,
        worker: &str,
    ) -> RunSlot {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        if runs.len() >= TASK_RUNS_KEPT {
            return None;
        }
        self.unreported.fetch_add(1, Ordering::Relaxed);
        runs.push(TaskRun {
            stage: stage as u32,
            partition: partition as u32,
            attempt,
            worker: worker.to_string(),
            state: "running",
            started: SystemTime::now(),
            ended: None,
            error: None,
            metrics: None,
            reported: false,
        });
        Some(runs.len() - 1)
    }

    /// Records how the task attempt in `slot` ended: with its final
    /// `status`, or lost (`None`, `why`).
    pub fn task_ended(&self, slot: RunSlot, status: Option<&TaskStatus>, why: &str) {
        let Some(slot) = slot else { return };
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(run) = runs.get_mut(slot) else {
            return;
        };
        self.mark_reported(run);
        run.ended = Some(SystemTime::now());
        match status {
            Some(status) => {
                run.state = match status.state() {
                    TaskState::Succeeded => "succeeded",
                    TaskState::Cancelled => "cancelled",
                    _ => "failed",
                };
                if !status.message.is_empty() && run.state != "succeeded" {
                    run.error = Some(status.message.clone());
                }
                run.metrics = status.metrics.clone();
                if let Some(m) = &status.metrics {
                    metrics::counter!(crate::metrics::TASK_SPILLED_BYTES)
                        .increment(m.spilled_bytes);
                }
            }
            None => {
                run.state = "lost";
                run.error = Some(why.to_string());
            }
        }
    }

    /// Records that attempt `attempt` of task `partition` of `stage` was
    /// given up for a new attempt before it reported an end (`rerun`).
    pub fn task_superseded(&self, stage: usize, partition: usize, attempt: u32) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let found = runs.iter_mut().rev().find(|r| {
            (r.stage as usize, r.partition as usize, r.attempt) == (stage, partition, attempt)
        });
        if let Some(run) = found.filter(|r| !r.reported) {
            self.mark_reported(run);
            run.state = "rerun";
            run.ended = Some(SystemTime::now());
        }
    }

    fn mark_reported(&self, run: &mut TaskRun) {
        if run.reported {
            return;
        }
        run.reported = true;
        if self.unreported.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.reported.notify_waiters();
        }
    }

    /// Marks the attempts still running as `stopped`: the job ended
    /// without waiting for them.
    pub fn job_ended(&self) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        for run in runs.iter_mut().filter(|r| r.state == "running") {
            run.state = "stopped";
            run.ended = Some(now);
        }
    }

    /// Waits until every recorded attempt reported its end, at most
    /// `within`; whether they all did.
    pub async fn all_reported(&self, within: std::time::Duration) -> bool {
        let wait = async {
            loop {
                let reported = self.reported.notified();
                if self.unreported.load(Ordering::Relaxed) == 0 {
                    return;
                }
                reported.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }

    /// Records how long each stage ran (first start to last end of its
    /// reported attempts), once its job completed.
    pub fn record_stage_durations(&self) {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let mut spans: Vec<(u32, u64, u64)> = vec![];
        for m in runs
            .iter()
            .filter_map(|r| Some((r.stage, r.metrics.as_ref()?)))
        {
            let (stage, m) = m;
            match spans.iter_mut().find(|(s, _, _)| *s == stage) {
                Some((_, start, end)) => {
                    *start = (*start).min(m.started_unix_micros);
                    *end = (*end).max(m.ended_unix_micros);
                }
                None => spans.push((stage, m.started_unix_micros, m.ended_unix_micros)),
            }
        }
        for (_, start, end) in spans {
            metrics::histogram!(crate::metrics::STAGE_SECONDS)
                .record(end.saturating_sub(start) as f64 / 1e6);
        }
    }

    pub fn run_count(&self) -> usize {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Remembers the job's stages (once).
    pub fn set_graph(&self, graph: &Arc<JobGraph>) {
        let _ = self.graph.set(Arc::clone(graph));
    }

    pub fn graph(&self) -> Option<Arc<JobGraph>> {
        self.graph.get().cloned()
    }

    /// The task attempts recorded so far, in the order they started.
    pub fn runs(&self) -> Vec<TaskRun> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl JobProgress {
    /// A new attempt starts over with `tasks` tasks, none finished.
    pub fn start_attempt(&self, tasks: usize) {
        self.finished.store(0, Ordering::Relaxed);
        self.tasks.store(tasks, Ordering::Relaxed);
    }

    pub fn task_finished(&self) {
        self.finished.fetch_add(1, Ordering::Relaxed);
    }

    /// Finished tasks and all tasks of the current attempt.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.finished.load(Ordering::Relaxed),
            self.tasks.load(Ordering::Relaxed),
        )
    }

    /// The share of tasks finished, 0.0 to 1.0.
    pub fn fraction(&self) -> f64 {
        match self.counts() {
            (_, 0) => 0.0,
            (finished, tasks) => (finished.min(tasks) as f64) / (tasks as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_counts_the_current_attempt() {
        let progress = JobProgress::default();
        assert_eq!(progress.fraction(), 0.0);
        progress.start_attempt(4);
        progress.task_finished();
        assert_eq!(progress.fraction(), 0.25);
        progress.start_attempt(4);
        assert_eq!(progress.counts(), (0, 4), "a retry starts over");
    }

    #[test]
    fn task_attempts_are_recorded_with_how_they_ended() {
        let progress = JobProgress::default();
        let a = progress.task_started(0, 0, 0, "w1");
        let b = progress.task_started(0, 1, 0, "w2");
        let c = progress.task_started(1, 0, 0, "w1");
        let done = TaskStatus {
            state: TaskState::Succeeded as i32,
            metrics: Some(TaskMetrics {
                output_rows: 7,
                ..Default::default()
            }),
            ..Default::default()
        };
        progress.task_ended(a, Some(&done), "");
        progress.task_ended(b, None, "connection reset");
        progress.job_ended();
        let runs = progress.runs();
        let states: Vec<_> = runs.iter().map(|r| r.state).collect();
        assert_eq!(states, ["succeeded", "lost", "stopped"]);
        assert_eq!(runs[0].metrics.as_ref().map(|m| m.output_rows), Some(7));
        assert_eq!(runs[1].error.as_deref(), Some("connection reset"));
        assert!(c.is_some() && runs.iter().all(|r| r.ended.is_some()));
    }

    #[test]
    fn a_job_records_a_bounded_number_of_attempts() {
        let progress = JobProgress::default();
        for p in 0..TASK_RUNS_KEPT + 10 {
            progress.task_started(0, p, 0, "w");
        }
        assert_eq!(progress.task_started(0, 0, 1, "w"), None);
        assert_eq!(progress.runs().len(), TASK_RUNS_KEPT);
    }
}
