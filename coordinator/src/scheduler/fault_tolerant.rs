//! Running a job in the fault-tolerant mode (`squadron.retry_policy =
//! 'task'`): a lost worker costs only the tasks whose outputs are gone.
//!
//! Every task runs at once and streams to its readers as in the default
//! mode, but its output is *retained* on its worker (in memory, spilled to
//! disk past its share) until the job ends, so it can be read again. When
//! a task fails for a reason that is not the query's (its worker went away,
//! a read of a lost input), the tasks chosen by `TaskTable::to_rerun` run
//! again with the next attempt number, on healthy workers, reading the
//! current attempts of their inputs; stale reports of older attempts are
//! ignored. The client's rows go through the `ResultSpool`: a final task's
//! rows are sent only once its stream ended cleanly, so a final task run
//! again never sends a row twice or misses one. A final stage that reads no
//! other stage (a scan) produces the same messages on every run: its rows
//! are forwarded as they come and a re-run replays past them (`Replay`).
//!
//! Not for jobs that write files (their tasks' effects outlive them): those
//! keep whole-job retry.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::FlightData;
use datafusion::common::Result as DfResult;
use futures::stream::{BoxStream, SelectAll};
use futures::StreamExt;
use squadron_common::error::to_status;
use squadron_common::version::engine_build;
use squadron_net::stream::fetch::fetch_raw_stream;
use squadron_net::stream::StreamSecret;
use squadron_proto::v1::{CleanUpJobRequest, TaskState, TaskStatus};
use squadron_proto::StreamKey;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tonic::{Code, Status, Streaming};

use super::dispatch::{
    clean_up_workers, dispatch, failure_code, hold_until_reported, is_query_error, task_request,
    JobIds, TaskFailure, TaskRef,
};
use super::job_runner::{JobReport, JobRunner};
use super::progress::{JobProgress, RunSlot};
use super::rerun::TaskTable;
use crate::output::job_output::OutputSender;
use crate::output::replay::Replay;
use crate::output::spool::ResultSpool;
use squadron_planner::JobGraph;

/// What a task's monitor reports.
enum TaskEvent {
    Succeeded(TaskRef),
    Failed(TaskFailure),
}

/// One item of a final task's stream; `None` is its clean end.
type FinalItem = (usize, u32, Option<DfResult<(FlightData, u64)>>);

/// One fault-tolerant run of a job.
pub struct FaultTolerantRun<'a> {
    runner: &'a JobRunner,
    ids: JobIds<'a>,
    graph: &'a JobGraph,
    settings: &'a HashMap<String, String>,
    progress: &'a Arc<JobProgress>,
    tx: &'a OutputSender,
    secret: StreamSecret,
    table: TaskTable,
    monitors: JoinSet<()>,
    running: HashMap<(usize, usize), AbortHandle>,
    events: mpsc::UnboundedSender<TaskEvent>,
    finals: SelectAll<BoxStream<'static, FinalItem>>,
    /// How the final tasks' rows reach the client: forwarded and replayed
    /// when the final stage reads no other stage (its output is the same
    /// on every run), else held until each task ended.
    commit: FinalCommit,
    /// Workers whose loss was handled.
    lost: HashSet<String>,
    /// Healthy workers for tasks run again, taken in turn.
    next_worker: usize,
    report: JobReport,
    /// The highest attempt number used, for the clean-up calls.
    last_attempt: u32,
}

enum FinalCommit {
    Forwarded(Replay),
    Held(ResultSpool),
}

/// How a run ends early.
enum Stop {
    Failed(Status),
    ClientGone,
}

