//! A task's hash join, once its build side is complete, prunes the scan of
//! its probe side, and a TopK prunes the scan below it: fewer rows read,
//! the same answers with `squadron.dynamic_filters` on and off. Where the
//! probe side arrives by shuffle, the filter drops the rows read, and the
//! tasks producing them stop sending them.

use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion::prelude::SessionContext;
use squadron_cluster_tests::answers::{is_ordered, same_rows};
use squadron_cluster_tests::explained::{
    dynamic_filters_over_scans, rows_dropped_for_consumers, rows_out, rows_scanned,
};
use squadron_server::catalog::TableSpec;
use squadron_server::RunningServer;
use tonic::transport::Channel;

use crate::pruned_ranges::write_sorted_file;
use crate::support::{client, coordinator_with, oracle, oracle_context, query, test_options};

/// `select`'s rows written to `path` as Parquet.
async fn write_parquet(path: &std::path::Path, select: &str) {
    let sql = format!("COPY ({select}) TO '{}' STORED AS PARQUET", path.display());
    let ctx = SessionContext::new();
    ctx.sql(&sql).await.unwrap().collect().await.unwrap();
}

/// `keys.parquet` in `dir`: the five build keys 1000, 2000, … 5000.
async fn write_five_keys(dir: &std::path::Path) -> std::path::PathBuf {
    let keys = dir.join("keys.parquet");
    write_parquet(
        &keys,
        "SELECT value * 1000 AS key FROM generate_series(1, 5)",
    )
    .await;
    keys
}

/// `big.parquet` in `dir`: 400,000 rows, keys `k` 1 to 400,000.
async fn write_big(dir: &std::path::Path) -> std::path::PathBuf {
    let big = dir.join("big.parquet");
    write_parquet(
        &big,
        "SELECT value AS k, value % 7 AS v FROM generate_series(1, 400000)",
    )
    .await;
    big
}

/// `big`'s rows sorted before they are shuffled to a semi join on `keys`:
/// the shuffle's producer starts sending only once it has all rows, by
/// when the join's keys are long known.
const SORTED_THEN_SEMI_JOINED: &str =
    "SELECT count(*), sum(v) FROM (SELECT k, v FROM big ORDER BY v, k LIMIT 399990) \
     WHERE k IN (SELECT key FROM keys)";

/// Rows the producer dropped for its consumers in `EXPLAIN ANALYZE` of
/// `sql`, from the first of up to three runs in which at least `enough`
/// were: whether a consumer's filter reaches the producer before it sends
/// is a race its scheduling decides (on a loaded machine every consumer
/// can start late), so one run says little, but a filter that never
/// reaches the producer drops nothing in any of them.
async fn rows_dropped_in_a_run(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
    enough: u64,
) -> (u64, u64) {
    let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
    let mut seen = (0, 0);
    for _ in 0..3 {
        let explained = query(client, &explain).await.unwrap();
        let received = rows_out(&explained, &["StageReadExec", "mode=shuffle"]);
        seen = (rows_dropped_for_consumers(&explained), received);
        if seen.0 >= enough {
            break;
        }
    }
    seen
}

/// Asserts every session answers `sql` as the oracle does (any order).
async fn answers_as_oracle<const N: usize>(
    ctx: &SessionContext,
    sessions: [&mut FlightSqlServiceClient<Channel>; N],
    sql: &str,
) {
    let expected = oracle(ctx, sql).await;
    for client in sessions {
        let actual = query(client, sql).await.unwrap();
        same_rows(&actual, &expected, false).unwrap_or_else(|diff| panic!("{diff}"));
    }
}

/// Two sessions of `server`: dynamic filters on (the default), and off.
async fn on_and_off(
    server: &RunningServer,
) -> (
    FlightSqlServiceClient<Channel>,
    FlightSqlServiceClient<Channel>,
) {
    let on = client(server).await;
    let mut off = client(server).await;
    query(&mut off, "SET squadron.dynamic_filters = false")
        .await
        .unwrap();
    (on, off)
}

