//! Turns a `RunTaskRequest` into a running task: decode the stage plan, bind
//! its stage inputs to peers, register the output channels, execute the
//! partition and drain it into the channels.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::FutureExt;
use squadron_common::error::Error;
use squadron_exec::plan::{StageOutput, StageWriteExec};
use squadron_proto::v1::{RunTaskRequest, StageInput, TaskKey, TaskState, TaskStatus};
use squadron_proto::{StreamKey, PROTOCOL_VERSION};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::failpoint::{Failpoint, Fault};
use super::measure::{task_metrics, with_task_memory, SharedNodes, TaskMemory, TaskShare};
use super::missing_files::missing_file;
use super::own_state::own_state_where_run_again;
use super::registry::{AttemptKey, TaskEntry, TaskRegistry};
use super::stage_plans::{StageAttempt, StagePlanLease, StagePlans};
use squadron_common::error::{is_upstream, status_code};
use squadron_common::version::engine_build;
use squadron_exec::configured_functions::refresh_configured_functions;
use squadron_exec::plan::guard::{check_plan, DataRoots};
use squadron_exec::plan::{decode_plan, StageBinding, StageReadExec};
use squadron_exec::squadron_options::{with_squadron_options, RetryPolicy, SquadronOptions};
use squadron_exec::stream::{
    output_channels_with, write_output, OutputCount, OutputMode, OutputWriter, RetainedMemory,
    Router, StreamManager,
};
use squadron_exec::write::TableWriteExec;
use squadron_net::client::PeerClients;
use squadron_net::stream::StreamSecret;
use squadron_task_rewrites::with_task_rewrites;

/// A task ready to run: its registry entry is reserved and its output
/// streams are registered.
pub struct PreparedTask {
    key: AttemptKey,
    plan: Arc<dyn ExecutionPlan>,
    router: Router,
    writer: OutputWriter,
    stream_keys: Vec<StreamKey>,
    entry: TaskEntry,
    task_ctx: Arc<TaskContext>,
    /// The URL the coordinator knows this worker by (for errors).
    own_url: String,
    /// Shares the decoded stage plan with this stage's other tasks here
    /// until the task ends.
    stage_plan: StagePlanLease,
    /// Set by the test failpoint: the task panics when it starts.
    panic: bool,
    /// The task's share of the worker's memory, for its peak.
    memory: Arc<TaskMemory>,
    /// The operators it shares with the stage's other tasks here.
    shared: SharedNodes,
}

impl PreparedTask {
    pub fn key(&self) -> &AttemptKey {
        &self.key
    }
}

/// The owner of a started task: dropping it stops the task (if it still
/// runs) and drops its output streams nobody fetched.
pub struct TaskOwner {
    token: CancellationToken,
    stream_keys: Vec<StreamKey>,
    streams: StreamManager,
}

impl Drop for TaskOwner {
    fn drop(&mut self) {
        self.token.cancel();
        self.streams.drop_keys(&self.stream_keys);
    }
}

/// What this worker's tasks share: the runtime (memory pool, disk
/// manager, object stores), the in-memory share of retained outputs, and
/// the count of bytes spilled (for the metrics).
pub struct TaskResources {
    pub runtime: Arc<RuntimeEnv>,
    pub retained_memory: Arc<RetainedMemory>,
    pub spilled: Arc<AtomicU64>,
}

#[derive(Clone)]
pub struct TaskRunner {
    ctx: SessionContext,
    streams: StreamManager,
    tasks: TaskRegistry,
    clients: PeerClients,
    failpoint: Option<Arc<Failpoint>>,
    data_roots: DataRoots,
    stage_plans: StagePlans,
    retained_memory: Arc<RetainedMemory>,
    /// Bytes of exchange output spilled by this worker's tasks.
    spilled: Arc<AtomicU64>,
}

impl TaskRunner {
    pub fn new(
        streams: StreamManager,
        tasks: TaskRegistry,
        stage_plans: StagePlans,
        clients: PeerClients,
        resources: TaskResources,
        failpoint: Option<Arc<Failpoint>>,
        data_roots: DataRoots,
    ) -> Self {
        let TaskResources {
            runtime,
            retained_memory,
            spilled,
        } = resources;
        let ctx = SessionContext::new_with_config_rt(task_session_config(), runtime);
        ctx.register_udf(
            squadron_exec::single_row::scalar_subquery_value()
                .as_ref()
                .clone(),
        );
        for udf in squadron_exec::session_names::session_name_functions() {
            ctx.register_udf(udf.as_ref().clone());
        }
        Self {
            ctx,
            streams,
            tasks,
            clients,
            failpoint,
            data_roots,
            stage_plans,
            retained_memory,
            spilled,
        }
    }

