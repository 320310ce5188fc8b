//! DataFusion's own file sinks (COPY, INSERT into an external table) run
//! by the tasks that compute the rows (`SinkWriteExec`): each task writes
//! its partition's files into the target, and the coordinator only adds up
//! the rows they answer.
//!
//! A sink whose files must come from one writer (COPY into one file) gets
//! one task. Sinks datafusion-proto cannot encode (Arrow IPC, Avro) run on
//! the coordinator instead, over the rows the job returns.
//!
//! COPY is not transactional, in DataFusion as here: a COPY that fails
//! half-way may leave the files its finished tasks wrote. A job is run
//! again after a lost worker only while no task has answered; a task that
//! had not finished has left no file behind (its uploads unfinished).

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{SchemaRef, UInt64Type};
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::DataFusionError;
use datafusion::datasource::provider_as_source;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::LogicalPlanBuilder;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::ExecutionPlan;
use futures::Stream;
use futures::TryStreamExt;
use squadron_common::error::Error;
use squadron_exec::plan::guard::file_sink_config;
use squadron_exec::write::SinkWriteExec;
use squadron_net::stream::decode::decoded_batches;

use crate::engine::Engine;
use squadron_coordinator::session::Session;

/// Runs `statement` (a COPY, or an INSERT into an external table): its
/// sink in the tasks, or, for a sink that cannot travel, here over the
/// job's rows. Returns the rows written.
pub async fn write_with_sink(
    coord: &Engine,
    session: &Arc<Session>,
    statement: LogicalPlan,
) -> Result<u64, Error> {
    if let Some(rows) = write_in_tasks(coord, session, &statement).await? {
        return Ok(rows);
    }
    let input = statement.inputs()[0].clone();
    let planned = coord.plan_for_writing(session, input).await?;
    let schema = planned.schema.clone();
    let rows = run_query(coord, planned).await?;
    let statement = statement
        .with_new_exprs(statement.expressions(), vec![scan_of_rows(schema, rows)?])
        .map_err(Error::from)?;
    run_sink(session, statement).await
}

/// Runs `statement` with its sink in the tasks; the rows written, or
/// `None` when its sink cannot run in tasks.
async fn write_in_tasks(
    coord: &Engine,
    session: &Arc<Session>,
    statement: &LogicalPlan,
) -> Result<Option<u64>, Error> {
    let plan = coord.plan_rows_to_write(session, statement).await?;
    let Some(plan) = in_tasks(&plan, asks_for_order(statement)).map_err(Error::from)? else {
        return Ok(None);
    };
    let planned = coord.plan_job(session, plan)?;
    let answers: Vec<_> = run_query(coord, planned).await?.try_collect().await?;
    let rows = answers
        .iter()
        .filter_map(|batch| batch.column(0).as_primitive_opt::<UInt64Type>())
        .map(|counts| counts.values().iter().sum::<u64>())
        .sum();
    Ok(Some(rows))
}

/// Whether the rows `statement` writes are sorted by its query (an ORDER
/// BY): DataFusion then writes them in that order through one writer.
fn asks_for_order(statement: &LogicalPlan) -> bool {
    statement
        .exists(|node| Ok(matches!(node, LogicalPlan::Sort(_))))
        .unwrap_or(true)
}

/// `plan` (a `DataSinkExec`) with its sink run by each partition of its
/// input; `None` for a sink that cannot travel to the workers. `ordered`:
/// the statement sorts its rows, so a merge that keeps the partitions'
/// order gathers them for one writer, as in DataFusion.
fn in_tasks(
    plan: &Arc<dyn ExecutionPlan>,
    ordered: bool,
) -> datafusion::common::Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(exec) = plan.downcast_ref::<DataSinkExec>() else {
        return Ok(None);
    };
    let Some(config) = file_sink_config(exec.sink()) else {
        return Ok(None);
    };
    let input = Arc::clone(exec.input());
    // DataFusion gathered the input into the one stream a sink reads; each
    // task reads its own partition instead, unless one file is written.
    let one_writer = config.table_partition_cols.is_empty()
        && config
            .table_paths
            .first()
            .is_some_and(|path| config.file_output_mode.single_file_output(path));
    // A merge that keeps an order no ORDER BY asked for (the input came
    // from files that record theirs) is a gather too: each task's files
    // keep its partition's order.
    let gathered = match (
        input.downcast_ref::<CoalescePartitionsExec>(),
        input.downcast_ref::<SortPreservingMergeExec>(),
    ) {
        (Some(gather), _) => Some(gather.input()),
        (_, Some(merge)) if merge.fetch().is_none() && !ordered => Some(merge.input()),
        _ => None,
    };
    let input = match gathered {
        Some(partitions) if !one_writer => Arc::clone(partitions),
        _ => input,
    };
    Ok(Some(Arc::new(SinkWriteExec::new(plan, input)?)))
}

/// A scan of a job's rows, to feed them to one of DataFusion's sinks.
fn scan_of_rows<S>(schema: SchemaRef, rows: S) -> Result<LogicalPlan, Error>
where
    S: Stream<Item = Result<RecordBatch, Error>> + Send + 'static,
{
    let source = StreamingTable::try_new(
        Arc::clone(&schema),
        vec![Arc::new(OneStream::new(schema, rows))],
    )
    .map_err(Error::from)?;
    LogicalPlanBuilder::scan("job_rows", provider_as_source(Arc::new(source)), None)
        .and_then(|b| b.build())
        .map_err(Error::from)
}

/// Runs a plan ending in a DataFusion sink here; returns the rows written.
async fn run_sink(session: &Session, plan: LogicalPlan) -> Result<u64, Error> {
    let answer = session
        .ctx()
        .execute_logical_plan(plan)
        .await
        .map_err(Error::from)?
        .collect()
        .await
        .map_err(Error::from)?;
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
        S: Stream<Item = Result<RecordBatch, Error>> + Send + 'static,
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

/// Runs a planned query on the workers and decodes its rows.
async fn run_query(
    coord: &Engine,
    query: squadron_coordinator::statements::PlannedQuery,
) -> Result<impl Stream<Item = Result<RecordBatch, Error>>, Error> {
    let job_id = uuid::Uuid::new_v4().to_string();
    let schema = Arc::clone(&query.schema);
    let stream = coord.execute(&job_id, query).await?;
    Ok(decoded_batches(stream)
        .and_then(move |batch| std::future::ready(as_planned(batch, &schema))))
}

/// A decoded batch in the planned schema: Flight streams carry
/// dictionaries hydrated, and the sinks that write these rows (DataFusion's
/// for COPY) take the batch's columns to be of the schema they were given.
fn as_planned(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, Error> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let columns = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(
            |(field, column)| match column.data_type() == field.data_type() {
                true => Ok(Arc::clone(column)),
                false => cast(column, field.data_type()),
            },
        )
        .collect::<Result<Vec<_>, _>>()
        .and_then(|columns| RecordBatch::try_new(Arc::clone(schema), columns));
    columns.map_err(|e| Error::internal(format!("rows of the planned query: {e}")))
}