impl<'a> FaultTolerantRun<'a> {
    /// Runs `graph` to its end; the report counts the tasks run again.
    pub async fn run(
        runner: &'a JobRunner,
        ids: JobIds<'a>,
        graph: &'a JobGraph,
        settings: &'a HashMap<String, String>,
        progress: &'a Arc<JobProgress>,
        tx: &'a OutputSender,
    ) -> JobReport {
        let report = JobReport {
            outcome: "failed",
            attempts: 1,
            rows: 0,
            placement: None,
            tasks_rerun: 0,
        };
        let placement = match runner.place(graph).await {
            Ok(placement) => placement,
            Err(status) => {
                let _ = tx.send(Err(status)).await;
                return report;
            }
        };
        progress.start_attempt(graph.task_count());
        metrics::counter!(crate::metrics::STAGES).increment(graph.stages.len() as u64);
        let (events, mut event_rx) = mpsc::unbounded_channel();
        let table = TaskTable::new(graph, |s, p| placement.worker_of(s, p).to_string());
        let mut run = FaultTolerantRun {
            runner,
            ids,
            graph,
            settings,
            progress,
            tx,
            secret: StreamSecret::generate(),
            table,
            monitors: JoinSet::new(),
            running: HashMap::new(),
            events,
            finals: SelectAll::new(),
            commit: if graph.final_stage().inputs.is_empty() {
                FinalCommit::Forwarded(Replay::new(graph.final_stage().tasks))
            } else {
                let spool_disk = runner.spool_disk.clone();
                FinalCommit::Held(ResultSpool::new(graph.final_stage().tasks, spool_disk))
            },
            lost: HashSet::new(),
            next_worker: 0,
            report,
            last_attempt: 0,
        };
        let end = run.drive(&mut event_rx).await;
        run.finish(end).await
    }

    async fn drive(
        &mut self,
        event_rx: &mut mpsc::UnboundedReceiver<TaskEvent>,
    ) -> Result<(), Stop> {
        let all: Vec<(usize, usize)> = self
            .graph
            .stages
            .iter()
            .flat_map(|s| (0..s.tasks).map(move |p| (s.id, p)))
            .collect();
        self.send_tasks(all).await;
        let mut lost = self.watch_losses();
        loop {
            if self.table.committed.iter().all(|&c| c) {
                return Ok(());
            }
            let handled = self.lost.len();
            tokio::select! {
                biased;
                event = event_rx.recv() => match event {
                    Some(TaskEvent::Succeeded(task)) => self.succeeded(task),
                    Some(TaskEvent::Failed(failure)) => self.failed(failure).await?,
                    None => return Err(Stop::Failed(Status::internal("task monitors gone"))),
                },
                item = self.finals.next(), if !self.finals.is_empty() => {
                    if let Some(item) = item {
                        self.final_item(item).await?;
                    }
                }
                _ = self.tx.closed() => return Err(Stop::ClientGone),
                url = &mut lost => {
                    let failure = TaskFailure::new(
                        Status::unavailable(format!("worker {url} stopped answering health probes")),
                        Some(url),
                    );
                    self.failed(failure).await?;
                }
            }
            if self.lost.len() != handled {
                lost = self.watch_losses();
            }
        }
    }

    /// Resolves with the first worker of the job found lost, other than
    /// those whose loss was handled.
    fn watch_losses(&self) -> Pin<Box<dyn Future<Output = String> + Send>> {
        let watched: Vec<String> = self
            .table
            .workers()
            .into_iter()
            .filter(|w| !self.lost.contains(w))
            .collect();
        let health = self.runner.health.clone();
        Box::pin(async move { health.first_lost(&watched).await })
    }

    fn succeeded(&mut self, task: TaskRef) {
        let slot = self.table.slot_mut(task.stage, task.partition);
        if slot.attempt == task.attempt && !slot.finished {
            slot.finished = true;
            self.progress.task_finished();
        }
    }