    /// Checks and decodes a request; reserves the task and registers its
    /// output streams.
    pub fn prepare(&self, request: RunTaskRequest) -> Result<PreparedTask, Error> {
        check_versions(&request)?;
        let fault = self.failpoint.as_ref().and_then(|f| f.on_task());
        if fault == Some(Fault::Crash) {
            tracing::error!("failpoint: crashing the worker on this task");
            std::process::abort();
        }
        let key = request
            .key
            .as_ref()
            .filter(|k| !k.job_id.is_empty())
            .ok_or_else(|| Error::invalid_argument("RunTask needs a task key with a job id"))?;
        let definition = request
            .definition
            .as_ref()
            .ok_or_else(|| Error::invalid_argument("RunTask needs a task definition"))?;
        let secret = StreamSecret::from_request(&request.stream_secret)?;
        let (task_ctx, memory) = with_task_memory(&*self.task_context(&definition.settings)?);
        let stage = StageAttempt {
            job_id: key.job_id.clone(),
            stage_id: key.stage_id,
            attempt: request.attempt,
        };
        let (plan, stage_plan) = self
            .stage_plans
            .get_or_decode(stage, &definition.plan, || {
                let plan = decode_plan(&definition.plan, &task_ctx).map_err(|e| {
                    Error::invalid_argument(format!("cannot decode the task plan: {e}"))
                })?;
                check_plan(&plan, &self.data_roots)?;
                Ok(plan)
            })?;
        let shared = SharedNodes::of(&plan);
        let decoded = match plan.downcast_ref::<StageWriteExec>() {
            Some(write) => Arc::clone(write.task_plan()),
            None => Arc::clone(&plan),
        };
        let plan = bind_inputs(
            plan,
            key,
            &definition.inputs,
            &request.peers,
            &request.own_url,
            &secret,
            self,
        )
        .map_err(|e| Error::invalid_argument(format!("cannot bind task inputs: {e}")))?;
        let plan = bind_writes(plan, request.attempt)
            .map_err(|e| Error::invalid_argument(format!("cannot bind task writes: {e}")))?;
        let partition = key.partition as usize;

        // The plan's root says where its rows go.
        let Some(write) = plan.downcast_ref::<StageWriteExec>() else {
            return Err(Error::invalid_argument(
                "a task plan is rooted at the StageWriteExec of its stage",
            ));
        };
        // The job output is read once, by the coordinator, which runs a
        // lost final task again itself: only exchanges are retained.
        let exchange = write.output() != StageOutput::JobOutput;
        let (channels, router) = match write.output() {
            StageOutput::JobOutput => (1, Router::Single),
            StageOutput::Broadcast { channels: 1 } => (1, Router::Single),
            StageOutput::Broadcast { channels } => (channels, Router::Broadcast),
            StageOutput::Repartition { channels } => {
                // `StageWriteExec` checked its input is this repartition.
                let Some(repartition) = write.input().downcast_ref::<RepartitionExec>() else {
                    return Err(Error::internal(
                        "a repartitioning write without its repartition",
                    ));
                };
                let partitioning = repartition.partitioning().clone();
                let inputs = write.task_plan().output_partitioning().partition_count();
                let router = Router::repartition(partitioning, partition, inputs)
                    .map_err(|e| Error::invalid_argument(e.to_string()))?;
                (channels, router)
            }
        };
        // Each task its own dynamic filters (published by its build sides,
        // held by its scans) and the other rewrites of its own plan
        // (`squadron_task_rewrites`).
        let plan = with_task_rewrites(
            Arc::clone(write.task_plan()),
            task_ctx.session_config().options(),
        )
        .map_err(|e| Error::internal(e.to_string()))?;
        // What the copies made above re-run of the shared plan, each task
        // runs on its own state.
        let plan = own_state_where_run_again(plan, &decoded)
            .map_err(|e| Error::internal(e.to_string()))?;
        let partitions = plan.output_partitioning().partition_count();
        tracing::debug!(
            job_id = key.job_id,
            stage = key.stage_id,
            partition,
            "task plan:\n{}",
            datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
        );
        if partition >= partitions {
            return Err(Error::invalid_argument(format!(
                "task partition {partition} but the stage has {partitions}"
            )));
        }

        let attempt = AttemptKey {
            job_id: key.job_id.clone(),
            stage_id: key.stage_id,
            partition: key.partition,
            attempt: request.attempt,
        };
        let entry = self.tasks.reserve(attempt.clone())?;
        let reservation = MemoryConsumer::new(format!("exchange output {attempt}"))
            .register(task_ctx.memory_pool());
        let (writer, readers) =
            output_channels_with(channels, reservation, self.output_mode(&task_ctx, exchange));
        let streams: Vec<(StreamKey, _)> = readers
            .into_iter()
            .enumerate()
            .map(|(channel, reader)| {
                let stream = StreamKey {
                    job_id: key.job_id.clone(),
                    stage_id: key.stage_id,
                    partition: key.partition,
                    attempt: request.attempt,
                    channel: channel as u32,
                };
                (stream, reader)
            })
            .collect();
        let stream_keys = streams.iter().map(|(k, _)| k.clone()).collect();
        self.streams.register(streams, &plan.schema(), &secret)?;
        Ok(PreparedTask {
            key: attempt,
            plan,
            router,
            writer,
            stream_keys,
            entry,
            task_ctx,
            own_url: request.own_url.clone(),
            stage_plan,
            panic: fault == Some(Fault::Panic),
            memory,
            shared,
        })
    }

