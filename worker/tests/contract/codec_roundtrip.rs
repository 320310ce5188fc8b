//! A stage plan survives the trip through the task definition encoding, and
//! running each partition as its own task reads every row exactly once.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use squadron_worker::plan::{decode_plan, encode_plan};
use squadron_worker::task::runner::task_session_config;

fn write_parquet(path: &std::path::Path, rows: i64) {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(100_000))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from_iter_values(0..rows))],
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Runs every partition on its own decoded instance of the plan, as tasks do.
async fn rows_per_task(bytes: &[u8], ctx: &SessionContext) -> Vec<usize> {
    let partitions = decode_plan(bytes, &ctx.task_ctx())
        .unwrap()
        .output_partitioning()
        .partition_count();
    let mut out = vec![];
    for p in 0..partitions {
        let plan = decode_plan(bytes, &ctx.task_ctx()).unwrap();
        let stream = plan.execute(p, ctx.task_ctx()).unwrap();
        let batches: Vec<RecordBatch> = datafusion::physical_plan::common::collect(stream)
            .await
            .unwrap();
        out.push(batches.iter().map(|b| b.num_rows()).sum());
    }
    out
}

#[tokio::test]
async fn each_task_reads_only_its_own_file_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.parquet");
    write_parquet(&file, 200_000);
    let ctx = SessionContext::new_with_config(
        SessionConfig::new()
            .with_target_partitions(4)
            .set_usize("datafusion.optimizer.repartition_file_min_size", 1),
    );
    ctx.register_parquet("t", file.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let plan = ctx
        .sql("SELECT v FROM t WHERE v >= 0")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let plan = Arc::clone(plan.children()[0]);
    let bytes = encode_plan(plan.clone()).unwrap();
    // Decoded and run in a task session, one plan instance per partition.
    let worker = SessionContext::new_with_config(task_session_config());
    let roundtrip = rows_per_task(&bytes, &worker).await;
    assert_eq!(
        roundtrip.len(),
        4,
        "the scan should be split: {roundtrip:?}"
    );
    assert_eq!(
        roundtrip.iter().sum::<usize>(),
        200_000,
        "each row is read by exactly one task: {roundtrip:?}"
    );
}
