//! The worker control service: RunTask, StopTask, CleanUpJob.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use squadron_proto::v1::worker_service_server::WorkerService;
use squadron_proto::v1::{
    CleanUpJobRequest, CleanUpJobResponse, RunTaskRequest, StopTaskRequest, StopTaskResponse,
    TaskState, TaskStatus,
};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::task::runner::status;
use crate::task::{AttemptKey, TaskRegistry, TaskRunner};
use squadron_exec::stream::StreamManager;

pub struct WorkerControl {
    runner: TaskRunner,
    streams: StreamManager,
    tasks: TaskRegistry,
    draining: CancellationToken,
}

impl WorkerControl {
    /// `draining` is cancelled when the worker starts shutting down: from
    /// then on new tasks are refused while running ones finish.
    pub fn new(
        runner: TaskRunner,
        streams: StreamManager,
        tasks: TaskRegistry,
        draining: CancellationToken,
    ) -> Self {
        Self {
            runner,
            streams,
            tasks,
            draining,
        }
    }
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<TaskStatus, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl WorkerService for WorkerControl {
    type RunTaskStream = StatusStream;

    async fn run_task(
        &self,
        request: Request<RunTaskRequest>,
    ) -> Result<Response<Self::RunTaskStream>, Status> {
        if self.draining.is_cancelled() {
            return Err(Status::unavailable(
                "this worker is shutting down and takes no new tasks",
            ));
        }
        let request = request.into_inner();
        // Every line of the task's work names its query and job.
        let span = match &request.key {
            Some(key) => tracing::info_span!(
                "task",
                query_id = request.query_id,
                job_id = key.job_id,
                stage = key.stage_id,
                partition = key.partition,
            ),
            None => tracing::Span::none(),
        };
        squadron_common::traces::continue_trace(&span, &request.trace_context);
        let _entered = span.enter();
        let prepared = self.runner.prepare(request)?;
        let key = prepared.key().clone();
        let accepted = status(&key, TaskState::Accepted);
        let (done, owner) = self.runner.start(prepared);
        let finished = async move {
            // The task always sends its status; a runtime shutting down is
            // the only way to lose it.
            Ok(done
                .await
                .unwrap_or_else(|_| status(&key, TaskState::Cancelled)))
        };
        let stream = futures::stream::once(async move { Ok(accepted) })
            .chain(futures::stream::once(finished))
            // The stream stays open after the final status: it owns the
            // task's unread output streams until the coordinator ends the
            // job and drops it.
            .chain(futures::stream::pending())
            .map(move |item| {
                let _ = &owner;
                item
            });
        Ok(Response::new(stream.boxed()))
    }

    async fn stop_task(
        &self,
        request: Request<StopTaskRequest>,
    ) -> Result<Response<StopTaskResponse>, Status> {
        let request = request.into_inner();
        let key = request
            .key
            .ok_or_else(|| Status::invalid_argument("StopTask needs a task key"))?;
        let found = self.tasks.stop(&AttemptKey {
            job_id: key.job_id,
            stage_id: key.stage_id,
            partition: key.partition,
            attempt: request.attempt,
        });
        Ok(Response::new(StopTaskResponse { found }))
    }

    async fn clean_up_job(
        &self,
        request: Request<CleanUpJobRequest>,
    ) -> Result<Response<CleanUpJobResponse>, Status> {
        let request = request.into_inner();
        if request.job_id.is_empty() {
            return Err(Status::invalid_argument("CleanUpJob needs a job id"));
        }
        let tasks_stopped = self.tasks.stop_job(&request.job_id, request.attempt) as u32;
        let streams_dropped = self.streams.drop_job(&request.job_id, request.attempt) as u32;
        Ok(Response::new(CleanUpJobResponse {
            tasks_stopped,
            streams_dropped,
        }))
    }
}