    async fn final_item(&mut self, (partition, attempt, item): FinalItem) -> Result<(), Stop> {
        let final_stage = self.graph.final_stage().id;
        if self.table.slot(final_stage, partition).attempt != attempt
            || self.table.committed[partition]
        {
            return Ok(());
        }
        match item {
            Some(Ok((message, rows))) => match &mut self.commit {
                FinalCommit::Held(spool) => {
                    spool.hold(partition, message, rows).map_err(Stop::Failed)
                }
                FinalCommit::Forwarded(replay) => {
                    let new = replay
                        .admit(partition, rows, message.data_body.len())
                        .map_err(Stop::Failed)?;
                    if new {
                        self.send(message, rows).await?;
                    }
                    Ok(())
                }
            },
            Some(Err(e)) => {
                let failure = TaskFailure {
                    derived: true,
                    task: Some(TaskRef {
                        stage: final_stage,
                        partition,
                        attempt,
                    }),
                    ..TaskFailure::new(to_status(&e), None)
                };
                self.failed(failure).await
            }
            None => {
                self.table.committed[partition] = true;
                let held = match &mut self.commit {
                    FinalCommit::Forwarded(replay) => {
                        return replay.finish(partition).map_err(Stop::Failed)
                    }
                    FinalCommit::Held(spool) => spool.release(partition),
                };
                for held in held {
                    let (message, rows) = held.map_err(Stop::Failed)?;
                    self.send(message, rows).await?;
                }
                Ok(())
            }
        }
    }

    async fn send(&mut self, message: FlightData, rows: u64) -> Result<(), Stop> {
        if self.tx.send(Ok(message)).await.is_err() {
            return Err(Stop::ClientGone);
        }
        self.report.rows += rows;
        Ok(())
    }

