//! Runs a plan the coordinator answers itself (`planner::local`) whose
//! work is not bounded by what its leaves hold (a join, a recursive query).
//!
//! Not inside the request that reads its answer: a plan over constants can
//! compute for hours (a cross join of `VALUES` lists), and an operator that
//! polls for long without yielding would hold a thread of the runtime that
//! serves every client's RPCs and health checks. The plan runs on the
//! execution runtime the workers' tasks use, one thread per core, and its
//! Flight messages reach the request through a bounded channel. The job's
//! supervisor, on the serving runtime, can then stop it on timeout, cancel
//! or a client that went away even while that thread is still busy: the
//! client gets its answer at once, and the plan is dropped at its next
//! yield. Bounded plans (`SELECT 1`, a lookup) stay on the serving
//! threads: the hop to the execution threads and back cost more than they
//! do. A lookup among them is started at once (`started_at_once`).

use std::future::Future;
use std::sync::Arc;

use arrow_flight::FlightData;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::{StreamExt, TryStreamExt};
use squadron_common::error::to_status;
use squadron_exec::execution_runtime::execution_runtime;
use tokio::sync::mpsc::Sender;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::AbortOnDropHandle;
use tonic::Status;
use tracing::Instrument;

use super::JobReport;
use crate::output::{encode_batches, JobStream, OUTPUT_BUFFER};

/// Starts `plan` on the execution runtime, its answer (schema first) sent
/// to `output`; the future ends when the answer is sent, the plan failed,
/// or `output`'s reader is gone. Dropping it stops the plan.
pub fn run_locally(
    schema: SchemaRef,
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
    output: Sender<Result<FlightData, Status>>,
) -> impl Future<Output = JobReport> + Send + 'static {
    let messages_out = output.clone();
    let produce = async move {
        // Inside the execution runtime: operators spawn their helpers
        // (repartitioning, merging) on the runtime that executes them.
        let batches = match execute_stream(plan, task_ctx) {
            Ok(batches) => batches.map_err(|e| to_status(&e)),
            Err(e) => {
                let _ = messages_out.send(Err(to_status(&e))).await;
                return;
            }
        };
        forward(encode_batches(schema, batches), messages_out).await;
    };
    let running = AbortOnDropHandle::new(execution_runtime().spawn(produce.in_current_span()));
    async move {
        let outcome = tokio::select! {
            ended = running => match ended {
                Ok(()) => "finished",
                Err(e) => {
                    let status = Status::internal(format!("the query failed: {e}"));
                    let _ = output.send(Err(status)).await;
                    "failed"
                }
            },
            () = output.closed() => "stopped: the client went away",
        };
        JobReport {
            outcome,
            attempts: 1,
            rows: 0,
            placement: None,
            tasks_rerun: 0,
        }
    }
}

/// `messages` of a bounded plan (see `coordinator::LocalRun`), computed
/// from now on, on the serving threads, into a buffer the client's DoGet
/// reads.
pub fn started_at_once(messages: JobStream) -> JobStream {
    let (tx, rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
    tokio::spawn(forward(messages, tx).in_current_span());
    ReceiverStream::new(rx).boxed()
}

/// Sends `messages` to `output` until they end, one fails, or `output`'s
/// reader is gone.
async fn forward(mut messages: JobStream, output: Sender<Result<FlightData, Status>>) {
    while let Some(message) = messages.next().await {
        let failed = message.is_err();
        if output.send(message).await.is_err() || failed {
            return;
        }
    }
}
