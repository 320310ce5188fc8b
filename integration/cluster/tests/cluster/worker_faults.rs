//! Lost workers: a query survives a worker that dies mid-query (retried on
//! the others with a new attempt), a worker restarted on the same address
//! is used again without restarting the coordinator, and a panicking task
//! is reported as INTERNAL with its message.

use std::time::{Duration, Instant};

use crate::support::{
    client, coordinator_with, oracle, oracle_context, query, test_options, tpch_data, tpch_query,
    WorkerProcess,
};
use squadron_cluster_tests::answers::{is_ordered, same_rows};

const DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_crashing_mid_query_is_retried_on_the_others() {
    let (_dir, tables) = tpch_data(0.01);
    // The failpoint kills this worker when its third task arrives, while
    // tasks of the same job already run on it and on the others.
    let crashing = WorkerProcess::spawn_with(
        "127.0.0.1:0",
        &[("SQUADRON_TEST_FAILPOINT", "crash-on-task=3")],
    );
    let workers = [WorkerProcess::spawn(), crashing, WorkerProcess::spawn()];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let server = coordinator_with(test_options(urls.clone(), tables.clone())).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut client = client(&server).await;

    let sql = tpch_query(5);
    let actual = tokio::time::timeout(DEADLINE, query(&mut client, &sql))
        .await
        .expect("no hang")
        .expect("the query survives the lost worker");
    same_rows(&actual, &oracle(&oracle_ctx, &sql).await, is_ordered(&sql)).unwrap();

    let job = server.coordinator.recent_jobs().pop().unwrap();
    assert_eq!(job.attempts, 2, "{job:?}");
    assert!(
        !job.workers_used().contains(&urls[1]),
        "the retry avoided the lost worker: {job:?}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_task_is_reported_with_its_message() {
    let (_dir, tables) = tpch_data(0.01);
    let workers = [
        WorkerProcess::spawn_with(
            "127.0.0.1:0",
            &[("SQUADRON_TEST_FAILPOINT", "panic-on-task=1")],
        ),
        WorkerProcess::spawn(),
    ];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let server = coordinator_with(test_options(urls, tables)).await;
    let mut client = client(&server).await;

    let err = query(
        &mut client,
        "SELECT count(*) FROM lineitem WHERE l_quantity > 0",
    )
    .await
    .expect_err("the panicking task fails the query");
    assert_eq!(err.code(), tonic::Code::Internal, "{err}");
    assert!(
        err.message()
            .contains("task panicked: failpoint panic-on-task"),
        "{err}"
    );
    let ok = query(
        &mut client,
        "SELECT count(*) AS n FROM nation WHERE n_regionkey >= 0",
    )
    .await;
    assert!(ok.is_ok(), "the worker survived its task's panic: {ok:?}");
    server.shutdown().await.unwrap();
}

/// Chaos: three worker processes, one SIGKILLed during each query (a
/// different one each round) and restarted on the same port before the next
/// round. Every query returns the single-node answer (these queries send
/// their rows only at the end, so a retry is always possible), none hangs,
/// and a restarted worker takes tasks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_survive_killed_workers_and_restarted_workers_rejoin() {
    let (_dir, tables) = tpch_data(0.01);
    let mut workers: Vec<WorkerProcess> = (0..3).map(|_| WorkerProcess::spawn()).collect();
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let mut options = test_options(urls.clone(), tables.clone());
    options.partitions = Some(6);
    options.health_interval = Duration::from_millis(200);
    let server = coordinator_with(options).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut client = client(&server).await;

    let mut retried = 0;
    for (round, n) in [1, 3, 5, 9, 18, 21].into_iter().enumerate() {
        let sql = tpch_query(n);
        let expected = oracle(&oracle_ctx, &sql).await;
        let victim = round % workers.len();
        let delay = Duration::from_millis(20 + 25 * round as u64);
        let running = query(&mut client, &sql);
        let kill = async {
            tokio::time::sleep(delay).await;
            workers[victim].kill();
        };
        let (result, ()) = tokio::time::timeout(DEADLINE, futures::future::join(running, kill))
            .await
            .unwrap_or_else(|_| panic!("q{n} hung after worker {victim} was killed"));
        let actual = result.unwrap_or_else(|e| panic!("q{n} failed after losing a worker: {e}"));
        same_rows(&actual, &expected, is_ordered(&sql)).unwrap_or_else(|d| panic!("q{n}: {d}"));
        retried += usize::from(server.coordinator.recent_jobs().last().unwrap().attempts > 1);

        // Back on the same port; the coordinator must use it again.
        let addr = workers[victim].addr().to_string();
        workers[victim] = WorkerProcess::spawn_with(&addr, &[]);
        wait_until_used(&server, &mut client, &urls[victim]).await;
    }
    eprintln!("{retried} of 6 rounds were retried after the kill");
    server.shutdown().await.unwrap();
}

/// Runs small queries until one places a task on `url`.
async fn wait_until_used(
    server: &squadron_server::RunningServer,
    client: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    url: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        query(client, "SELECT count(*) FROM orders WHERE o_totalprice > 0")
            .await
            .expect("queries succeed while a worker rejoins");
        let job = server.coordinator.recent_jobs().pop().unwrap();
        if job.workers_used().iter().any(|w| w == url) {
            return;
        }
        assert!(Instant::now() < deadline, "{url} was never used again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A paused worker (SIGSTOP) keeps its connections open and answers
/// nothing: health probes find it lost, and the query that waited on it is
/// run again on the others instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_is_detected_and_the_query_retried() {
    let (_dir, tables) = tpch_data(0.01);
    let mut workers = [
        WorkerProcess::spawn(),
        WorkerProcess::spawn(),
        WorkerProcess::spawn(),
    ];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let mut options = test_options(urls.clone(), tables.clone());
    options.health_interval = Duration::from_millis(200);
    let server = coordinator_with(options).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut client = client(&server).await;

    signal(workers[1].pid(), "-STOP");
    let sql = tpch_query(3);
    let started = Instant::now();
    let actual = tokio::time::timeout(DEADLINE, query(&mut client, &sql))
        .await
        .expect("not waiting forever on a paused worker")
        .expect("the query runs on the other workers");
    same_rows(&actual, &oracle(&oracle_ctx, &sql).await, is_ordered(&sql)).unwrap();
    let job = server.coordinator.recent_jobs().pop().unwrap();
    assert!(!job.workers_used().contains(&urls[1]), "{job:?}");
    eprintln!(
        "answered in {:?} after {} attempts",
        started.elapsed(),
        job.attempts
    );
    signal(workers[1].pid(), "-CONT");
    workers[1].kill();
    server.shutdown().await.unwrap();
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