    /// Handles a failure: the query's own ends the run; a lost worker or a
    /// broken read runs the affected tasks again.
    async fn failed(&mut self, failure: TaskFailure) -> Result<(), Stop> {
        if let Some(task) = failure.task {
            let slot = self.table.slot(task.stage, task.partition);
            if slot.attempt != task.attempt {
                return Ok(()); // a report of an attempt already replaced
            }
        }
        if is_query_error(failure.status.code()) && failure.lost_worker.is_none() {
            return Err(Stop::Failed(failure.status));
        }
        if let Some(url) = &failure.lost_worker {
            self.runner.health.mark_lost(url);
            self.lost.insert(url.clone());
        }
        let probed = self.runner.health.probe(&self.table.workers()).await;
        let newly_lost = probed.iter().any(|url| !self.lost.contains(url));
        self.lost.extend(probed);
        // As in the default mode: a task's own failure (a panic, an error
        // in the data) is the query's unless a worker went away or the
        // failure says a connection or stream was cut.
        let retriable = failure.lost_worker.is_some()
            || newly_lost
            || matches!(failure.status.code(), Code::Unavailable | Code::Aborted);
        if !retriable {
            return Err(Stop::Failed(failure.status));
        }
        // A finished task's failure is its stream's: its worker went away,
        // which the lost set already says.
        let failed = failure
            .task
            .filter(|t| !self.table.slot(t.stage, t.partition).finished)
            .map(|t| (t.stage, t.partition));
        let rerun = self.table.to_rerun(self.graph, &self.lost, failed);
        if rerun.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            job_id = self.ids.job_id,
            tasks = rerun.len(),
            "running {} of the job's {} tasks again: {}",
            rerun.len(),
            self.graph.task_count(),
            failure.status.message()
        );
        self.rerun(rerun.into_iter().collect(), &failure.status)
            .await
    }

    /// Stops `tasks` and starts their next attempts, on healthy workers.
    async fn rerun(&mut self, tasks: Vec<(usize, usize)>, cause: &Status) -> Result<(), Stop> {
        let healthy = self
            .runner
            .health
            .healthy(self.runner.resolver.get_urls())
            .into_iter()
            .filter(|w| !self.lost.contains(w))
            .collect::<Vec<_>>();
        if healthy.is_empty() {
            return Err(Stop::Failed(Status::unavailable(
                "no healthy worker is left to run the lost tasks on",
            )));
        }
        for &(stage, p) in &tasks {
            if let Some(monitor) = self.running.remove(&(stage, p)) {
                monitor.abort();
            }
            let slot = self.table.slot_mut(stage, p);
            self.progress.task_superseded(stage, p, slot.attempt);
            slot.attempt += 1;
            slot.finished = false;
            if slot.attempt >= self.runner.max_attempts {
                return Err(Stop::Failed(Status::unavailable(format!(
                    "{} (task s{stage}/p{p} gave up after {} attempts, \
                     --task-max-attempts)",
                    cause.message(),
                    slot.attempt
                ))));
            }
            if !healthy.contains(&slot.worker) {
                slot.worker = healthy[self.next_worker % healthy.len()].clone();
                self.next_worker += 1;
            }
            self.last_attempt = self.last_attempt.max(slot.attempt);
            if stage == self.graph.final_stage().id {
                match &mut self.commit {
                    FinalCommit::Forwarded(replay) => replay.restart(p),
                    FinalCommit::Held(spool) => spool.discard(p),
                }
            }
            self.report.tasks_rerun += 1;
        }
        metrics::counter!(crate::metrics::TASK_RERUNS).increment(tasks.len() as u64);
        self.send_tasks(tasks).await;
        Ok(())
    }

    /// Sends the current attempts of `tasks` (producers first) and opens
    /// the final ones' streams; a task that cannot be started is reported
    /// as a failure, handled like any other.
    async fn send_tasks(&mut self, tasks: Vec<(usize, usize)>) {
        let final_stage = self.graph.final_stage().id;
        for &(stage, p) in &tasks {
            if stage == final_stage {
                self.open_final(p);
            }
        }
        let engine = engine_build();
        let clients = self.runner.health.clients();
        let table = &self.table;
        let dispatches = tasks.iter().map(|&(stage, p)| {
            let slot = table.slot(stage, p);
            let locate = |s: usize, q: usize| {
                let input = table.slot(s, q);
                (input.worker.clone(), input.attempt)
            };
            let stage_def = &self.graph.stages[stage];
            let mut request = task_request(
                self.ids.job_id,
                slot.attempt,
                self.graph,
                stage_def,
                p,
                &locate,
                self.settings,
            );
            request.engine_build = engine.clone();
            request.own_url = slot.worker.clone();
            request.stream_secret = self.secret.bytes().to_vec();
            request.query_id = self.ids.query_id.to_string();
            let task = TaskRef {
                stage,
                partition: p,
                attempt: slot.attempt,
            };
            let started = dispatch(clients, slot.worker.clone(), request);
            async move { (task, started.await) }
        });
        let started = futures::future::join_all(dispatches).await;
        let mut failures = vec![];
        for (task, started) in started {
            match started {
                Ok((url, stream)) => {
                    let placed = self.runner.health.place_task(&url);
                    let events = self.events.clone();
                    let progress = Arc::clone(self.progress);
                    let slot =
                        progress.task_started(task.stage, task.partition, task.attempt, &url);
                    let monitor = self.monitors.spawn(async move {
                        let _counted_while_the_job_runs = placed;
                        watch(url, task, stream, events, (progress, slot)).await
                    });
                    self.running.insert((task.stage, task.partition), monitor);
                }
                Err(failure) => failures.push(TaskFailure {
                    task: Some(task),
                    ..failure
                }),
            }
        }
        for failure in failures {
            let _ = self.events.send(TaskEvent::Failed(failure));
        }
    }

    /// Reads the current attempt of final task `partition` into the spool.
    fn open_final(&mut self, partition: usize) {
        let final_stage = self.graph.final_stage().id;
        let slot = self.table.slot(final_stage, partition);
        let key = StreamKey {
            job_id: self.ids.job_id.to_string(),
            stage_id: final_stage as u32,
            partition: partition as u32,
            attempt: slot.attempt,
            channel: 0,
        };
        let ticket = self.secret.ticket(&key);
        let attempt = slot.attempt;
        let stream = fetch_raw_stream(
            self.runner.health.clients().clone(),
            slot.worker.clone(),
            key,
            ticket,
        )
        .map(move |item| (partition, attempt, Some(item)))
        .chain(futures::stream::once(
            async move { (partition, attempt, None) },
        ));
        self.finals.push(stream.boxed());
    }

    async fn finish(mut self, end: Result<(), Stop>) -> JobReport {
        // Dropping the status streams stops every task and frees the
        // retained outputs on the workers; a completed job's tasks first
        // report how they ended.
        if end.is_ok() {
            hold_until_reported(
                std::mem::take(&mut self.monitors),
                Arc::clone(self.progress),
            );
        }
        self.monitors.abort_all();
        self.report.placement = Some(self.table.placement());
        match end {
            Ok(()) => self.report.outcome = "completed",
            Err(Stop::ClientGone) => self.report.outcome = "cancelled: the client hung up",
            Err(Stop::Failed(status)) => {
                let _ = self.tx.send(Err(status)).await;
            }
        }
        if let FinalCommit::Held(spool) = &self.commit {
            metrics::counter!(crate::metrics::SPOOLED_BYTES).increment(spool.spooled_bytes);
        }
        if self.report.outcome != "completed" {
            let workers = self.table.workers();
            let clients = self.runner.health.clients().clone();
            for attempt in 0..=self.last_attempt {
                let request = CleanUpJobRequest {
                    job_id: self.ids.job_id.to_string(),
                    attempt,
                };
                tokio::spawn(clean_up_workers(request, workers.clone(), clients.clone()));
            }
        }
        self.report
    }
}

