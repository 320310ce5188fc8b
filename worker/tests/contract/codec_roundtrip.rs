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

async fn physical_plan(
    ctx: &SessionContext,
    sql: &str,
) -> Arc<dyn datafusion::physical_plan::ExecutionPlan> {
    ctx.sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap()
}

/// Every partition of `sql`'s plan after the trip through the task
/// encoding, against the same plan run directly (the oracle).
async fn same_after_round_trip(sql: &str) {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    let plan = physical_plan(&ctx, sql).await;
    let direct = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx())
        .await
        .unwrap();
    let decoded = decode_plan(&encode_plan(plan).unwrap(), &ctx.task_ctx()).unwrap();
    let travelled = datafusion::physical_plan::collect(decoded, ctx.task_ctx())
        .await
        .unwrap();
    let show = |b: &[RecordBatch]| {
        datafusion::arrow::util::pretty::pretty_format_batches(b)
            .unwrap()
            .to_string()
    };
    assert_eq!(show(&travelled), show(&direct), "{sql}");
}

#[tokio::test]
async fn plans_datafusion_proto_would_change_travel_unchanged() {
    // A series scanned for no column (datafusion-proto sends the projected
    // schema with an unprojected generator).
    same_after_round_trip("SELECT count(*) FROM generate_series(1, 2000) AS t(v) WHERE v % 7 = 1")
        .await;
    same_after_round_trip(
        "SELECT g1.value FROM generate_series(1, 3) g1 CROSS JOIN generate_series(1, 2) g2 ORDER BY 1",
    )
    .await;
    // The one empty grouping set (datafusion-proto drops it: no row).
    same_after_round_trip(
        "SELECT count(*) FROM (VALUES (1), (2)) AS t(v) GROUP BY GROUPING SETS (())",
    )
    .await;
}

#[tokio::test]
async fn ignore_nulls_windows_are_refused_not_changed() {
    let ctx = SessionContext::new();
    let plan = physical_plan(
        &ctx,
        "SELECT first_value(v) IGNORE NULLS OVER () FROM (VALUES (NULL), (3)) AS t(v)",
    )
    .await;
    let err = encode_plan(plan).unwrap_err().to_string();
    assert!(
        err.contains("IGNORE NULLS cannot run on workers yet"),
        "{err}"
    );
    let plan = physical_plan(
        &ctx,
        "SELECT first_value(v) OVER () FROM (VALUES (NULL), (3)) AS t(v)",
    )
    .await;
    assert!(encode_plan(plan).is_ok());
}
