//! Turns a `RunTaskRequest` into a running task: decode the stage plan, bind
//! its stage inputs to peers, register the output channels, execute the
//! partition and drain it into the channels.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use squadron_proto::v1::output_distribution::Kind;
use squadron_proto::v1::{RunTaskRequest, StageInput, TaskKey, TaskState, TaskStatus};
use squadron_proto::StreamKey;
use tokio::sync::oneshot;
use tonic::Status;

use super::registry::{AttemptKey, TaskRegistry};
use crate::client::PeerClients;
use crate::error::status_code;
use crate::plan::{decode_plan, StageBinding, StageReadExec};
use crate::stream::{write_output, Router, StreamManager};

/// A task ready to run: its output channels are registered.
pub struct PreparedTask {
    key: AttemptKey,
    plan: Arc<dyn ExecutionPlan>,
    router: Router,
    senders: Vec<tokio::sync::mpsc::Sender<crate::stream::BatchResult>>,
}

impl PreparedTask {
    pub fn key(&self) -> &AttemptKey {
        &self.key
    }
}

#[derive(Clone)]
pub struct TaskRunner {
    ctx: SessionContext,
    streams: StreamManager,
    tasks: TaskRegistry,
    clients: PeerClients,
}

impl TaskRunner {
    pub fn new(streams: StreamManager, tasks: TaskRegistry, clients: PeerClients) -> Self {
        Self {
            ctx: SessionContext::new_with_config(task_session_config()),
            streams,
            tasks,
            clients,
        }
    }

    /// Checks and decodes a request; registers the task's output channels.
    pub fn prepare(&self, request: RunTaskRequest) -> Result<PreparedTask, Status> {
        let key = request
            .key
            .as_ref()
            .filter(|k| !k.job_id.is_empty())
            .ok_or_else(|| Status::invalid_argument("RunTask needs a task key with a job id"))?;
        let definition = request
            .definition
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("RunTask needs a task definition"))?;
        let output = definition.output.unwrap_or_default();
        let channels = output.channels.max(1) as usize;
        let plan = decode_plan(&definition.plan, &self.ctx.task_ctx())
            .map_err(|e| Status::invalid_argument(format!("cannot decode the task plan: {e}")))?;
        let plan = bind_inputs(plan, key, &definition.inputs, &request.peers, self)
            .map_err(|e| Status::invalid_argument(format!("cannot bind task inputs: {e}")))?;
        let partition = key.partition as usize;

        let (plan, router) = match output.kind() {
            Kind::Single if channels == 1 => (plan, Router::Single),
            Kind::Single => return Err(Status::invalid_argument("SINGLE output has one channel")),
            Kind::Broadcast => (plan, Router::Broadcast),
            Kind::Repartition => {
                let Some(repartition) = plan.downcast_ref::<RepartitionExec>() else {
                    return Err(Status::invalid_argument(
                        "REPARTITION output needs a RepartitionExec plan root",
                    ));
                };
                let partitioning = repartition.partitioning().clone();
                if partitioning.partition_count() != channels {
                    return Err(Status::invalid_argument(format!(
                        "repartition to {} partitions but {channels} channels",
                        partitioning.partition_count()
                    )));
                }
                let input = Arc::clone(repartition.input());
                let inputs = input.output_partitioning().partition_count();
                let router = Router::repartition(partitioning, partition, inputs)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                (input, router)
            }
        };
        let partitions = plan.output_partitioning().partition_count();
        tracing::debug!(
            job_id = key.job_id,
            stage = key.stage_id,
            partition,
            "task plan:\n{}",
            datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
        );
        if partition >= partitions {
            return Err(Status::invalid_argument(format!(
                "task partition {partition} but the stage has {partitions}"
            )));
        }

        let attempt = AttemptKey {
            job_id: key.job_id.clone(),
            stage_id: key.stage_id,
            partition: key.partition,
            attempt: request.attempt,
        };
        let senders = (0..channels as u32)
            .map(|channel| {
                let stream = StreamKey {
                    job_id: key.job_id.clone(),
                    stage_id: key.stage_id,
                    partition: key.partition,
                    attempt: request.attempt,
                    channel,
                };
                self.streams.register(stream, plan.schema())
            })
            .collect();
        Ok(PreparedTask {
            key: attempt,
            plan,
            router,
            senders,
        })
    }

    /// Starts a prepared task. The receiver gets its final status; dropping
    /// the returned guard stops the task.
    pub fn start(&self, task: PreparedTask) -> (oneshot::Receiver<TaskStatus>, AbortOnDrop) {
        let (done_tx, done_rx) = oneshot::channel();
        let key = task.key.clone();
        let ctx = self.ctx.task_ctx();
        let tasks = self.tasks.clone();
        let handle = tokio::spawn(async move {
            let result = async {
                let stream = task.plan.execute(task.key.partition as usize, ctx)?;
                write_output(stream, task.router, task.senders).await
            }
            .await;
            tasks.finished(&task.key);
            tracing::debug!(task = ?task.key, ?result, "task finished");
            let _ = done_tx.send(final_status(&task.key, result));
        });
        self.tasks.insert(key, handle.abort_handle());
        (done_rx, AbortOnDrop(handle.abort_handle()))
    }
}

/// The session tasks execute in.
pub fn task_session_config() -> SessionConfig {
    let mut config = SessionConfig::new();
    // Each task runs one partition of its own plan instance; with work
    // stealing, that lone partition would also read its (never executed)
    // siblings' files, and every task would scan everything.
    config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    config
}

/// Stops a task when its status stream is dropped: the coordinator hanging
/// up is how a job is cancelled.
pub struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn status(key: &AttemptKey, state: TaskState) -> TaskStatus {
    TaskStatus {
        key: Some(TaskKey {
            job_id: key.job_id.clone(),
            stage_id: key.stage_id,
            partition: key.partition,
        }),
        attempt: key.attempt,
        state: state as i32,
        message: String::new(),
        output_rows: 0,
        code: 0,
    }
}

fn final_status(key: &AttemptKey, result: Result<u64>) -> TaskStatus {
    match result {
        Ok(rows) => TaskStatus {
            output_rows: rows,
            ..status(key, TaskState::Succeeded)
        },
        Err(e) => TaskStatus {
            message: e.to_string(),
            code: status_code(&e) as i32,
            ..status(key, TaskState::Failed)
        },
    }
}

/// Replaces each `StageReadExec` placeholder by one bound to the upstream
/// task locations of this request.
fn bind_inputs(
    plan: Arc<dyn ExecutionPlan>,
    key: &TaskKey,
    inputs: &[StageInput],
    peers: &[String],
    runner: &TaskRunner,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(read) = node.downcast_ref::<StageReadExec>() else {
            return Ok(Transformed::no(node));
        };
        let input = inputs
            .iter()
            .find(|i| i.stage_id == read.stage_id())
            .ok_or_else(|| {
                DataFusionError::Plan(format!("no locations for input stage {}", read.stage_id()))
            })?;
        let upstream = input
            .tasks
            .iter()
            .map(|t| {
                let url = peers.get(t.peer as usize).ok_or_else(|| {
                    DataFusionError::Plan(format!("peer {} not in the peer list", t.peer))
                })?;
                Ok((url.clone(), t.attempt))
            })
            .collect::<Result<Vec<_>>>()?;
        let bound = read.bind(StageBinding {
            job_id: key.job_id.clone(),
            consumer_partition: key.partition,
            upstream,
            clients: runner.clients.clone(),
            local: runner.streams.clone(),
        })?;
        Ok(Transformed::yes(Arc::new(bound) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}