/// Watches one task attempt: its success, its failure, and after success
/// its status stream, held open because it owns the task's retained output:
/// the stream breaking means the worker, and the output, are gone.
async fn watch(
    url: String,
    task: TaskRef,
    mut stream: Streaming<TaskStatus>,
    events: mpsc::UnboundedSender<TaskEvent>,
    (progress, slot): (Arc<JobProgress>, RunSlot),
) {
    let lost = |url: &str, why: String| {
        TaskEvent::Failed(TaskFailure {
            task: Some(task),
            ..TaskFailure::new(
                Status::unavailable(format!("lost worker {url}: {why}")),
                Some(url.to_string()),
            )
        })
    };
    let message = stream.message().await;
    match &message {
        Ok(Some(status)) => progress.task_ended(slot, Some(status), ""),
        Ok(None) => progress.task_ended(slot, None, "the worker closed the task stream"),
        Err(e) => progress.task_ended(slot, None, e.message()),
    }
    let event = match message {
        Ok(Some(s)) if s.state() == TaskState::Succeeded => {
            metrics::counter!(crate::metrics::TASKS, "outcome" => "succeeded").increment(1);
            let _ = events.send(TaskEvent::Succeeded(task));
            match stream.message().await {
                Err(e) => lost(&url, e.message().to_string()),
                Ok(None) => lost(&url, "it closed a task stream".into()),
                Ok(Some(_)) => return std::future::pending().await,
            }
        }
        Ok(Some(s)) => {
            metrics::counter!(crate::metrics::TASKS, "outcome" => "failed").increment(1);
            tracing::debug!(
                "task s{}/p{}/a{} on {url}: {}",
                task.stage,
                task.partition,
                task.attempt,
                s.message
            );
            TaskEvent::Failed(TaskFailure {
                derived: s.upstream,
                task: Some(task),
                ..TaskFailure::new(Status::new(failure_code(&s), s.message), None)
            })
        }
        Ok(None) => lost(&url, "it closed a task stream".into()),
        Err(e) => {
            metrics::counter!(crate::metrics::TASKS, "outcome" => "lost").increment(1);
            lost(&url, e.message().to_string())
        }
    };
    let _ = events.send(event);
}
