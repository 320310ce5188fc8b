//! Starting one attempt of a job: one `RunTask` per task, producers before
//! consumers.
//!
//! Every task of the job runs at once (stages are pipelined through bounded
//! buffers) and is dispatched at once: a consumer asking for a stream its
//! producer has not registered yet waits for it on the worker (bounded).
//! Waiting for each stage's ACCEPTED before sending the next cost a round
//! trip per stage level, most of the run time of small many-stage queries.
//!
//! A `JobAttempt` owns its tasks: every RunTask status stream is held by a
//! monitor in its `JoinSet`, and dropping the attempt (job end, failure,
//! retry, client gone, timeout, a dispatch that stopped half-way) aborts the
//! monitors, which drops the streams, which stops the tasks and frees their
//! streams on every worker. A `CleanUpJob` call follows as a second line.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use futures::TryFutureExt;
use squadron_common::version::engine_build;
use squadron_net::client::PeerClients;
use squadron_net::stream::StreamSecret;
use squadron_proto::v1::{
    CleanUpJobRequest, RunTaskRequest, StageInput, TaskDefinition, TaskKey, TaskLocation,
    TaskState, TaskStatus,
};
use squadron_proto::PROTOCOL_VERSION;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tonic::{Code, Status, Streaming};

use super::placement::Placement;
use super::progress::{JobProgress, RunSlot};
use crate::cluster::WorkerHealth;
use squadron_planner::{JobGraph, Stage};

/// How long a worker may take to accept a task.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a task or a dispatch failed, and the worker that went away if that
/// is what happened.
#[derive(Debug, Clone)]
pub struct TaskFailure {
    pub status: Status,
    pub lost_worker: Option<String>,
    /// Only a failure to read another task's output: a symptom whose cause
    /// is usually reported by that task's own monitor.
    pub derived: bool,
    /// The task attempt that failed, when known.
    pub task: Option<TaskRef>,
}

impl TaskFailure {
    pub fn new(status: Status, lost_worker: Option<String>) -> Self {
        Self {
            status,
            lost_worker,
            derived: false,
            task: None,
        }
    }
}

/// One attempt of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskRef {
    pub stage: usize,
    pub partition: usize,
    pub attempt: u32,
}

/// One attempt of a job whose tasks all run; its failures arrive on
/// `failures`. Dropping it stops every task.
pub struct JobAttempt {
    pub job_id: String,
    pub attempt: u32,
    pub failures: mpsc::Receiver<TaskFailure>,
    monitors: JoinSet<()>,
    workers: Vec<String>,
    clients: PeerClients,
    completed: bool,
    /// Where the monitors record their tasks' ends.
    progress: Arc<JobProgress>,
}

impl JobAttempt {
    /// Marks the attempt as having delivered its whole output: every task
    /// succeeded and every stream was read, so ending it needs no cleanup
    /// calls.
    pub fn completed(&mut self) {
        self.completed = true;
    }
}

impl Drop for JobAttempt {
    fn drop(&mut self) {
        // Dropping a RunTask status stream stops that task and frees its
        // streams; the monitors hold them.
        if self.completed {
            let monitors = std::mem::take(&mut self.monitors);
            hold_until_reported(monitors, Arc::clone(&self.progress));
            return;
        }
        self.monitors.abort_all();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let request = CleanUpJobRequest {
                job_id: self.job_id.clone(),
                attempt: self.attempt,
            };
            let workers = std::mem::take(&mut self.workers);
            let clients = self.clients.clone();
            runtime.spawn(clean_up_workers(request, workers, clients));
        }
    }
}

/// How long a completed job waits for the final statuses of its tasks
/// (their metrics) after its output was read.
const STATUS_GRACE: Duration = Duration::from_secs(5);

/// Keeps the status streams of a completed job until every task reported
/// how it ended (a task's status comes just after its last row), then
/// drops them; in the background, so the client's answer ends at once.
pub(super) fn hold_until_reported(mut monitors: JoinSet<()>, progress: Arc<JobProgress>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        monitors.abort_all();
        return;
    };
    runtime.spawn(async move {
        progress.all_reported(STATUS_GRACE).await;
        monitors.abort_all();
        progress.job_ended();
        progress.record_stage_durations();
    });
}

