//! Running a job: one `RunTask` per task, producers before consumers, then
//! the job output over the final stage's streams.
//!
//! Every task of the job runs at once (stages are pipelined through bounded
//! buffers), so a stage is dispatched only after each of its input tasks was
//! ACCEPTED: its output streams then exist when consumers ask for them.

use std::time::Duration;

use futures::future::try_join_all;
use squadron_proto::v1::output_distribution::Kind;
use squadron_proto::v1::{
    OutputDistribution, RunTaskRequest, StageInput, TaskDefinition, TaskKey, TaskLocation,
    TaskState, TaskStatus,
};
use squadron_worker::client::PeerClients;
use squadron_worker::plan::encode_plan;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::{Status, Streaming};

use super::placement::Placement;
use crate::planner::{JobGraph, Stage, StageOutput};

/// How long a worker may take to accept a task.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// A job whose tasks all run; its failures arrive on `failures`.
pub struct RunningJob {
    pub job_id: String,
    pub failures: mpsc::Receiver<Status>,
    monitors: Vec<JoinHandle<()>>,
    workers: Vec<String>,
    clients: PeerClients,
}

impl RunningJob {
    /// Stops whatever still runs and drops the job's streams on every worker.
    pub fn clean_up(self) {
        for monitor in &self.monitors {
            // Dropping a RunTask status stream stops that task.
            monitor.abort();
        }
        clean_up_workers(self.job_id, self.workers, self.clients);
    }
}

fn clean_up_workers(job_id: String, workers: Vec<String>, clients: PeerClients) {
    tokio::spawn(async move {
        for url in workers {
            let request = squadron_proto::v1::CleanUpJobRequest {
                job_id: job_id.clone(),
            };
            let result = match clients.worker(&url) {
                Ok(mut client) => client.clean_up_job(request).await.map(|_| ()),
                Err(e) => Err(Status::unavailable(e.to_string())),
            };
            if let Err(e) = result {
                tracing::warn!(job_id, url, "cleaning up the job failed: {}", e.message());
            }
        }
    });
}

/// Dispatches every task of `graph` as placed; returns once all are accepted.
pub async fn start_job(
    job_id: &str,
    graph: &JobGraph,
    placement: &Placement,
    clients: &PeerClients,
) -> Result<RunningJob, Status> {
    let (failure_tx, failures) = mpsc::channel(1);
    let mut job = RunningJob {
        job_id: job_id.to_string(),
        failures,
        monitors: vec![],
        workers: placement.workers_used(),
        clients: clients.clone(),
    };
    for stage in &graph.stages {
        let plan = encode_plan(stage.plan.clone())
            .map_err(|e| Status::internal(format!("encoding stage {}: {e}", stage.id)))?;
        let accepts = (0..stage.tasks).map(|partition| {
            let request = task_request(job_id, graph, stage, partition, placement, &plan);
            let url = placement.worker_of(stage.id, partition).to_string();
            dispatch(clients, url, request)
        });
        match try_join_all(accepts).await {
            Ok(streams) => {
                for (url, stream) in streams {
                    job.monitors
                        .push(tokio::spawn(monitor(url, stream, failure_tx.clone())));
                }
            }
            Err(e) => {
                job.clean_up();
                return Err(e);
            }
        }
    }
    Ok(job)
}

/// Sends one task and waits for ACCEPTED.
async fn dispatch(
    clients: &PeerClients,
    url: String,
    request: RunTaskRequest,
) -> Result<(String, Streaming<TaskStatus>), Status> {
    let task = describe(&request);
    let mut client = clients
        .worker(&url)
        .map_err(|e| Status::unavailable(e.to_string()))?;
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
    match tokio::time::timeout(ACCEPT_TIMEOUT, accepted).await {
        Ok(Ok(stream)) => Ok((url, stream)),
        Ok(Err(status)) => Err(Status::new(
            status.code(),
            format!("starting task {task} on {url}: {}", status.message()),
        )),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "worker {url} did not accept task {task} in {ACCEPT_TIMEOUT:?}"
        ))),
    }
}

/// Watches one task until it ends; reports a failure or a lost worker.
async fn monitor(url: String, mut stream: Streaming<TaskStatus>, failures: mpsc::Sender<Status>) {
    let failure = match stream.message().await {
        Ok(Some(s)) if s.state() == TaskState::Succeeded => return,
        Ok(Some(s)) => Status::new(
            failure_code(&s),
            format!(
                "task {} on {url} {:?}: {}",
                task_name(s.key.as_ref(), s.attempt),
                s.state(),
                s.message
            ),
        ),
        Ok(None) => Status::unavailable(format!("worker {url} closed a task stream")),
        Err(e) => Status::unavailable(format!("lost worker {url}: {}", e.message())),
    };
    let _ = failures.try_send(failure);
}

fn failure_code(status: &TaskStatus) -> tonic::Code {
    match tonic::Code::from(status.code) {
        tonic::Code::Ok => tonic::Code::Internal,
        code => code,
    }
}

fn task_request(
    job_id: &str,
    graph: &JobGraph,
    stage: &Stage,
    partition: usize,
    placement: &Placement,
    plan: &[u8],
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
                .map(|p| TaskLocation {
                    partition: p as u32,
                    attempt: 0,
                    peer: peer_index(placement.worker_of(input, p)),
                })
                .collect(),
        })
        .collect();
    let (kind, channels) = match stage.output {
        StageOutput::JobOutput => (Kind::Single, 1),
        StageOutput::Repartition { channels } => (Kind::Repartition, channels),
        StageOutput::Broadcast { channels: 1 } => (Kind::Single, 1),
        StageOutput::Broadcast { channels } => (Kind::Broadcast, channels),
    };
    RunTaskRequest {
        key: Some(TaskKey {
            job_id: job_id.to_string(),
            stage_id: stage.id as u32,
            partition: partition as u32,
        }),
        attempt: 0,
        definition: Some(TaskDefinition {
            plan: plan.to_vec(),
            inputs,
            output: Some(OutputDistribution {
                kind: kind as i32,
                channels: channels as u32,
            }),
        }),
        peers,
    }
}

fn describe(request: &RunTaskRequest) -> String {
    task_name(request.key.as_ref(), request.attempt)
}

fn task_name(key: Option<&TaskKey>, attempt: u32) -> String {
    match key {
        Some(k) => format!("s{}/p{}/a{attempt}", k.stage_id, k.partition),
        None => "?".into(),
    }
}
