//! Statements that differ only in their constants re-use one plan: the
//! answers stay single-node DataFusion's, the ranges a key cannot match
//! are still dropped for each key, and rows written after the plan was
//! kept are read.

use datafusion::arrow::util::pretty::pretty_format_batches;
use squadron_cluster_tests::answers::same_rows;

use crate::pruned_ranges::sorted_in_four_ranges;
use crate::support::{client, coordinator_with, oracle, query, test_options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_by_other_keys_reuse_a_plan_and_answer_as_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let (server, ctx) = sorted_in_four_ranges(dir.path()).await;
    let mut client = client(&server).await;
    let templates = || server.coordinator.shared_session().templates().reused();

    let keys = [12345, 1, 40000, 0, 40001, 2000, 2001, 39999, 777, 31415];
    for k in keys {
        let sql = format!("SELECT k, v, name FROM sorted WHERE k = {k}");
        let actual = query(&mut client, &sql).await.unwrap();
        same_rows(&actual, &oracle(&ctx, &sql).await, false)
            .unwrap_or_else(|diff| panic!("{sql}: {diff}"));
        // The ranges are pruned for each key, not for the first one.
        let job = server.coordinator.recent_jobs().pop().unwrap();
        assert_eq!((job.stages, job.tasks), (1, 1), "{sql}");
    }
    assert_eq!(
        templates(),
        keys.len() as u64 - 1,
        "all but the first re-used"
    );

    let before = templates();
    for (low, v, name) in [
        (100, 3, "name 1555"),
        (39000, 50, "x"),
        (0, 96, "name 39975"),
    ] {
        let sql =
            format!("SELECT k, name FROM sorted WHERE k > {low} AND v = {v} AND name <> '{name}'");
        let actual = query(&mut client, &sql).await.unwrap();
        same_rows(&actual, &oracle(&ctx, &sql).await, false)
            .unwrap_or_else(|diff| panic!("{sql}: {diff}"));
    }
    assert_eq!(templates(), before + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_plan_reads_rows_written_after_it() {
    let catalog = tempfile::tempdir().unwrap();
    let mut options = test_options(vec![], vec![]);
    options.data_dir = Some(catalog.path().to_path_buf());
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;
    let lookup = |k: i64| format!("SELECT k, s FROM w WHERE k = {k}");
    let reader = client.clone();
    let run = |sql: String| {
        let mut client = reader.clone();
        async move {
            let batches = query(&mut client, &sql).await.unwrap();
            pretty_format_batches(&batches).unwrap().to_string()
        }
    };

    query(
        &mut client,
        "CREATE TABLE w AS SELECT value AS k, 'first' AS s FROM generate_series(1, 100)",
    )
    .await
    .unwrap();
    assert!(run(lookup(5)).await.contains("| 5 | first |"));
    assert!(!run(lookup(150)).await.contains("150"));
    query(&mut client, "INSERT INTO w VALUES (150, 'inserted')")
        .await
        .unwrap();
    assert!(run(lookup(150)).await.contains("| 150 | inserted |"));
    // The same name, another table.
    query(&mut client, "DROP TABLE w").await.unwrap();
    query(
        &mut client,
        "CREATE TABLE w AS SELECT value + 1000 AS k, 'second' AS s FROM generate_series(1, 10)",
    )
    .await
    .unwrap();
    assert!(!run(lookup(5)).await.contains("first"));
    assert!(run(lookup(1005)).await.contains("| 1005 | second |"));
    let reused = server.coordinator.shared_session().templates().reused();
    assert!(reused >= 2, "{reused} statements planned from a template");
}
