//! The job output: the final stage's task streams merged (`SelectAll`) into
//! the one stream the client reads.
//!
//! The final stage's messages are forwarded as the workers encoded them
//! (in the client's schema, see `planner::client_types`): the coordinator
//! reads only their IPC headers, for the row count, and never decodes or
//! re-encodes result data. Its work per query stays O(stages + tasks).
//!
//! Batches go through a small bounded channel to the client's `DoGet`, so a
//! slow client slows the final tasks (and through their buffers, the whole
//! job). An attempt's output ends when every final stream ended, a task
//! failed, or the client hung up.

use std::time::Duration;

use arrow_flight::FlightData;
use datafusion::common::Result;
use futures::stream::BoxStream;
use futures::StreamExt;
use squadron_common::error::to_status;
use squadron_net::client::PeerClients;
use squadron_net::stream::fetch::fetch_raw_stream;
use squadron_proto::StreamKey;
use tokio::sync::mpsc;
use tonic::Status;

use crate::cluster::WorkerHealth;
use crate::scheduler::dispatch::{Attempt, JobAttempt, TaskFailure};
use crate::scheduler::Placement;
use squadron_planner::JobGraph;

/// Messages in flight between the job output and the client's `DoGet`.
pub const OUTPUT_BUFFER: usize = 4;

/// Where the job's results go: the client's `DoGet` stream, as encoded
/// Flight messages.
pub type OutputSender = mpsc::Sender<Result<FlightData, Status>>;

/// How one attempt's output ended.
#[derive(Debug)]
pub enum AttemptEnd {
    Completed,
    Failed(TaskFailure),
    ClientGone,
}

/// The final stage's streams of one attempt, merged. Opened before the
/// tasks are dispatched: each fetch connects at once and the worker holds
/// it until the task registers its stream, so the first rows need no extra
/// round trip after the tasks are accepted.
pub type FinalStreams = futures::stream::SelectAll<BoxStream<'static, Result<(FlightData, u64)>>>;

/// Opens the final stage's streams of `attempt` (see `FinalStreams`).
pub fn open_output(
    job_id: &str,
    attempt: &Attempt,
    graph: &JobGraph,
    placement: &Placement,
    clients: &PeerClients,
) -> FinalStreams {
    let final_stage = graph.final_stage();
    let streams = (0..final_stage.tasks).map(|partition| {
        let key = StreamKey {
            job_id: job_id.to_string(),
            stage_id: final_stage.id as u32,
            partition: partition as u32,
            attempt: attempt.number,
            channel: 0,
        };
        let url = placement.worker_of(final_stage.id, partition).to_string();
        let ticket = attempt.secret.ticket(&key);
        fetch_raw_stream(clients.clone(), url, key, ticket).boxed()
    });
    futures::stream::select_all(streams)
}

/// Streams the final stage of a running attempt (`merged`, from
/// `open_output`) to `tx`, counting the rows the client was sent in
/// `rows_sent`.
pub async fn stream_output(
    job: &mut JobAttempt,
    mut merged: FinalStreams,
    placement: &Placement,
    tx: &OutputSender,
    rows_sent: &mut u64,
    health: &WorkerHealth,
) -> AttemptEnd {
    let workers = placement.workers_used();
    let lost = health.first_lost(&workers);
    tokio::pin!(lost);
    // Closed once every task monitor ended without a failure.
    let mut failures_open = true;
    loop {
        tokio::select! {
            biased;
            failure = job.failures.recv(), if failures_open => match failure {
                Some(failure) => return AttemptEnd::Failed(root_cause(job, failure).await),
                None => failures_open = false,
            },
            next = merged.next() => match next {
                Some(Ok((message, rows))) => {
                    if tx.send(Ok(message)).await.is_err() {
                        return AttemptEnd::ClientGone;
                    }
                    *rows_sent += rows;
                }
                Some(Err(e)) => {
                    let failure = TaskFailure {
                        derived: true,
                        ..TaskFailure::new(to_status(&e), None)
                    };
                    return AttemptEnd::Failed(root_cause(job, failure).await);
                }
                None => return AttemptEnd::Completed,
            },
            _ = tx.closed() => return AttemptEnd::ClientGone,
            url = &mut lost => return AttemptEnd::Failed(lost_worker(url)),
        }
    }
}

/// The failure of an attempt whose worker stopped answering probes.
pub fn lost_worker(url: String) -> TaskFailure {
    let status = Status::unavailable(format!("worker {url} stopped answering health probes"));
    TaskFailure::new(status, Some(url))
}

/// How long a symptom (a failed stream read) waits for its cause.
const CAUSE_WAIT: Duration = Duration::from_millis(250);

/// A failure that is only a failed stream read is a symptom: the producer's
/// own failure (a panic, an error in the data, a lost worker) usually
/// arrives right after it and says what really happened.
async fn root_cause(job: &mut JobAttempt, first: TaskFailure) -> TaskFailure {
    if !first.derived {
        return first;
    }
    let deadline = tokio::time::Instant::now() + CAUSE_WAIT;
    while let Ok(Some(next)) = tokio::time::timeout_at(deadline, job.failures.recv()).await {
        if !next.derived {
            return next;
        }
    }
    first
}
