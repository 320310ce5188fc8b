//! `COPY (query) TO 'location' STORED AS …`: the query runs on the
//! workers like any other, and the tasks write its rows with DataFusion's
//! own file sinks (`sinks`), so formats, options and `PARTITIONED BY`
//! behave exactly as on single-node DataFusion. A sink that cannot run in
//! the tasks (Arrow IPC, Avro) writes on the coordinator from the job's
//! rows. The location is confined to `--data-root` like external tables.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{SchemaRef, UInt64Type};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::DataFusionError;
use datafusion::datasource::provider_as_source;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::CopyTo;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use futures::{Stream, TryStreamExt};
use squadron_worker::error::to_status;
use tonic::Status;

use super::run_query;
use crate::coordinator::Coordinator;
use crate::session::Session;

/// Runs `copy`; returns the rows written.
pub async fn copy_to(
    coord: &Coordinator,
    session: &Arc<Session>,
    copy: CopyTo,
) -> Result<u64, Status> {
    coord.check_copy_location(&copy.output_url)?;
    let written = copy.output_url.clone();
    let statement = LogicalPlan::Copy(copy);
    let rows = match super::sinks::write_in_tasks(coord, session, &statement).await? {
        Some(rows) => rows,
        None => {
            let LogicalPlan::Copy(copy) = statement else {
                unreachable!("made above");
            };
            let input = coord
                .plan_for_writing(session, (*copy.input).clone())
                .await?;
            let schema = input.schema.clone();
            let rows = run_query(coord, input).await?;
            let plan = LogicalPlan::Copy(CopyTo {
                input: Arc::new(scan_of_rows(schema, rows)?),
                ..copy
            });
            run_sink(session, plan).await?
        }
    };
    super::forget_listings_around(coord, &written);
    Ok(rows)
}

/// A scan of a job's rows, to feed them to one of DataFusion's sinks.
pub(super) fn scan_of_rows<S>(schema: SchemaRef, rows: S) -> Result<LogicalPlan, Status>
where
    S: Stream<Item = Result<RecordBatch, Status>> + Send + 'static,
{
    let source = StreamingTable::try_new(
        Arc::clone(&schema),
        vec![Arc::new(OneStream::new(schema, rows))],
    )
    .map_err(|e| to_status(&e))?;
    LogicalPlanBuilder::scan("job_rows", provider_as_source(Arc::new(source)), None)
        .and_then(|b| b.build())
        .map_err(|e| to_status(&e))
}

/// Runs a plan ending in a DataFusion sink here; returns the rows written.
pub(super) async fn run_sink(session: &Session, plan: LogicalPlan) -> Result<u64, Status> {
    let answer = session
        .ctx()
        .execute_logical_plan(plan)
        .await
        .map_err(|e| to_status(&e))?
        .collect()
        .await
        .map_err(|e| to_status(&e))?;
    Ok(written(&answer))
}

/// The `count` DataFusion's sink answers with.
fn written(answer: &[RecordBatch]) -> u64 {
    answer
        .iter()
        .filter(|b| b.num_rows() > 0)
        .filter_map(|b| b.column(0).as_primitive_opt::<UInt64Type>())
        .map(|counts| counts.values().iter().sum::<u64>())
        .sum()
}

/// The job's rows as the one partition of a streaming table: read once.
struct OneStream {
    schema: SchemaRef,
    rows: std::sync::Mutex<Option<SendableRecordBatchStream>>,
}

impl OneStream {
    fn new<S>(schema: SchemaRef, rows: S) -> Self
    where
        S: Stream<Item = Result<RecordBatch, Status>> + Send + 'static,
    {
        let rows = rows.map_err(|status| DataFusionError::External(Box::new(status)));
        let stream = RecordBatchStreamAdapter::new(Arc::clone(&schema), rows);
        Self {
            schema,
            rows: std::sync::Mutex::new(Some(Box::pin(stream))),
        }
    }
}

impl std::fmt::Debug for OneStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneStream").finish_non_exhaustive()
    }
}

impl PartitionStream for OneStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.rows.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.unwrap_or_else(|| {
            let error = DataFusionError::Internal("a job's rows read twice".into());
            Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                futures::stream::once(async move { Err(error) }),
            ))
        })
    }
}