pub(super) async fn clean_up_workers(
    request: CleanUpJobRequest,
    workers: Vec<String>,
    clients: PeerClients,
) {
    for url in workers {
        let result = match clients.worker(&url) {
            Ok(mut client) => client.clean_up_job(request.clone()).await.map(|_| ()),
            Err(e) => Err(Status::unavailable(e.to_string())),
        };
        if let Err(e) = result {
            tracing::debug!(
                job_id = request.job_id,
                url,
                "cleaning up the job failed: {}",
                e.message()
            );
        }
    }
}

/// Which job, and for log lines the query it runs.
#[derive(Debug, Clone, Copy)]
pub struct JobIds<'a> {
    pub job_id: &'a str,
    pub query_id: &'a str,
}

/// One attempt of a job: its number, and the secret that signs its stream
/// tickets (made by the runner, so the output can be fetched while the
/// tasks are still being dispatched).
#[derive(Debug, Clone)]
pub struct Attempt {
    pub number: u32,
    pub secret: StreamSecret,
}

/// Dispatches every task of `graph` as placed; returns once all are accepted.
pub async fn start_job(
    ids: JobIds<'_>,
    attempt: &Attempt,
    graph: &JobGraph,
    placement: &Placement,
    settings: &HashMap<String, String>,
    progress: &Arc<JobProgress>,
    health: &WorkerHealth,
) -> Result<JobAttempt, TaskFailure> {
    let JobIds { job_id, query_id } = ids;
    let clients = health.clients();
    let (failure_tx, failures) = mpsc::channel(graph.task_count().max(1));
    let secret_bytes = attempt.secret.bytes().to_vec();
    let attempt = attempt.number;
    let mut job = JobAttempt {
        job_id: job_id.to_string(),
        attempt,
        failures,
        monitors: JoinSet::new(),
        workers: placement.workers_used(),
        clients: clients.clone(),
        completed: false,
        progress: Arc::clone(progress),
    };
    let engine = engine_build();
    // Every task at once, producers first in sending order: a consumer
    // that starts before its producers registered their streams waits for
    // them (bounded) on the worker, so no stage waits for another's
    // ACCEPTED round trip.
    let accepts = graph.stages.iter().flat_map(|stage| {
        (0..stage.tasks).map(|partition| {
            let url = placement.worker_of(stage.id, partition).to_string();
            let locate = |s: usize, p: usize| (placement.worker_of(s, p).to_string(), attempt);
            let mut request =
                task_request(job_id, attempt, graph, stage, partition, &locate, settings);
            request.engine_build = engine.clone();
            request.own_url = url.clone();
            request.stream_secret = secret_bytes.clone();
            request.query_id = query_id.to_string();
            let task = (stage.id, partition);
            dispatch(clients, url, request).map_ok(move |(url, stream)| (task, url, stream))
        })
    });
    // On failure `job` is dropped here: the tasks accepted so far stop
    // with their status streams.
    for ((stage, partition), url, stream) in try_join_all(accepts).await? {
        let progress = Arc::clone(progress);
        let slot = progress.task_started(stage, partition, attempt, &url);
        let placed = health.place_task(&url);
        let failure_tx = failure_tx.clone();
        job.monitors.spawn(async move {
            let _counted_while_the_job_runs = placed;
            monitor(url, stream, failure_tx, progress, slot).await
        });
    }
    Ok(job)
}

/// Sends one task and waits for ACCEPTED.
pub(super) async fn dispatch(
    clients: &PeerClients,
    url: String,
    request: RunTaskRequest,
) -> Result<(String, Streaming<TaskStatus>), TaskFailure> {
    let task = task_name(request.key.as_ref(), request.attempt);
    let mut request = request;
    request.trace_context = squadron_common::traces::current_context();
    let mut client = clients
        .worker(&url)
        .map_err(|e| TaskFailure::new(Status::invalid_argument(e.to_string()), None))?;
    let accepted = async {
        let mut stream = client.run_task(request).await?.into_inner();
        match stream.message().await? {
            Some(s) if s.state() == TaskState::Accepted => Ok(stream),
            Some(s) => Err(Status::internal(format!(
                "worker answered {:?}: {}",
                s.state(),
                s.message
            ))),
            None => Err(Status::unavailable("worker closed the task stream")),
        }
    };
    let status = match tokio::time::timeout(ACCEPT_TIMEOUT, accepted).await {
        Ok(Ok(stream)) => return Ok((url, stream)),
        Ok(Err(status)) => Status::new(
            status.code(),
            format!("starting task {task} on {url}: {}", status.message()),
        ),
        Err(_) => Status::unavailable(format!(
            "worker {url} did not accept task {task} in {ACCEPT_TIMEOUT:?}"
        )),
    };
    let lost = !is_query_error(status.code());
    if lost {
        clients.forget_if_broken(&url, Code::Unavailable);
    }
    Err(TaskFailure::new(status, lost.then_some(url)))
}

