//! EXPLAIN ANALYZE of a distributed query: the job runs as the query would
//! (admitted, supervised, its rows read to the end but not sent), then the
//! answer is its stages with what every task measured
//! (`analyze_report`).

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use futures::StreamExt;
use squadron_planner::JobGraph;
use tonic::Status;

use super::analyze_report::{report, QuerySummary};
use super::Coordinator;
use crate::output::{encode_batches, rows_in, JobStream, OUTPUT_BUFFER};

/// How long the answer waits for the tasks' final statuses.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Coordinator {
    /// Runs `graph` as job `job_id`, discarding its rows, and answers its
    /// report as (plan_type, plan) rows of `schema`.
    pub(super) async fn analyze(
        &self,
        job_id: &str,
        graph: Arc<JobGraph>,
        settings: Vec<(String, String)>,
        verbose: bool,
        schema: SchemaRef,
    ) -> Result<JobStream, Status> {
        let _slot = self.admission.admit().await?;
        let (tx, rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
        let started = Instant::now();
        let run = self.supervised_job(job_id, &graph, settings, &tx);
        // Only the job's own sender may keep the output open.
        drop(tx);
        let drain = async move {
            let mut rows = 0;
            let mut messages = tokio_stream::wrappers::ReceiverStream::new(rx);
            while let Some(message) = messages.next().await {
                rows += rows_in(&message?);
            }
            Ok::<u64, Status>(rows)
        };
        let ((job, progress), rows) = tokio::join!(run, drain);
        let rows = rows?;
        // The last tasks' statuses (their metrics) follow their last rows.
        progress.all_reported(REPORT_WAIT).await;
        if let Some(placement) = &job.placement {
            self.running
                .remember(job_id, &graph, placement, &job, Arc::clone(&progress));
        }
        if job.outcome != "completed" {
            return Err(Status::internal(format!(
                "the analyzed query ended {} without an error",
                job.outcome
            )));
        }
        let summary = QuerySummary {
            rows,
            elapsed: started.elapsed(),
            attempts: job.attempts,
            tasks_rerun: job.tasks_rerun,
        };
        let (types, plans): (Vec<String>, Vec<String>) =
            report(&graph, &progress.runs(), &summary, verbose)
                .into_iter()
                .unzip();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(types)),
                Arc::new(StringArray::from(plans)),
            ],
        )
        .map_err(|e| Status::internal(format!("the EXPLAIN ANALYZE answer: {e}")))?;
        let batches = futures::stream::iter([Ok(batch)]);
        Ok(encode_batches(schema, batches))
    }
}