    /// Starts a prepared task. The receiver gets its final status; dropping
    /// the returned owner stops the task and drops its unread streams.
    pub fn start(&self, task: PreparedTask) -> (oneshot::Receiver<TaskStatus>, TaskOwner) {
        let (done_tx, done_rx) = oneshot::channel();
        let owner = TaskOwner {
            token: task.entry.token().clone(),
            stream_keys: task.stream_keys,
            streams: self.streams.clone(),
        };
        let PreparedTask {
            key,
            plan,
            router,
            writer,
            entry,
            task_ctx: ctx,
            own_url,
            stage_plan,
            panic,
            memory,
            shared,
            ..
        } = task;
        let scanned = (Arc::clone(&plan), Arc::clone(&ctx));
        let failpoint = self.failpoint.clone();
        let task = async move {
            let _shared_while_running = stage_plan;
            let started = std::time::Instant::now();
            let started_at = std::time::SystemTime::now();
            metrics::gauge!(crate::metrics::WORKER_TASKS_RUNNING).increment(1.0);
            let token = entry.token().clone();
            let partition = key.partition as usize;
            let run = AssertUnwindSafe(async move {
                if panic {
                    panic!("failpoint panic-on-task");
                }
                let batch_size = ctx.session_config().batch_size();
                let stream = plan.execute(partition, ctx)?;
                let stream = match failpoint.filter(|f| f.counts_batches()) {
                    Some(failpoint) => counting_batches(stream, failpoint),
                    None => stream,
                };
                write_output(stream, router, writer, batch_size).await
            })
            .catch_unwind();
            // What the task wrote, when it completed.
            let mut written = OutputCount::default();
            let mut status = tokio::select! {
                _ = token.cancelled() => TaskStatus {
                    message: "stopped by the coordinator".into(),
                    ..status(&key, TaskState::Cancelled)
                },
                result = run => match result {
                    Ok(Err(e)) if !is_upstream(&e) => {
                        let (plan, ctx) = &scanned;
                        match missing_file(plan, ctx).await {
                            Some(file) => not_found(&key, &own_url, &file),
                            None => final_status(&key, Err(e)),
                        }
                    }
                    Ok(result) => {
                        if let Ok(count) = &result {
                            written = *count;
                        }
                        final_status(&key, result)
                    }
                    Err(panic) => panicked(&key, panic.as_ref()),
                },
            };
            let task = TaskShare {
                partition,
                shared: &shared,
            };
            status.metrics = Some(task_metrics(&scanned.0, task, started_at, written, &memory));
            tracing::debug!(task = %key, state = ?status.state(), "task finished");
            metrics::gauge!(crate::metrics::WORKER_TASKS_RUNNING).decrement(1.0);
            let outcome = match status.state() {
                TaskState::Succeeded => "succeeded",
                TaskState::Cancelled => "cancelled",
                _ => "failed",
            };
            crate::metrics::task_finished(outcome, started.elapsed());
            // The entry leaves the registry only now, with the task.
            drop(entry);
            let _ = done_tx.send(status);
        };
        // The caller's span (query and job ids) follows the task.
        squadron_exec::execution_runtime::execution_runtime()
            .spawn(tracing::Instrument::in_current_span(task));
        (done_rx, owner)
    }
}

impl TaskRunner {
    /// How a task's output is kept: an exchange is retained in the
    /// fault-tolerant mode; anything spills past memory (a queue overfilled
    /// for a starving reader spills rather than fail the query).
    fn output_mode(&self, ctx: &TaskContext, exchange: bool) -> OutputMode {
        let options = SquadronOptions::of(ctx.session_config().options());
        OutputMode {
            retained: (exchange && options.retry_policy == RetryPolicy::Task)
                .then(|| Arc::clone(&self.retained_memory)),
            disk: Some(Arc::clone(&ctx.runtime_env().disk_manager))
                .filter(|disk| disk.tmp_files_enabled()),
            spilled_total: Some(Arc::clone(&self.spilled)),
        }
    }