/// A coordinator over `tables` (name, file) that plans every join
/// partitioned, so both inputs of each arrive by shuffle (as TPC-H q18's do
/// at SF10), with its oracle and sessions with filters on and off.
async fn partitioned_joins(
    tables: &[(&str, &std::path::Path)],
) -> (
    RunningServer,
    SessionContext,
    FlightSqlServiceClient<Channel>,
    FlightSqlServiceClient<Channel>,
) {
    let tables: Vec<TableSpec> = tables
        .iter()
        .map(|(name, path)| format!("{name}={}", path.display()).parse().unwrap())
        .collect();
    let mut options = test_options(vec![], tables.clone());
    options.coordinator_scan_limit = 0;
    options.settings = [
        "datafusion.optimizer.hash_join_single_partition_threshold",
        "datafusion.optimizer.hash_join_single_partition_threshold_rows",
    ]
    .iter()
    .map(|k| (k.to_string(), "0".to_string()))
    .collect();
    let server = coordinator_with(options).await;
    let ctx = oracle_context(&tables).await;
    let (on, off) = on_and_off(&server).await;
    (server, ctx, on, off)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_sides_and_top_k_prune_the_scans_in_their_task() {
    let dir = tempfile::tempdir().unwrap();
    // 40,000 rows sorted on k in 20 row groups; five build keys in three
    // of them.
    let sorted = dir.path().join("sorted.parquet");
    write_sorted_file(&sorted).await;
    let keys = write_five_keys(dir.path()).await;
    let empty = dir.path().join("empty.parquet");
    write_parquet(
        &empty,
        "SELECT value AS key FROM generate_series(1, 5) WHERE value > 5",
    )
    .await;
    // Ascending from row group to row group, descending inside each: not
    // sorted, so a TopK runs, but each row group's range is its own.
    let clustered = dir.path().join("clustered.parquet");
    let ctx = SessionContext::new();
    for sql in [
        "SET datafusion.execution.parquet.max_row_group_size = 2000".to_string(),
        format!(
            "COPY (SELECT (value - 1) / 2000 * 2000 + 2000 - (value - 1) % 2000 AS c, value AS k \
             FROM generate_series(1, 40000)) TO '{}' STORED AS PARQUET",
            clustered.display()
        ),
    ] {
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    let tables: Vec<TableSpec> = [
        ("sorted", &sorted),
        ("keys", &keys),
        ("empty", &empty),
        ("clustered", &clustered),
    ]
    .iter()
    .map(|(name, path)| format!("{name}={}", path.display()).parse().unwrap())
    .collect();
    let mut options = test_options(vec![], tables.clone());
    options.coordinator_scan_limit = 0;
    options.settings = vec![(
        "datafusion.optimizer.repartition_file_min_size".into(),
        "0".into(),
    )];
    let server = coordinator_with(options).await;
    let ctx = oracle_context(&tables).await;
    let (mut on, mut off) = on_and_off(&server).await;

    // Each query with the most rows its scans may read with dynamic
    // filters; without, they read the whole file (but for the empty build
    // side, whose join never reads its probe side).
    for (sql, most_with_filters) in [
        // A broadcast build side of five keys, in three of the twenty row
        // groups (each task reads a quarter of the file).
        (
            "SELECT count(*), sum(v) FROM sorted JOIN keys ON k = key",
            3 * 2_000,
        ),
        (
            "SELECT k, name FROM sorted WHERE k IN (SELECT key FROM keys) ORDER BY k",
            3 * 2_000,
        ),
        // An empty build side: nothing of the probe side.
        ("SELECT count(*) FROM sorted JOIN empty ON k = key", 0),
        // The TopK's threshold, once its heap is full, prunes the rest: a
        // row group or two per task (the reader has the next in flight
        // when the threshold arrives).
        ("SELECT c, k FROM clustered ORDER BY c LIMIT 5", 8 * 2_000),
    ] {
        let expected = oracle(&ctx, sql).await;
        for client in [&mut on, &mut off] {
            let actual = query(client, sql).await.unwrap();
            same_rows(&actual, &expected, is_ordered(sql))
                .unwrap_or_else(|diff| panic!("{sql}: {diff}"));
        }
        let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
        let table = if sql.contains("clustered") {
            "clustered.parquet"
        } else {
            "sorted.parquet"
        };
        let with = rows_scanned(&query(&mut on, &explain).await.unwrap(), table);
        let without = rows_scanned(&query(&mut off, &explain).await.unwrap(), table);
        assert!(
            with <= most_with_filters,
            "{sql}: {with} rows scanned with dynamic filters"
        );
        assert!(
            without == 40_000 || most_with_filters == 0,
            "{sql}: {without} rows scanned without"
        );
    }
    for w in squadron_cluster_tests::workers(&server) {
        assert!(w.tasks.is_empty());
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_semi_join_filters_the_shuffled_inputs_of_the_join_below() {
    let dir = tempfile::tempdir().unwrap();
    let sorted = dir.path().join("sorted.parquet");
    write_sorted_file(&sorted).await;
    let keys = write_five_keys(dir.path()).await;
    let (server, ctx, mut on, mut off) =
        partitioned_joins(&[("sorted", &sorted), ("keys", &keys)]).await;
    // Shuffled inputs: the file is in key order, so the inner join would
    // otherwise read it by key range, unshuffled.
    for client in [&mut on, &mut off] {
        query(client, "SET squadron.key_range_splits = false")
            .await
            .unwrap();
    }

    // The semi join's build side (five keys) filters both shuffled inputs
    // of the inner join it probes: 40,000 rows each arrive, ten pass.
    let sql = "SELECT count(*), sum(a.v + b.v) FROM sorted a JOIN sorted b ON a.k = b.k \
               WHERE a.k IN (SELECT key FROM keys)";
    answers_as_oracle(&ctx, [&mut on, &mut off], sql).await;
    let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
    let explained = query(&mut on, &explain).await.unwrap();
    // The semi join's filter (its keys listed); the inner join's own
    // stays unpublished (`[ empty ]`) where DataFusion placed it.
    let passed = rows_out(&explained, &["FilterExec: DynamicFilter", "IN (SET)"]);
    assert!(
        (1..=10).contains(&passed),
        "{passed} shuffled rows passed the filter"
    );
    // And the producers sent few of the rest.
    let read = rows_out(&explained, &["StageReadExec", "filters_producers=true"]);
    let dropped = rows_dropped_for_consumers(&explained);
    assert!(read + dropped <= 80_000, "{read} read, {dropped} dropped");
    let explained = query(&mut off, &explain).await.unwrap();
    assert_eq!(rows_out(&explained, &["FilterExec: DynamicFilter"]), 0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_stop_sending_the_rows_a_consumers_filter_rules_out() {
    let dir = tempfile::tempdir().unwrap();
    let big = write_big(dir.path()).await;
    let keys = write_five_keys(dir.path()).await;
    // The 400,000 rows of `big` are shuffled to the semi join.
    let (server, ctx, mut on, mut off) = partitioned_joins(&[("big", &big), ("keys", &keys)]).await;

    let sql = SORTED_THEN_SEMI_JOINED;
    answers_as_oracle(&ctx, [&mut on, &mut off], sql).await;
    let (dropped, received) = rows_dropped_in_a_run(&mut on, sql, 50_000).await;
    // Each of the four join tasks reads one hash partition of `big` (about
    // 100,000 rows) and of the keys. Three have keys, and their filters
    // reach the producer while it sorts, so it sends their five rows and
    // drops the rest: 299,986 dropped, 10 rows read, in every quiet run
    // here. The fourth has no keys: it never reads, and its rows go with
    // its channel. On a loaded machine a consumer can start late and its
    // filter arrive after its rows went; in one of three runs at least one
    // must arrive in time.
    let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
    assert!(
        dropped >= 50_000 && received + dropped <= 400_010,
        "{dropped} rows dropped by the producer, {received} sent"
    );
    let explained = query(&mut off, &explain).await.unwrap();
    assert_eq!(rows_dropped_for_consumers(&explained), 0);
    assert_eq!(rows_out(&explained, &["filters_producers=true"]), 0);
    let received = rows_out(&explained, &["StageReadExec", "mode=shuffle"]);
    assert!(received >= 200_000, "{received} rows read with filters off");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_bloom_filters_producers_drop_rows_whose_keys_are_too_many_to_list() {
    let dir = tempfile::tempdir().unwrap();
    let big = write_big(dir.path()).await;
    // 40,000 keys, one in every 10 of `big`'s: about 10,000 per join task,
    // more than an IN list takes, and spread so evenly that ranges of them
    // rule nothing out.
    let keys = dir.path().join("keys.parquet");
    write_parquet(
        &keys,
        "SELECT value * 10 AS key FROM generate_series(1, 40000)",
    )
    .await;
    let (server, ctx, mut ranges_only, mut off) =
        partitioned_joins(&[("big", &big), ("keys", &keys)]).await;
    let mut bloom = client(&server).await;
    query(&mut bloom, "SET squadron.bloom_filters = true")
        .await
        .unwrap();

    let sql = SORTED_THEN_SEMI_JOINED;
    answers_as_oracle(&ctx, [&mut bloom, &mut ranges_only, &mut off], sql).await;
    let (dropped, _) = rows_dropped_in_a_run(&mut bloom, sql, 50_000).await;
    // Each join task's filter keeps its 10,000 or so keys and about 1 % of
    // the other rows of its partition (100,000): as in the test above, at
    // least one filter reaches the sorting producer in time in one of three
    // runs.
    let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
    assert!(
        dropped >= 50_000,
        "{dropped} rows dropped with Bloom filters"
    );
    let explained = query(&mut ranges_only, &explain).await.unwrap();
    let dropped = rows_dropped_for_consumers(&explained);
    assert!(dropped < 10_000, "{dropped} rows dropped by ranges alone");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_below_another_join_drops_rows_by_build_keys_too_many_to_send() {
    let dir = tempfile::tempdir().unwrap();
    let big = write_big(dir.path()).await;
    let odd = dir.path().join("odd.parquet");
    write_parquet(&odd, "SELECT value AS m FROM generate_series(1, 400000, 2)").await;
    // 10,000 build keys, one in seven: more than a filter sent to other
    // tasks lists (4,096), few and close enough for a bitmap in the task.
    let many = dir.path().join("many.parquet");
    write_parquet(
        &many,
        "SELECT value * 7 AS key FROM generate_series(1, 10000)",
    )
    .await;
    let tables: Vec<TableSpec> = [("big", &big), ("odd", &odd), ("many", &many)]
        .iter()
        .map(|(name, path)| format!("{name}={}", path.display()).parse().unwrap())
        .collect();
    let mut options = test_options(vec![], tables.clone());
    options.coordinator_scan_limit = 0;
    let server = coordinator_with(options).await;
    let ctx = oracle_context(&tables).await;
    let (mut on, mut off) = on_and_off(&server).await;

    // The outer join cannot move below the left join, so `big` is scanned
    // below the left join and the `many` join's filter reaches its scan.
    let sql = "SELECT count(*), sum(v), count(m) FROM \
               (SELECT k, v, m FROM big LEFT JOIN odd ON k = m) t JOIN many ON t.k = key";
    answers_as_oracle(&ctx, [&mut on, &mut off], sql).await;
    let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
    let explained = query(&mut on, &explain).await.unwrap();
    let (scanned, kept) = dynamic_filters_over_scans(&explained, "big.parquet");
    // Pages past the last key are pruned; the keys' own span is read.
    assert!(scanned >= 70_000, "{scanned} rows of big scanned");
    // Ranges alone (at most 32 over keys 7 apart) would keep ~70,000.
    assert_eq!(
        kept, 10_000,
        "rows of big kept by the filter below the left join"
    );
    server.shutdown().await.unwrap();
}