/// Failures that the same query would meet again on any worker: a live
/// worker (or the coordinator) refused or failed it on purpose. Anything
/// else (no connection, a reset, silence) may be a lost worker.
pub fn is_query_error(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::Unimplemented
            | Code::ResourceExhausted
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::DeadlineExceeded
    )
}

/// Watches one task. A failure is reported; after success the status
/// stream is held open until the job ends, because it owns the task's
/// output streams on the worker.
async fn monitor(
    url: String,
    mut stream: Streaming<TaskStatus>,
    failures: mpsc::Sender<TaskFailure>,
    progress: Arc<JobProgress>,
    slot: RunSlot,
) {
    let message = stream.message().await;
    match &message {
        Ok(Some(status)) => progress.task_ended(slot, Some(status), ""),
        Ok(None) => progress.task_ended(slot, None, "the worker closed the task stream"),
        Err(e) => progress.task_ended(slot, None, e.message()),
    }
    let outcome = match &message {
        Ok(Some(s)) if s.state() == TaskState::Succeeded => "succeeded",
        Ok(Some(_)) => "failed",
        _ => "lost",
    };
    metrics::counter!(crate::metrics::TASKS, "outcome" => outcome).increment(1);
    let failure = match message {
        Ok(Some(s)) if s.state() == TaskState::Succeeded => {
            progress.task_finished();
            std::future::pending::<()>().await;
            return;
        }
        Ok(Some(s)) => {
            // The client gets the task's own error, as single-node
            // DataFusion words it; where it happened is for the log.
            tracing::warn!(
                "task {} on {url} {:?}: {}",
                task_name(s.key.as_ref(), s.attempt),
                s.state(),
                s.message
            );
            TaskFailure {
                derived: s.upstream,
                ..TaskFailure::new(Status::new(failure_code(&s), s.message), None)
            }
        }
        Ok(None) => TaskFailure::new(
            Status::unavailable(format!("worker {url} closed a task stream")),
            Some(url),
        ),
        Err(e) => TaskFailure::new(
            Status::unavailable(format!("lost worker {url}: {}", e.message())),
            Some(url),
        ),
    };
    let _ = failures.try_send(failure);
}

pub(super) fn failure_code(status: &TaskStatus) -> Code {
    match Code::from(status.code) {
        Code::Ok => Code::Internal,
        code => code,
    }
}

/// The request of one task attempt; `locate` says where each input task's
/// current attempt runs.
pub(super) fn task_request(
    job_id: &str,
    attempt: u32,
    graph: &JobGraph,
    stage: &Stage,
    partition: usize,
    locate: &dyn Fn(usize, usize) -> (String, u32),
    settings: &HashMap<String, String>,
) -> RunTaskRequest {
    let mut peers: Vec<String> = vec![];
    let mut peer_index = |url: &str| match peers.iter().position(|p| p == url) {
        Some(i) => i as u32,
        None => {
            peers.push(url.to_string());
            (peers.len() - 1) as u32
        }
    };
    let inputs = stage
        .inputs
        .iter()
        .map(|&input| StageInput {
            stage_id: input as u32,
            tasks: (0..graph.stages[input].tasks)
                .map(|p| {
                    let (url, attempt) = locate(input, p);
                    TaskLocation {
                        partition: p as u32,
                        attempt,
                        peer: peer_index(&url),
                    }
                })
                .collect(),
        })
        .collect();
    RunTaskRequest {
        key: Some(TaskKey {
            job_id: job_id.to_string(),
            stage_id: stage.id as u32,
            partition: partition as u32,
        }),
        attempt,
        definition: Some(TaskDefinition {
            plan: stage.encoded.to_vec(),
            inputs,
            settings: settings.clone(),
        }),
        peers,
        protocol_version: PROTOCOL_VERSION,
        engine_build: String::new(),
        own_url: String::new(),
        stream_secret: vec![],
        query_id: String::new(),
        trace_context: Default::default(),
    }
}

pub(super) fn task_name(key: Option<&TaskKey>, attempt: u32) -> String {
    match key {
        Some(k) => format!("s{}/p{}/a{attempt}", k.stage_id, k.partition),
        None => "?".into(),
    }
}
