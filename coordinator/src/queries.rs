//! The queries the coordinator runs: who started them, when, how they
//! ended. Feeds `system.queries` and the query metrics.
//!
//! Running queries are kept until they end; of the ended ones only the
//! most recent `FINISHED_KEPT`, so the log never grows without bound.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use arrow_flight::FlightData;
use dashmap::DashMap;
use futures::Stream;
use metrics::{counter, gauge, histogram};
use tonic::Status;

use crate::metrics::{CLIENT_BATCHES, CLIENT_BYTES, QUERIES, QUERIES_ACTIVE, QUERY_SECONDS};

tokio::task_local! {
    /// The query the current task works for: its jobs tell their workers,
    /// whose log lines then carry it.
    static CURRENT_QUERY: String;
}

/// Runs `work` as part of query `id`.
pub async fn within<F: std::future::Future>(id: &str, work: F) -> F::Output {
    CURRENT_QUERY.scope(id.to_string(), work).await
}

/// The query the current task works for ("" outside one).
pub fn current_query_id() -> String {
    CURRENT_QUERY.try_with(Clone::clone).unwrap_or_default()
}

/// Ended queries kept for `system.queries`.
pub const FINISHED_KEPT: usize = 100;

/// One query, as `system.queries` shows it.
#[derive(Debug, Clone)]
pub struct QueryRow {
    /// Not the job id the workers know: a query's id tells nothing of it.
    pub id: String,
    pub user: String,
    /// `running`, or how it ended: `ok`, `error`, `cancelled`.
    pub state: &'static str,
    pub started: SystemTime,
    pub elapsed_ms: u64,
    pub stages: u32,
    /// The internal job id, to look up the progress of a running job.
    pub job_id: String,
}

/// The running and recent queries with the task counts of running jobs
/// (finished, all): what `system.queries` shows. The coordinator answers
/// it; the catalog's system tables read it through this trait, as the
/// coordinator plans statements over the catalog and must come first.
pub trait LiveQueries: Send + Sync {
    fn live_queries(&self) -> Vec<(QueryRow, Option<(usize, usize)>)>;
}

#[derive(Default)]
pub struct QueryLog {
    running: DashMap<String, (QueryRow, Instant)>,
    finished: Mutex<VecDeque<QueryRow>>,
}

impl QueryLog {
    /// Records a query starting now; it ends when the guard is finished or
    /// dropped.
    pub fn start(self: &Arc<Self>, user: &str, job_id: &str, stages: usize) -> QueryGuard {
        let id = uuid::Uuid::new_v4().to_string();
        let row = QueryRow {
            id: id.clone(),
            user: if user.is_empty() { "-" } else { user }.to_string(),
            state: "running",
            started: SystemTime::now(),
            elapsed_ms: 0,
            stages: stages as u32,
            job_id: job_id.to_string(),
        };
        self.running.insert(id.clone(), (row, Instant::now()));
        gauge!(QUERIES_ACTIVE).increment(1.0);
        QueryGuard {
            log: Arc::clone(self),
            id,
        }
    }

    /// Running queries first, then ended ones, newest first.
    pub fn rows(&self) -> Vec<QueryRow> {
        let mut rows: Vec<QueryRow> = self
            .running
            .iter()
            .map(|entry| {
                let (row, start) = entry.value();
                QueryRow {
                    elapsed_ms: start.elapsed().as_millis() as u64,
                    ..row.clone()
                }
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.started));
        let finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        rows.extend(finished.iter().rev().cloned());
        rows
    }

    fn end(&self, id: &str, state: &'static str) {
        let Some((_, (row, start))) = self.running.remove(id) else {
            return;
        };
        let elapsed = start.elapsed();
        gauge!(QUERIES_ACTIVE).decrement(1.0);
        counter!(QUERIES, "outcome" => state).increment(1);
        histogram!(QUERY_SECONDS).record(elapsed.as_secs_f64());
        let mut finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        if finished.len() >= FINISHED_KEPT {
            finished.pop_front();
        }
        finished.push_back(QueryRow {
            state,
            elapsed_ms: elapsed.as_millis() as u64,
            ..row
        });
    }
}

/// A running query; dropped unfinished, it ended `cancelled` (its client
/// went away or cancelled it).
pub struct QueryGuard {
    log: Arc<QueryLog>,
    id: String,
}

impl QueryGuard {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn finish(self, result: &Result<impl Sized, Status>) {
        let state = match result {
            Ok(_) => "ok",
            Err(s) if s.code() == tonic::Code::Cancelled => "cancelled",
            Err(_) => "error",
        };
        self.log.end(&self.id, state);
    }

    /// `stream`, counted as this query's answer to its client: it ends the
    /// query when it ends, with an error, or when dropped.
    pub fn track<S>(self, stream: S) -> TrackedStream<S> {
        TrackedStream {
            inner: stream,
            guard: Some(self),
            sent_bytes: counter!(CLIENT_BYTES),
            sent_batches: counter!(CLIENT_BATCHES),
        }
    }
}

impl Drop for QueryGuard {
    fn drop(&mut self) {
        self.log.end(&self.id, "cancelled");
    }
}

pub struct TrackedStream<S> {
    inner: S,
    guard: Option<QueryGuard>,
    sent_bytes: metrics::Counter,
    sent_batches: metrics::Counter,
}

impl<S> Stream for TrackedStream<S>
where
    S: Stream<Item = Result<FlightData, Status>> + Unpin,
{
    type Item = Result<FlightData, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = Pin::new(&mut self.inner).poll_next(cx);
        match &item {
            Poll::Ready(Some(Ok(data))) => {
                let bytes = data.data_header.len() + data.data_body.len();
                self.sent_bytes.increment(bytes as u64);
                if !data.data_body.is_empty() {
                    self.sent_batches.increment(1);
                }
            }
            Poll::Ready(Some(Err(status))) => {
                if let Some(guard) = self.guard.take() {
                    guard.finish(&Err::<(), _>(status.clone()));
                }
            }
            Poll::Ready(None) => {
                if let Some(guard) = self.guard.take() {
                    guard.finish(&Ok::<(), Status>(()));
                }
            }
            Poll::Pending => {}
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_queries_are_kept_up_to_a_bound_newest_first() {
        let log = Arc::new(QueryLog::default());
        let running = log.start("alice", "job-a", 3);
        for n in 0..FINISHED_KEPT + 5 {
            let guard = log.start("bob", &format!("job-{n}"), 1);
            guard.finish(&Ok::<(), Status>(()));
        }
        let failed = log.start("bob", "job-x", 1);
        failed.finish(&Err::<(), _>(Status::internal("boom")));
        drop(log.start("carol", "job-y", 1));
        let rows = log.rows();
        assert_eq!(rows.len(), 1 + FINISHED_KEPT);
        assert_eq!((rows[0].user.as_str(), rows[0].state), ("alice", "running"));
        assert_eq!(rows[0].id, running.id());
        assert_eq!(
            (rows[1].user.as_str(), rows[1].state),
            ("carol", "cancelled")
        );
        assert_eq!(rows[2].state, "error");
        assert_eq!(rows[3].state, "ok");
    }
}
