//! Wrong answers and a panic that the suites written for each rewrite did
//! not catch, each through a coordinator with two workers and checked
//! against single-node DataFusion: an equality between two columns of one
//! table lost by the join order, volatile subtrees shared or evaluated
//! twice, and join keys at both ends of i64.

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::SessionContext;
use squadron_cluster_tests::answers::same_rows;

use squadron_server::ServerOptions;

use crate::support::{client, coordinator_with, distributed_plan, query, test_options};

/// Tables written as Parquet by DataFusion, registered in the oracle and
/// on a coordinator over two embedded workers.
async fn tables(
    dir: &std::path::Path,
    rows: &[(&str, &str)],
) -> (squadron_server::RunningServer, SessionContext) {
    let oracle = SessionContext::new();
    let server = coordinator_with(ServerOptions {
        data_dir: Some(dir.join("warehouse")),
        ..test_options(vec![], vec![])
    })
    .await;
    let mut client = client(&server).await;
    for (name, select) in rows {
        let file = dir.join(format!("{name}.parquet"));
        let copy = format!("COPY ({select}) TO '{}' STORED AS PARQUET", file.display());
        oracle.sql(&copy).await.unwrap().collect().await.unwrap();
        let create = format!(
            "CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}'",
            file.display()
        );
        oracle.sql(&create).await.unwrap().collect().await.unwrap();
        query(&mut client, &create).await.unwrap();
    }
    (server, oracle)
}

fn count(batches: &[RecordBatch]) -> i64 {
    batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .map(|b| b.column(0).as_primitive::<Int64Type>().value(0))
        .expect("a count")
}

const PARTITIONED_JOINS: [&str; 2] = [
    "SET datafusion.optimizer.hash_join_single_partition_threshold = 0",
    "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
];

/// `ta.x = tb.x`, `tc.x = tb.x` and `tc.x = ta.y` make `ta.x = ta.y`: the
/// order joining `ta` to `tc` on `ta.y` first kept one key per class of
/// equal columns and lost it (1,260 rows instead of 60), under the
/// default settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_columns_of_one_table_equal_through_a_third_stay_equal() {
    let dir = tempfile::tempdir().unwrap();
    let (server, oracle) = tables(
        dir.path(),
        &[
            (
                "ta",
                "SELECT value % 1000 AS x, value % 997 AS y FROM generate_series(0, 19999)",
            ),
            (
                "tb",
                "SELECT value % 1000 AS x FROM generate_series(0, 19999)",
            ),
            ("tc", "SELECT value AS x FROM generate_series(1, 3)"),
        ],
    )
    .await;
    let mut client = client(&server).await;
    for sql in [
        "SELECT count(*) FROM ta JOIN tb ON ta.x = tb.x JOIN tc ON tc.x = tb.x AND tc.x = ta.y",
        "SELECT count(*) FROM ta, tb, tc WHERE ta.x = tb.x AND tc.x = tb.x AND tc.x = ta.y",
    ] {
        let expected = oracle.sql(sql).await.unwrap().collect().await.unwrap();
        assert_eq!(count(&expected), 60);
        let actual = query(&mut client, sql).await.unwrap();
        same_rows(&actual, &expected, false).unwrap_or_else(|diff| panic!("{sql}: {diff}"));
    }
    server.shutdown().await.unwrap();
}

/// Two subtrees that display alike but call `random()` or `uuid()` are two
/// evaluations: shared as one shuffle, every row met itself (50,000
/// instead of 0). The same with sharing switched off, and with a CTE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_subtrees_are_never_shared() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = tables(
        dir.path(),
        &[(
            "tp",
            "SELECT value AS kn, value % 100 AS k FROM generate_series(0, 49999)",
        )],
    )
    .await;
    let mut client = client(&server).await;
    for set in PARTITIONED_JOINS {
        query(&mut client, set).await.unwrap();
    }
    for function in ["random()", "uuid()"] {
        let sql = format!(
            "SELECT count(*) FROM (SELECT kn, {function} AS x FROM tp) a \
             JOIN (SELECT kn, {function} AS x FROM tp) b ON a.kn = b.kn AND a.x = b.x"
        );
        let cte = format!(
            "WITH c AS (SELECT kn, {function} AS x FROM tp) \
             SELECT count(*) FROM c a JOIN c b ON a.kn = b.kn AND a.x = b.x"
        );
        for sql in [sql, cte] {
            assert_eq!(count(&query(&mut client, &sql).await.unwrap()), 0, "{sql}");
        }
    }
    // A deterministic subtree still is one stage read by both uses.
    let same = "EXPLAIN SELECT count(*) FROM (SELECT kn, k + 1 AS x FROM tp) a \
                JOIN (SELECT kn, k + 1 AS x FROM tp) b ON a.kn = b.kn AND a.x = b.x";
    let shown = format!("{:?}", query(&mut client, same).await.unwrap());
    assert!(shown.contains("x2 consumers"), "{shown}");
    query(&mut client, "SET squadron.shared_shuffles = false")
        .await
        .unwrap();
    let shown = format!("{:?}", query(&mut client, same).await.unwrap());
    assert!(!shown.contains("x2 consumers"), "{shown}");
    server.shutdown().await.unwrap();
}

