//! The fault-tolerant mode (`--retry-policy task`): a worker process that
//! dies in the middle of a query (the `crash-after-batches` failpoint:
//! part of its work done, part of its output already read, rows already
//! on their way to the client) costs only the tasks whose outputs were on
//! it. Every answer is complete and equal to single-node DataFusion's, and
//! no task, stream or spill file is left behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{
    assert_workers_idle, client, coordinator_with, first_error, oracle, oracle_context, query,
    start_large_query, test_options, tpch_data, tpch_query, WorkerProcess,
};
use squadron_cluster_tests::answers::{is_ordered, same_rows};
use squadron_exec::squadron_options::RetryPolicy;
use squadron_server::SpillSettings;

const DEADLINE: Duration = Duration::from_secs(120);

/// Runs `sql` on three workers, the second of which aborts after its
/// tasks produced `crash_after` batches; returns the job's tasks and the
/// tasks run again.
async fn survives_a_crash(
    tables: &[squadron_server::catalog::TableSpec],
    sql: &str,
    crash_after: u32,
) -> (usize, u32) {
    let spill = tempfile::tempdir().unwrap();
    let failpoint = format!("crash-after-batches={crash_after}");
    let crashing =
        WorkerProcess::spawn_with("127.0.0.1:0", &[("SQUADRON_TEST_FAILPOINT", &failpoint)]);
    let workers = [WorkerProcess::spawn(), crashing, WorkerProcess::spawn()];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let mut options = test_options(urls, tables.to_vec());
    options.retry_policy = RetryPolicy::Task;
    options.spill = SpillSettings {
        dir: spill.path().to_path_buf(),
        limit: 1 << 30,
    };
    let server = coordinator_with(options).await;
    let oracle_ctx = oracle_context(tables).await;
    let mut client = client(&server).await;

    let actual = tokio::time::timeout(DEADLINE, query(&mut client, sql))
        .await
        .expect("no hang")
        .unwrap_or_else(|e| panic!("the query survives the lost worker: {e}"));
    same_rows(&actual, &oracle(&oracle_ctx, sql).await, is_ordered(sql)).unwrap();
    let job = server.coordinator.recent_jobs().pop().unwrap();
    assert_eq!(job.attempts, 1, "no whole-job retry: {job:?}");
    server.shutdown().await.unwrap();
    let left = walk(spill.path());
    assert!(left.is_empty(), "spool files left behind: {left:?}");
    (job.tasks, job.tasks_rerun)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_queries_survive_a_worker_dying_mid_way_rerunning_only_its_tasks() {
    let (_dir, tables) = tpch_data(0.01);
    for (sql, crash_after) in [
        (tpch_query(9), 2),
        (tpch_query(18), 2),
        (tpch_query(21), 2),
        ("SELECT * FROM lineitem".to_string(), 2),
    ] {
        let (tasks, rerun) = survives_a_crash(&tables, &sql, crash_after).await;
        eprintln!(
            "{tasks} tasks, {rerun} run again: {}",
            sql.lines().next().unwrap()
        );
        assert!(rerun > 0, "the crash cost some tasks: {sql}");
        assert!(
            (rerun as usize) < tasks,
            "only the lost tasks and their readers run again ({rerun} of {tasks}): {sql}"
        );
    }
}

/// In the fault-tolerant mode too, a client that hangs up and a query
/// timeout stop every task and free every retained output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_up_and_timeout_leave_no_retained_output_behind() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = test_options(vec![], tables);
    options.retry_policy = RetryPolicy::Task;
    options.limits.query_timeout = Some(Duration::from_secs(2));
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    drop(start_large_query(&mut client).await);
    assert_workers_idle(&server, Duration::from_secs(30), "the client hung up").await;

    let mut stream = start_large_query(&mut client).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let error = tokio::time::timeout(Duration::from_secs(60), first_error(&mut stream))
        .await
        .expect("the stream ends");
    let error = error.expect("stopped by the timeout");
    assert!(error.contains("--query-timeout"), "{error}");
    assert_workers_idle(&server, Duration::from_secs(30), "a query timeout").await;
    server.shutdown().await.unwrap();
}

