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
use crate::output::rows_in;

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
/// Characters of a query's SQL (and error) kept: enough to recognise it,
/// bounded however long a generated statement is.
pub const TEXT_CHARS: usize = 2000;

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
    /// The statement, truncated to `TEXT_CHARS` ("" when not from SQL:
    /// an ingest, a prepared statement's plan).
    pub sql: String,
    /// Why it failed, for `error`.
    pub error: Option<String>,
    /// Rows and bytes (Arrow IPC) of the answer sent so far.
    pub rows: u64,
    pub bytes: u64,
}

/// The running and recent queries with the task counts of running jobs
/// (finished, all): what `system.queries` shows. The coordinator answers
/// it; the catalog's system tables read it through this trait, as the
/// coordinator plans statements over the catalog and must come first.
pub trait LiveQueries: Send + Sync {
    fn live_queries(&self) -> Vec<(QueryRow, Option<(usize, usize)>)>;

    /// The task attempts of the running and recent queries, by query id
    /// (`system.tasks`); those of jobs the history forgot are gone.
    fn live_tasks(&self) -> Vec<(String, crate::scheduler::TaskRun)>;

    /// Query `id` with its job's stages and task attempts, when it ran
    /// on the workers and is still remembered.
    fn query_job(&self, id: &str) -> Option<QueryJob>;
}

/// One query with what its job did (the query UI's page of a query).
pub struct QueryJob {
    pub query: QueryRow,
    /// Tasks finished and all tasks of a running job.
    pub progress: Option<(usize, usize)>,
    pub graph: Option<Arc<squadron_planner::JobGraph>>,
    pub runs: Vec<crate::scheduler::TaskRun>,
}

#[derive(Default)]
pub struct QueryLog {
    running: DashMap<String, (QueryRow, Instant)>,
    finished: Mutex<VecDeque<QueryRow>>,
}

impl QueryLog {
    /// Records a query starting now; it ends when the guard is finished or
    /// dropped.
    pub fn start(
        self: &Arc<Self>,
        user: &str,
        job_id: &str,
        stages: usize,
        sql: Option<&str>,
    ) -> QueryGuard {
        let row = QueryRow::new(user, job_id, stages, sql);
        let id = row.id.clone();
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

    /// Records a statement that failed before it could start (a parse or
    /// planning error): it counts, and shows, as a failed query.
    pub fn failed_to_start(&self, user: &str, sql: Option<&str>, error: &Status) {
        let row = QueryRow {
            state: "error",
            error: Some(truncated(error.message())),
            ..QueryRow::new(user, "-", 0, sql)
        };
        counter!(QUERIES, "outcome" => "error").increment(1);
        self.keep_finished(row);
    }

    fn end(&self, id: &str, state: &'static str, error: Option<&str>) {
        let Some((_, (row, start))) = self.running.remove(id) else {
            return;
        };
        let elapsed = start.elapsed();
        gauge!(QUERIES_ACTIVE).decrement(1.0);
        counter!(QUERIES, "outcome" => state).increment(1);
        histogram!(QUERY_SECONDS).record(elapsed.as_secs_f64());
        self.keep_finished(QueryRow {
            state,
            elapsed_ms: elapsed.as_millis() as u64,
            error: error.map(truncated),
            ..row
        });
    }

    fn keep_finished(&self, row: QueryRow) {
        let mut finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        if finished.len() >= FINISHED_KEPT {
            finished.pop_front();
        }
        finished.push_back(row);
    }

    /// Counts `rows` and `bytes` more sent to query `id`'s client.
    fn sent(&self, id: &str, rows: u64, bytes: u64) {
        if let Some(mut entry) = self.running.get_mut(id) {
            entry.0.rows += rows;
            entry.0.bytes += bytes;
        }
    }
}

impl QueryRow {
    fn new(user: &str, job_id: &str, stages: usize, sql: Option<&str>) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            user: if user.is_empty() { "-" } else { user }.to_string(),
            state: "running",
            started: SystemTime::now(),
            elapsed_ms: 0,
            stages: stages as u32,
            job_id: job_id.to_string(),
            sql: sql.map(truncated).unwrap_or_default(),
            error: None,
            rows: 0,
            bytes: 0,
        }
    }
}

fn truncated(text: &str) -> String {
    match text.char_indices().nth(TEXT_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
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
        let error = result.as_ref().err().map(Status::message);
        self.log.end(&self.id, state, error);
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
        self.log.end(&self.id, "cancelled", None);
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
                if let Some(guard) = &self.guard {
                    guard.log.sent(&guard.id, rows_in(data), bytes as u64);
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
        let running = log.start("alice", "job-a", 3, Some("SELECT 1"));
        for n in 0..FINISHED_KEPT + 5 {
            let guard = log.start("bob", &format!("job-{n}"), 1, None);
            guard.finish(&Ok::<(), Status>(()));
        }
        let failed = log.start("bob", "job-x", 1, None);
        failed.finish(&Err::<(), _>(Status::internal("boom")));
        drop(log.start("carol", "job-y", 1, None));
        let rows = log.rows();
        assert_eq!(rows.len(), 1 + FINISHED_KEPT);
        assert_eq!((rows[0].user.as_str(), rows[0].state), ("alice", "running"));
        assert_eq!(rows[0].id, running.id());
        assert_eq!(
            (rows[1].user.as_str(), rows[1].state),
            ("carol", "cancelled")
        );
        assert_eq!(rows[2].state, "error");
        assert_eq!(rows[2].error.as_deref(), Some("boom"));
        assert_eq!(rows[3].state, "ok");
        assert_eq!(rows[0].sql, "SELECT 1");
    }

    #[test]
    fn a_statement_that_failed_to_start_is_an_ended_query_with_its_error() {
        let log = Arc::new(QueryLog::default());
        let long = format!("SELEC {}", "x".repeat(TEXT_CHARS));
        log.failed_to_start("", Some(&long), &Status::invalid_argument("syntax"));
        let rows = log.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].state, rows[0].user.as_str()), ("error", "-"));
        assert_eq!(rows[0].error.as_deref(), Some("syntax"));
        assert_eq!(rows[0].sql.chars().count(), TEXT_CHARS + 1, "truncated");
    }

    #[tokio::test]
    async fn rows_and_bytes_sent_are_counted_while_the_answer_streams() {
        use datafusion::arrow::array::Int32Array;
        use datafusion::arrow::record_batch::RecordBatch;
        use futures::StreamExt;
        let log = Arc::new(QueryLog::default());
        let guard = log.start("a", "job", 1, None);
        let id = guard.id().to_string();
        let batch =
            RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2, 3])) as _)])
                .unwrap();
        let messages: Vec<Result<FlightData, Status>> =
            arrow_flight::utils::batches_to_flight_data(
                &batch.schema(),
                vec![batch.clone(), batch],
            )
            .unwrap()
            .into_iter()
            .map(Ok)
            .collect();
        let mut stream = guard.track(futures::stream::iter(messages));
        stream.next().await;
        stream.next().await;
        let running = log.rows().into_iter().find(|r| r.id == id).unwrap();
        assert_eq!((running.state, running.rows), ("running", 3));
        while stream.next().await.is_some() {}
        let ended = log.rows().into_iter().find(|r| r.id == id).unwrap();
        assert_eq!((ended.state, ended.rows), ("ok", 6));
        assert!(ended.bytes > 0);
    }
}
