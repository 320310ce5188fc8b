//! The TPC-H queries and a set of query shapes (partitioned joins with empty
//! and rare build partitions, semi/anti/outer/full joins, unions, windows,
//! grouping sets, LIMIT in subqueries, count distinct, recursion) through
//! Flight SQL on two worker processes, in three join modes: DataFusion's
//! defaults (collected build sides at this scale), partitioned hash joins
//! (join thresholds 0), and sort-merge joins (`prefer_hash_join=false`).
//! Small batches make every exchange channel fill up, so a consumer that
//! never reads a channel (an empty build partition) would stall its producer.
//! Dynamic filters are on (the default) in each mode, and off in the first
//! two. Every answer is compared with single-node DataFusion, and every query has
//! a deadline so a hang fails the test instead of stalling it.

use std::path::Path;
use std::time::Duration;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;

use crate::support::{
    client, coordinator_with, oracle, oracle_context, query, test_options, tpch_data, tpch_query,
    WorkerProcess,
};
use squadron_cluster_tests::answers::{is_ordered, same_rows};

const DEADLINE: Duration = Duration::from_secs(120);

fn shapes() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/shapes/queries.sql");
    std::fs::read_to_string(path)
        .expect("shape queries")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("--"))
        .map(String::from)
        .collect()
}

async fn run_all(settings: &[(&str, &str)]) {
    let (_dir, tables) = tpch_data(0.01);
    let workers = [WorkerProcess::spawn(), WorkerProcess::spawn()];
    let mut options = test_options(
        workers.iter().map(|w| w.url.clone()).collect(),
        tables.clone(),
    );
    options.settings = settings
        .iter()
        .chain(&[("datafusion.execution.batch_size", "512")])
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let server = coordinator_with(options).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut client = client(&server).await;

    let queries = (1..=22)
        .map(|n| (format!("q{n}"), tpch_query(n)))
        .chain(shapes().into_iter().map(|sql| (sql.clone(), sql)));
    let mut failures = vec![];
    for (name, sql) in queries {
        let expected = oracle(&oracle_ctx, &sql).await;
        match tokio::time::timeout(DEADLINE, query(&mut client, &sql)).await {
            Err(_) => failures.push(format!("{name}: no answer within {DEADLINE:?}")),
            Ok(Err(status)) => failures.push(format!("{name}: {status}")),
            Ok(Ok(actual)) => {
                if let Err(diff) = same_rows(&actual, &expected, is_ordered(&sql)) {
                    failures.push(format!("{name}: {diff}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "with {settings:?}:\n{}",
        failures.join("\n")
    );

    // A recursive query shares its work table across operators: over
    // constants it runs on the coordinator; over a table it runs whole
    // inside one task on a worker (its work table travels in the plan).
    let constants =
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 20) SELECT sum(n) FROM t";
    let answer = query(&mut client, constants).await.unwrap();
    let sum = answer[0].column(0).as_primitive::<Int64Type>().value(0);
    assert_eq!(sum, (1..=20).sum::<i64>());
    // ALGERIA is nation 0.
    let recursive = "WITH RECURSIVE t(n) AS (SELECT n_nationkey FROM nation \
                     WHERE n_name = 'ALGERIA' UNION ALL SELECT n + 1 FROM t WHERE n < 20) \
                     SELECT sum(n) FROM t";
    let answer = query(&mut client, recursive).await.unwrap();
    let sum = answer[0].column(0).as_primitive::<Int64Type>().value(0);
    assert_eq!(sum, (0..=20).sum::<i64>());
    for w in squadron_cluster_tests::workers(&server) {
        assert!(w.tasks.is_empty());
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_join_modes() {
    run_all(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_hash_joins() {
    run_all(&PARTITIONED).await;
}

const PARTITIONED: [(&str, &str); 2] = [
    (
        "datafusion.optimizer.hash_join_single_partition_threshold",
        "0",
    ),
    (
        "datafusion.optimizer.hash_join_single_partition_threshold_rows",
        "0",
    ),
];
const NO_DYNAMIC_FILTERS: (&str, &str) = ("squadron.dynamic_filters", "false");
const NO_JOIN_REORDER: (&str, &str) = ("squadron.join_reorder", "false");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_join_modes_without_dynamic_filters_or_join_reorder() {
    run_all(&[NO_DYNAMIC_FILTERS, NO_JOIN_REORDER]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_hash_joins_without_dynamic_filters_or_join_reorder() {
    run_all(&[
        PARTITIONED[0],
        PARTITIONED[1],
        NO_DYNAMIC_FILTERS,
        NO_JOIN_REORDER,
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_merge_joins() {
    run_all(&[("datafusion.optimizer.prefer_hash_join", "false")]).await;
}