/// Retained outputs past the workers' memory share spill to disk, and the
/// result past the coordinator's spool memory spools to disk: the query
/// completes under a small --worker-memory-limit and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_outputs_past_memory_spill_and_the_answer_is_complete() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = test_options(vec![], tables.clone());
    options.retry_policy = RetryPolicy::Task;
    // A quarter of it (4 MB) is the retained outputs' share.
    options.worker_memory_limit = Some(16 << 20);
    options.settings = ["", "_rows"]
        .map(|suffix| {
            let key = format!("datafusion.optimizer.hash_join_single_partition_threshold{suffix}");
            (key, "0".to_string())
        })
        .to_vec();
    // Both tables are in `orderkey` order: split by key range, neither
    // would cross an exchange.
    options
        .settings
        .push(("squadron.key_range_splits".into(), "false".into()));
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    // A partitioned join: all of lineitem crosses a hash exchange, several
    // times the share. (A final stage's own output is not retained: the
    // coordinator runs a lost final task again itself.)
    let sql = "SELECT l.*, o_orderdate FROM lineitem l JOIN orders o ON l_orderkey = o_orderkey";
    // The workers' execution memory, sampled while the query runs.
    let workers: Vec<_> = squadron_cluster_tests::workers(&server)
        .into_iter()
        .cloned()
        .collect();
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (workers, peak) = (workers.clone(), Arc::clone(&peak));
        tokio::spawn(async move {
            loop {
                for worker in &workers {
                    peak.fetch_max(worker.memory_reserved(), Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let actual = tokio::time::timeout(Duration::from_secs(120), query(&mut client, sql))
        .await
        .expect("no hang")
        .expect("the query completes by spilling");
    let oracle_ctx = oracle_context(&tables).await;
    same_rows(&actual, &oracle(&oracle_ctx, sql).await, false).unwrap();
    sampler.abort();
    let peak = peak.load(Ordering::Relaxed);
    let spilled: u64 = workers.iter().map(|w| w.spilled_bytes()).sum();
    eprintln!("peak worker memory {peak} bytes, {spilled} bytes spilled");
    assert!(spilled > 0, "the retained outputs spilled");
    assert!(peak <= 16 << 20, "memory stayed under the limit: {peak}");
    assert_workers_idle(&server, Duration::from_secs(30), "the query").await;
    server.shutdown().await.unwrap();
}

/// A statement that writes files keeps whole-job retry in the
/// fault-tolerant mode (a task's files outlive it): a worker lost while it
/// runs costs one more attempt, and the table holds every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_the_fault_tolerant_mode_is_retried_whole_and_written_once() {
    let (_dir, tables) = tpch_data(0.01);
    let warehouse = tempfile::tempdir().unwrap();
    let location = warehouse.path().to_str().unwrap();
    let args = ["--insecure", "--warehouse", location];
    let crash = [("SQUADRON_TEST_FAILPOINT", "crash-on-task=1")];
    let workers = [
        WorkerProcess::spawn_args("127.0.0.1:0", &[], &args),
        WorkerProcess::spawn_args("127.0.0.1:0", &crash, &args),
        WorkerProcess::spawn_args("127.0.0.1:0", &[], &args),
    ];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let mut options = test_options(urls, tables.clone());
    options.retry_policy = RetryPolicy::Task;
    options.data_dir = Some(warehouse.path().to_path_buf());
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    let sql = "CREATE TABLE copied AS SELECT * FROM lineitem".to_string();
    tokio::time::timeout(DEADLINE, client.execute_update(sql, None))
        .await
        .expect("no hang")
        .expect("the write survives the lost worker");
    let job = server.coordinator.recent_jobs().pop().unwrap();
    assert_eq!(job.attempts, 2, "the write ran again whole: {job:?}");
    assert_eq!(job.tasks_rerun, 0, "{job:?}");
    let count = "SELECT count(*) AS n FROM copied";
    let actual = query(&mut client, count).await.unwrap();
    let oracle_ctx = oracle_context(&tables).await;
    let expected = oracle(&oracle_ctx, "SELECT count(*) AS n FROM lineitem").await;
    same_rows(&actual, &expected, false).unwrap();
    server.shutdown().await.unwrap();
}
