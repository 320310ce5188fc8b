//! The job output: the final stage's task streams merged (`SelectAll`) into
//! the one stream the client reads.
//!
//! A driver task forwards batches through a small bounded channel, so a slow
//! client slows the final tasks (and through their buffers, the whole job).
//! The job ends when every final stream ended, a task failed, or the client
//! hung up; then whatever still runs is stopped and the workers clean up.

use datafusion::arrow::record_batch::RecordBatch;
use futures::StreamExt;
use squadron_proto::StreamKey;
use squadron_worker::client::{fetch_stream, PeerClients};
use squadron_worker::error::to_status;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::planner::JobGraph;
use crate::scheduler::dispatch::RunningJob;
use crate::scheduler::Placement;

/// Batches in flight between the job output and the client's `DoGet`.
const OUTPUT_BUFFER: usize = 2;

pub type JobStream = ReceiverStream<Result<RecordBatch, Status>>;

/// Starts reading the final stage of a running job.
pub fn job_output(
    mut job: RunningJob,
    graph: &JobGraph,
    placement: &Placement,
    clients: &PeerClients,
) -> JobStream {
    let final_stage = graph.final_stage();
    let streams = (0..final_stage.tasks).map(|partition| {
        let key = StreamKey {
            job_id: job.job_id.clone(),
            stage_id: final_stage.id as u32,
            partition: partition as u32,
            attempt: 0,
            channel: 0,
        };
        let url = placement.worker_of(final_stage.id, partition).to_string();
        fetch_stream(clients.clone(), url, key).boxed()
    });
    let mut merged = futures::stream::select_all(streams);
    let (tx, rx) = mpsc::channel(OUTPUT_BUFFER);
    let (tasks, stages) = (graph.task_count(), graph.stages.len());
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut rows = 0usize;
        let mut outcome = "completed";
        // Closed once every task monitor ended without a failure.
        let mut failures_open = true;
        loop {
            tokio::select! {
                biased;
                failure = job.failures.recv(), if failures_open => match failure {
                    Some(status) => {
                        outcome = "failed";
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                    None => failures_open = false,
                },
                next = merged.next() => match next {
                    Some(item) => {
                        let item = item.map_err(|e| to_status(&e));
                        match &item {
                            Ok(batch) => rows += batch.num_rows(),
                            Err(_) => outcome = "failed",
                        }
                        let failed = item.is_err();
                        if tx.send(item).await.is_err() {
                            outcome = "cancelled: the client hung up";
                            break;
                        }
                        if failed {
                            break;
                        }
                    }
                    None => break,
                },
                _ = tx.closed() => {
                    outcome = "cancelled: the client hung up";
                    break;
                }
            }
        }
        tracing::info!(
            job_id = job.job_id,
            stages,
            tasks,
            rows,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "job {outcome}"
        );
        job.clean_up();
    });
    ReceiverStream::new(rx)
}