    /// The context one task runs in: the worker's session with the query's
    /// settings applied, less what a task split from its siblings cannot
    /// honour (`task_session_config`).
    fn task_context(
        &self,
        settings: &std::collections::HashMap<String, String>,
    ) -> Result<Arc<TaskContext>, Error> {
        if settings.is_empty() {
            return Ok(self.ctx.task_ctx());
        }
        let mut config = self.ctx.copied_config();
        for (key, value) in settings {
            config
                .options_mut()
                .set(key, value)
                .map_err(|e| Error::invalid_argument(format!("setting {key}={value}: {e}")))?;
        }
        let mut state = SessionStateBuilder::new_from_existing(self.ctx.state())
            .with_config(distributable(config))
            .build();
        refresh_configured_functions(&mut state)
            .map_err(|e| Error::invalid_argument(format!("applying the query's settings: {e}")))?;
        Ok(state.task_ctx())
    }
}

/// `stream`, telling the test failpoint of every batch.
fn counting_batches(
    stream: datafusion::physical_plan::SendableRecordBatchStream,
    failpoint: Arc<Failpoint>,
) -> datafusion::physical_plan::SendableRecordBatchStream {
    use futures::StreamExt;
    let schema = stream.schema();
    let counted = stream.inspect(move |_| failpoint.on_batch());
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, counted))
}

/// Refuses a task from a coordinator of another protocol or engine build:
/// hash shuffles are only correct when every process hashes identically.
fn check_versions(request: &RunTaskRequest) -> Result<(), Error> {
    let ours = engine_build();
    if request.protocol_version != PROTOCOL_VERSION || request.engine_build != ours {
        return Err(Error::failed_precondition(format!(
            "version mismatch: the coordinator speaks protocol {} with engine {:?}, \
             this worker protocol {PROTOCOL_VERSION} with engine {ours:?}",
            request.protocol_version, request.engine_build
        )));
    }
    Ok(())
}

/// A task that failed because `file` is not where its scan looked on
/// this worker.
fn not_found(key: &AttemptKey, worker: &str, file: &str) -> TaskStatus {
    TaskStatus {
        message: format!(
            "worker {worker} cannot read {file}: there is no such file on that worker's host \
             (a table's files must be reachable by every worker: an object store or a shared \
             volume)"
        ),
        code: tonic::Code::NotFound as i32,
        ..status(key, TaskState::Failed)
    }
}

fn panicked(key: &AttemptKey, panic: &(dyn std::any::Any + Send)) -> TaskStatus {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into());
    TaskStatus {
        message: format!("task panicked: {text}"),
        code: tonic::Code::Internal as i32,
        ..status(key, TaskState::Failed)
    }
}

/// The session tasks execute in. Squadron's settings are registered so
/// that a query's `squadron.*` settings, sent with its tasks, apply.
pub fn task_session_config() -> SessionConfig {
    let config = with_squadron_options(SessionConfig::new(), SquadronOptions::default());
    distributable(config)
}

fn distributable(mut config: SessionConfig) -> SessionConfig {
    // Each task runs one partition of its own plan instance; with work
    // stealing, that lone partition would also read its (never executed)
    // siblings' files, and every task would scan everything.
    config
        .options_mut()
        .execution
        .enable_file_stream_work_stealing = false;
    config
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
        upstream: false,
        metrics: None,
    }
}

fn final_status(key: &AttemptKey, result: Result<OutputCount>) -> TaskStatus {
    match result {
        Ok(count) => TaskStatus {
            output_rows: count.rows,
            ..status(key, TaskState::Succeeded)
        },
        Err(e) => TaskStatus {
            message: e.to_string(),
            code: status_code(&e) as i32,
            upstream: is_upstream(&e),
            ..status(key, TaskState::Failed)
        },
    }
}

/// Gives each `TableWriteExec` the task's attempt, which names its files:
/// a task run again writes files of its own.
fn bind_writes(plan: Arc<dyn ExecutionPlan>, attempt: u32) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| match node.downcast_ref::<TableWriteExec>() {
        Some(write) => Ok(Transformed::yes(
            Arc::new(write.for_attempt(attempt)) as Arc<dyn ExecutionPlan>
        )),
        None => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// Replaces each `StageReadExec` placeholder by one bound to the upstream
/// task locations of this request.
fn bind_inputs(
    plan: Arc<dyn ExecutionPlan>,
    key: &TaskKey,
    inputs: &[StageInput],
    peers: &[String],
    own_url: &str,
    secret: &StreamSecret,
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
            own_url: own_url.to_string(),
            secret: secret.clone(),
        })?;
        Ok(Transformed::yes(Arc::new(bound) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}
