//! A filter on a sorted column schedules only the file ranges whose row
//! groups may hold a match, a lookup that reads little runs on the
//! coordinator, and the answers stay the single-node ones.

use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use squadron_cluster_tests::answers::same_rows;
use squadron_server::catalog::TableSpec;
use squadron_server::RunningServer;

use crate::support::{client, coordinator_with, oracle, oracle_context, query, test_options};

/// One Parquet file of 40,000 rows sorted on `k`, in row groups of 2,000.
pub async fn write_sorted_file(path: &std::path::Path) {
    let ctx = SessionContext::new();
    for sql in [
        "SET datafusion.execution.parquet.max_row_group_size = 2000".to_string(),
        format!(
            "COPY (SELECT value AS k, value % 97 AS v, 'name ' || value AS name \
             FROM generate_series(1, 40000)) TO '{}' STORED AS PARQUET",
            path.display()
        ),
    ] {
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
}

/// A coordinator over `sorted` (see `write_sorted_file`, in `dir`), the
/// file split into one range per partition (4) as DataFusion splits files
/// over 10 MiB; and the oracle over the same table.
pub async fn sorted_in_four_ranges(dir: &std::path::Path) -> (RunningServer, SessionContext) {
    let file = dir.join("sorted.parquet");
    write_sorted_file(&file).await;
    let tables: Vec<TableSpec> = vec![format!("sorted={}", file.display()).parse().unwrap()];
    let mut options = test_options(vec![], tables.clone());
    options.settings = vec![(
        "datafusion.optimizer.repartition_file_min_size".into(),
        "0".into(),
    )];
    let server = coordinator_with(options).await;
    (server, oracle_context(&tables).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_lookup_runs_only_the_task_that_may_match() {
    let dir = tempfile::tempdir().unwrap();
    let (server, ctx) = sorted_in_four_ranges(dir.path()).await;
    let mut client = client(&server).await;

    for (sql, tasks) in [
        ("SELECT k, v, name FROM sorted WHERE k = 12345", 1),
        ("SELECT k, v FROM sorted WHERE k < 500 OR k > 39800", 2),
        ("SELECT k, name FROM sorted WHERE k > 100000", 1),
        ("SELECT k, v FROM sorted WHERE v = 3", 4),
    ] {
        let expected = oracle(&ctx, sql).await;
        let actual = query(&mut client, sql).await.unwrap();
        same_rows(&actual, &expected, false).unwrap_or_else(|diff| panic!("{sql}: {diff}"));
        let job = server.coordinator.recent_jobs().pop().unwrap();
        assert_eq!((job.stages, job.tasks), (1, tasks), "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_reads_little_runs_on_the_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sorted.parquet");
    write_sorted_file(&file).await;
    let tables: Vec<TableSpec> = vec![format!("sorted={}", file.display()).parse().unwrap()];
    let mut options = test_options(vec![], tables.clone());
    // Room for a few of the file's twenty row groups, not for all.
    options.coordinator_scan_limit = std::fs::metadata(&file).unwrap().len() / 4;
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;
    let ctx = oracle_context(&tables).await;
    let decoded = || -> u64 {
        squadron_cluster_tests::workers(&server)
            .iter()
            .map(|w| w.stage_plans.decoded())
            .sum()
    };

    for (sql, on_workers) in [
        ("SELECT k, v, name FROM sorted WHERE k = 12345", false),
        (
            "SELECT count(*), max(name) FROM sorted WHERE k BETWEEN 3999 AND 6001",
            false,
        ),
        ("SELECT k, v FROM sorted WHERE v = 3", true),
        // It reads little, but a join may compute much more than it reads.
        (
            "SELECT a.k, b.k FROM sorted a, sorted b WHERE a.k < 5 AND b.k < 5",
            true,
        ),
        ("SELECT sum(v) FROM sorted", true),
    ] {
        let (jobs, plans) = (server.coordinator.recent_jobs().len(), decoded());
        let expected = oracle(&ctx, sql).await;
        let actual = query(&mut client, sql).await.unwrap();
        same_rows(&actual, &expected, false).unwrap_or_else(|diff| panic!("{sql}: {diff}"));
        let ran_a_job = server.coordinator.recent_jobs().len() > jobs;
        assert_eq!(ran_a_job, on_workers, "{sql}: a distributed job");
        assert_eq!(
            decoded() > plans,
            on_workers,
            "{sql}: plans decoded on workers"
        );
    }

    // A lookup starts when described, its read overlapping the client's
    // round trip to DoGet; `SELECT 1` waits for its DoGet.
    for (sql, early) in [
        ("SELECT v FROM sorted WHERE k = 777", true),
        ("SELECT 1", false),
    ] {
        let queries = server.coordinator.queries().rows().len();
        let info = client.execute(sql.to_string(), None).await.unwrap();
        let started = server.coordinator.queries().rows().len() > queries;
        assert_eq!(started, early, "{sql}: started before its DoGet");
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let got: Vec<_> = client
            .do_get(ticket)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        same_rows(&got, &oracle(&ctx, sql).await, false)
            .unwrap_or_else(|diff| panic!("{sql}: {diff}"));
    }
}