/// A build side filtered by `random() < 0.5` that also reduced the
/// shuffle below its join ran once for the join and once more for the
/// reduction: two samples, about a quarter of the rows instead of half.
/// One sample of 8,000 keys keeps 4,000 ± 6σ (σ = 45).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volatile_build_side_is_one_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = tables(
        dir.path(),
        &[
            (
                "fact",
                "SELECT value % 8000 AS kn FROM generate_series(0, 39999)",
            ),
            ("dim", "SELECT value AS k FROM generate_series(0, 7999)"),
        ],
    )
    .await;
    let mut client = client(&server).await;
    let sql = "SELECT count(*) FROM (SELECT kn, count(*) c FROM fact GROUP BY kn) g \
               JOIN (SELECT k FROM dim WHERE random() < 0.5) d ON g.kn = d.k";
    for _ in 0..3 {
        let kept = count(&query(&mut client, sql).await.unwrap());
        assert!((4000 - 270..=4000 + 270).contains(&kept), "{kept} of 8,000");
    }
    // Every task of the join reads one sample: each sampled key joins all
    // five of its fact rows.
    let partial_keys = "SELECT count(*) FROM (SELECT d.k, count(*) AS c FROM fact f \
                        JOIN (SELECT k FROM dim WHERE random() < 0.5) d ON f.kn = d.k \
                        GROUP BY d.k) WHERE c <> 5";
    assert_eq!(count(&query(&mut client, partial_keys).await.unwrap()), 0);
    // The same shape without random() is reduced, unless switched off.
    let deterministic =
        "EXPLAIN SELECT count(*) FROM (SELECT kn, count(*) c FROM fact GROUP BY kn) g \
                         JOIN (SELECT k FROM dim WHERE k % 2 = 0) d ON g.kn = d.k";
    let reduced = |batches: Vec<RecordBatch>| distributed_plan(&batches).contains("RightSemi");
    assert!(reduced(query(&mut client, deterministic).await.unwrap()));
    query(&mut client, "SET squadron.reduced_shuffles = false")
        .await
        .unwrap();
    assert!(!reduced(query(&mut client, deterministic).await.unwrap()));
    server.shutdown().await.unwrap();
}

/// Build keys holding i64::MIN and i64::MAX: their span overflowed u64
/// and a task panicked indexing the bitmap made for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_keys_at_both_ends_of_i64() {
    let dir = tempfile::tempdir().unwrap();
    let (server, oracle) = tables(
        dir.path(),
        &[
            (
                "tp",
                "SELECT value AS kn, value % 100 AS k FROM generate_series(0, 49999)",
            ),
            ("tdense", "SELECT value AS x FROM generate_series(0, 999)"),
            (
                "tminmax",
                "SELECT * FROM (VALUES (-9223372036854775807 - 1), (9223372036854775807), (3)) \
                 AS v(k)",
            ),
        ],
    )
    .await;
    let mut client = client(&server).await;
    let sql = "SELECT count(*) FROM tp p JOIN tdense d ON p.kn = d.x JOIN tminmax b ON p.k = b.k";
    let expected = oracle.sql(sql).await.unwrap().collect().await.unwrap();
    assert_eq!(count(&expected), 10);
    for partitioned in [false, true] {
        if partitioned {
            for set in PARTITIONED_JOINS {
                query(&mut client, set).await.unwrap();
            }
        }
        let actual = query(&mut client, sql).await.unwrap();
        same_rows(&actual, &expected, false).unwrap();
    }
    server.shutdown().await.unwrap();
}
