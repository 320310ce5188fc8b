//! All 22 TPC-H queries, sent through Flight SQL to a coordinator with two
//! worker processes, return the rows single-node DataFusion returns over the
//! same files.

use crate::support::{client, oracle, query, tpch_on_two_workers, tpch_query};
use squadron_cluster_tests::answers::{is_ordered, same_rows};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_queries_match_single_node_datafusion() {
    let cluster = tpch_on_two_workers(0.01).await;
    let (server, workers, oracle_ctx) = (&cluster.server, &cluster.workers, &cluster.oracle);
    let mut client = client(server).await;

    let mut failures = vec![];
    for n in 1..=22 {
        let sql = tpch_query(n);
        let expected = oracle(oracle_ctx, &sql).await;
        match query(&mut client, &sql).await {
            Ok(actual) => {
                if let Err(diff) = same_rows(&actual, &expected, is_ordered(&sql)) {
                    failures.push(format!("q{n}: {diff}"));
                }
            }
            Err(status) => failures.push(format!("q{n}: {status}")),
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));

    // The work really was spread over both worker processes.
    let jobs = server.coordinator.recent_jobs();
    assert_eq!(jobs.len(), 22);
    let all_workers: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let spread = jobs.iter().filter(|j| j.workers_used().len() == 2).count();
    assert!(spread > 0, "no query ran on both workers: {jobs:?}");
    // At this scale every file is one partition: a one-table query (q1, q6)
    // runs as one stage of one task, with no shuffle; the joins cut.
    let cut = jobs.iter().filter(|j| j.stages > 1).count();
    assert!(
        cut >= 18,
        "only {cut} of 22 queries ran several stages: {jobs:?}"
    );
    for job in &jobs {
        assert!(
            job.stages > 1 || job.tasks == 1,
            "job {} ran as a single stage of {} tasks",
            job.job_id,
            job.tasks
        );
        for w in job.workers_used() {
            assert!(
                all_workers.contains(&w),
                "task placed on unknown worker {w}"
            );
        }
    }
    cluster.server.shutdown().await.unwrap();
}
