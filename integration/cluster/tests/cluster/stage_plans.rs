//! A stage's plan is decoded once per worker: the tasks of one stage that
//! run on the same worker share the decoded plan, and it is dropped when
//! they end.

use std::time::Duration;

use crate::support::{assert_workers_idle, client, coordinator, start_large_query, tpch_data};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_of_a_stage_on_one_worker_share_its_decoded_plan() {
    let (_dir, tables) = tpch_data(0.01);
    // Two embedded workers, four tasks per stage.
    let server = coordinator(vec![], tables).await;
    let mut client = client(&server).await;

    // The client stalls after one batch: the final stage's tasks stay
    // running, blocked on their output.
    let stream = start_large_query(&mut client).await;
    let workers = squadron_cluster_tests::workers(&server);
    let running: Vec<usize> = workers.iter().map(|w| w.tasks.len()).collect();
    let live_plans: Vec<usize> = workers.iter().map(|w| w.stage_plans.len()).collect();
    assert_eq!(
        running.iter().sum::<usize>(),
        4,
        "running tasks {running:?}"
    );
    assert!(
        running.iter().all(|&n| n > 0),
        "tasks on both workers: {running:?}"
    );
    assert_eq!(
        live_plans,
        vec![1, 1],
        "one plan per worker for {running:?} tasks"
    );
    // One stage (each task reads little nation itself and joins lineitem's
    // row groups with it), two of its tasks per worker: one decode each.
    let decoded: Vec<u64> = workers.iter().map(|w| w.stage_plans.decoded()).collect();
    assert_eq!(decoded, vec![1, 1], "decodes for {running:?} tasks");

    drop(stream);
    assert_workers_idle(&server, Duration::from_secs(30), "a stalled query").await;
    assert!(workers.iter().all(|w| w.stage_plans.is_empty()));
}
