//! A stage plan survives the trip through the task definition encoding, and
//! running each partition as its own task reads every row exactly once.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use squadron_exec::plan::{decode_plan, encode_plan};
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

#[tokio::test]
async fn file_row_index_is_refused_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    write_parquet(&dir.path().join("t.parquet"), 10);
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "t",
        dir.path().to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let plan = physical_plan(&ctx, "SELECT file_row_index(), v FROM t").await;
    let err = encode_plan(plan).unwrap_err().to_string();
    assert!(err.contains("cannot run on workers yet"), "{err}");
    let plan = physical_plan(&ctx, "SELECT v FROM t").await;
    assert!(encode_plan(plan).is_ok());
}

/// tpchgen and DataFusion write Parquet files whose embedded Arrow schema
/// says `Utf8View`; Squadron's tables read them as `Utf8`. The decoded scan
/// reads the plain type directly (no views decoded, then cast) and keeps
/// the rewritten footer in the worker's metadata cache.
#[tokio::test]
async fn files_embedding_views_are_read_as_plain_strings() {
    use datafusion::arrow::array::{Array, AsArray, ListBuilder, StringViewBuilder};
    use datafusion::datasource::physical_plan::parquet::metadata::CachedParquetMetaData;
    use parquet::arrow::parquet_to_arrow_schema;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("views.parquet");
    let written = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("name", DataType::Utf8View, true),
        Field::new_list(
            "tags",
            Field::new_list_field(DataType::Utf8View, true),
            true,
        ),
    ]));
    let mut names = StringViewBuilder::new();
    let mut tags = ListBuilder::new(StringViewBuilder::new());
    for k in 0..1000 {
        names.append_option((k % 10 != 0).then(|| format!("customer number {k:05}")));
        tags.values().append_value(format!("tag-{}", k % 3));
        tags.append(true);
    }
    let batch = RecordBatch::try_new(
        written.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..1000)),
            Arc::new(names.finish()),
            Arc::new(tags.finish()),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), written, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();

    // Registered as Squadron registers tables: plain types.
    let plain = Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new_list("tags", Field::new_list_field(DataType::Utf8, true), true),
    ]);
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "t",
        path.to_str().unwrap(),
        ParquetReadOptions::default().schema(&plain),
    )
    .await
    .unwrap();
    let plan = physical_plan(&ctx, "SELECT k, name, tags FROM t").await;
    let worker = SessionContext::new_with_config(task_session_config());
    let decoded = decode_plan(&encode_plan(plan).unwrap(), &worker.task_ctx()).unwrap();
    let read = datafusion::physical_plan::collect(decoded, worker.task_ctx())
        .await
        .unwrap();
    let read = datafusion::arrow::compute::concat_batches(&read[0].schema(), &read).unwrap();
    assert_eq!(read.num_rows(), 1000);
    assert_eq!(read.schema().field(1).data_type(), &DataType::Utf8);
    let names = read.column(1).as_string::<i32>();
    assert_eq!(names.value(7), "customer number 00007");
    assert!(names.is_null(10));
    let tags = read.column(2).as_list::<i32>();
    assert_eq!(tags.value(5).as_string::<i32>().value(0), "tag-2");

    let cache = worker.runtime_env().cache_manager.get_file_metadata_cache();
    let location = object_store::path::Path::from_filesystem_path(&path).unwrap();
    let entry = cache.get(&location).expect("the footer is cached");
    let footer = entry
        .file_metadata
        .as_any()
        .downcast_ref::<CachedParquetMetaData>()
        .unwrap()
        .parquet_metadata()
        .file_metadata()
        .clone();
    let hinted =
        parquet_to_arrow_schema(footer.schema_descr(), footer.key_value_metadata()).unwrap();
    assert_eq!(hinted.field(1).data_type(), &DataType::Utf8);
    assert_eq!(
        hinted.field(2).data_type(),
        &DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
    );
}

#[tokio::test]
async fn float16_literals_arrive_as_float16() {
    // datafusion-proto alone reads a Float16 literal back as Float32:
    // `h + 1` then failed on the worker, `h IN (…)` did not decode.
    let ctx = SessionContext::new();
    let sql = "SELECT h + 1 AS plus, h IN (arrow_cast(1, 'Float16'), arrow_cast(2.5, 'Float16')) AS listed \
               FROM (SELECT arrow_cast(column1, 'Float16') AS h FROM (VALUES (1.0), (2.5), (4.0))) AS t";
    let df = ctx.sql(sql).await.unwrap();
    let expected = df.clone().collect().await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let bytes = encode_plan(plan).unwrap();
    let decoded = decode_plan(&bytes, &ctx.task_ctx()).unwrap();
    let actual = datafusion::physical_plan::collect(decoded, ctx.task_ctx())
        .await
        .unwrap();
    let text = |batches: &[RecordBatch]| {
        datafusion::arrow::util::pretty::pretty_format_batches(batches)
            .unwrap()
            .to_string()
    };
    assert_eq!(text(&actual), text(&expected));
    assert!(text(&actual).contains("true"), "{}", text(&actual));
}

/// A worker reads a file's page index from storage once, not once per
/// task: the first task caches it with the footer. (DataFusion's opener
/// asks its reader for the footer alone and reads the index itself,
/// uncached; on a worker nothing else ever cached it.)
#[tokio::test]
async fn a_scan_caches_page_indexes_with_footers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.parquet");
    // Two row groups: the predicate rules one out by statistics and leaves
    // the other for the page index to narrow.
    write_parquet(&file, 200_000);
    let ctx = SessionContext::new();
    ctx.register_parquet("t", file.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let plan = physical_plan(&ctx, "SELECT v FROM t WHERE v = 150000").await;
    let bytes = encode_plan(plan).unwrap();
    // A worker's own runtime: nothing cached by planning.
    let worker = SessionContext::new_with_config(task_session_config());
    let page_indexes = || {
        let cache = worker.runtime_env().cache_manager.get_file_metadata_cache();
        cache
            .list_entries()
            .values()
            .map(|entry| {
                entry
                    .value
                    .file_metadata
                    .extra_info()
                    .get("page_index")
                    .cloned()
            })
            .collect::<Vec<_>>()
    };
    for _task in 0..2 {
        let rows = rows_per_task(&bytes, &worker).await;
        assert_eq!(rows.iter().sum::<usize>(), 1, "{rows:?}");
        assert_eq!(page_indexes(), vec![Some("true".to_string())]);
    }
}
