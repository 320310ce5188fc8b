//! DataFusion's own file sinks (COPY, INSERT into an external table) run
//! by the tasks that compute the rows (`SinkWriteExec`): each task writes
//! its partition's files into the target, and the coordinator only adds up
//! the rows they answer.
//!
//! A sink whose files must come from one writer (COPY into one file) gets
//! one task. Sinks datafusion-proto cannot encode (Arrow IPC, Avro) are
//! run by the caller on the coordinator instead.
//!
//! COPY is not transactional, in DataFusion as here: a COPY that fails
//! half-way may leave the files its finished tasks wrote. A job is run
//! again after a lost worker only while no task has answered; a task that
//! had not finished has left no file behind (its uploads unfinished).

use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::datasource::file_format::csv::CsvSink;
use datafusion::datasource::file_format::json::JsonSink;
use datafusion::datasource::file_format::parquet::ParquetSink;
use datafusion::datasource::physical_plan::{FileSink, FileSinkConfig};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;
use squadron_worker::error::to_status;
use squadron_worker::write::SinkWriteExec;
use tonic::Status;

use super::run_query;
use crate::coordinator::Coordinator;
use crate::session::Session;

/// Runs `statement` (a COPY, or an INSERT into an external table) with its
/// sink in the tasks; the rows written, or `None` when its sink cannot run
/// in tasks.
pub async fn write_in_tasks(
    coord: &Coordinator,
    session: &Arc<Session>,
    statement: &LogicalPlan,
) -> Result<Option<u64>, Status> {
    let plan = coord.plan_rows_to_write(session, statement).await?;
    let Some(plan) = in_tasks(&plan).map_err(|e| to_status(&e))? else {
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

/// `plan` (a `DataSinkExec`) with its sink run by each partition of its
/// input; `None` for a sink that cannot travel to the workers.
fn in_tasks(
    plan: &Arc<dyn ExecutionPlan>,
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
    let input = match input.downcast_ref::<CoalescePartitionsExec>() {
        Some(gather) if !one_writer => Arc::clone(gather.input()),
        _ => input,
    };
    Ok(Some(Arc::new(SinkWriteExec::new(plan, input)?)))
}

/// The file sinks datafusion-proto encodes.
fn file_sink_config(sink: &dyn DataSink) -> Option<&FileSinkConfig> {
    if let Some(parquet) = sink.downcast_ref::<ParquetSink>() {
        return Some(parquet.config());
    }
    if let Some(csv) = sink.downcast_ref::<CsvSink>() {
        return Some(csv.config());
    }
    sink.downcast_ref::<JsonSink>().map(|json| json.config())
}
