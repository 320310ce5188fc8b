//! Every way a query can end leaves nothing behind: after a query timeout,
//! a dispatch that stopped half-way, and a query over the memory limit, no
//! worker runs a task or holds a stream of it, and the next query works.

use std::time::{Duration, Instant};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;

use crate::support::{
    assert_no_running_jobs, assert_workers_idle, client, coordinator_with, first_error, query,
    start_large_query, test_options, tpch_data,
};
use arrow_flight::{Action, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus};
use futures::TryStreamExt;
use prost::Message;
use squadron_server::RunningServer;
use squadron_worker::{spawn_worker, WorkerOptions};
use tonic::Code;

const IDLE_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_timeout_stops_the_job_on_every_worker() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = test_options(vec![], tables);
    options.limits.query_timeout = Some(Duration::from_secs(1));
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    // The client reads one batch and then stalls: the job waits on it until
    // the timeout stops it.
    let mut stream = start_large_query(&mut client).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let error = tokio::time::timeout(Duration::from_secs(30), first_error(&mut stream))
        .await
        .expect("the stream ends");
    let error = error.expect("the query was stopped, not completed");
    assert!(error.contains("--query-timeout"), "{error}");
    assert_workers_idle(&server, IDLE_WITHIN, "a query timeout").await;
    assert!(query(
        &mut client,
        "SELECT count(*) FROM nation WHERE n_regionkey >= 0"
    )
    .await
    .is_ok());
    assert_no_running_jobs(&server, Duration::from_secs(10)).await;
    server.shutdown().await.unwrap();
}

/// A plan over constants runs on the coordinator, not on a worker; however
/// long it computes, the query timeout stops it, the thread it ran on is
/// free again at once, and the coordinator answers other clients
/// meanwhile. Two such plans at once take every thread plans run on (one
/// per core, 2 in CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_plan_on_the_coordinator_is_stopped_by_the_query_timeout() {
    let mut options = test_options(vec![], vec![]);
    options.limits.query_timeout = Some(Duration::from_secs(2));
    let server = coordinator_with(options).await;
    let started = Instant::now();
    let mut heavy = vec![];
    for _ in 0..2 {
        let mut heavy_client = client(&server).await;
        heavy.push(tokio::spawn(async move {
            query(&mut heavy_client, &endless_sql()).await
        }));
    }
    let mut client = client(&server).await;
    let forty_two = async |client: &mut _| {
        let answer = tokio::time::timeout(Duration::from_secs(10), query(client, "SELECT 40 + 2"))
            .await
            .expect("the coordinator answers")
            .expect("a query over constants");
        answer[0].column(0).as_primitive::<Int64Type>().value(0)
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(forty_two(&mut client).await, 42, "while the plans compute");

    for heavy in heavy {
        let error = tokio::time::timeout(Duration::from_secs(30), heavy)
            .await
            .expect("the timeout stops the plan")
            .unwrap()
            .expect_err("far too long to finish");
        assert_eq!(error.code(), Code::DeadlineExceeded, "{error}");
        assert!(error.message().contains("--query-timeout"), "{error}");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    no_running_jobs_within(&server, IDLE_WITHIN, "a stopped query keeps its slot").await;
    // Within the 2 s timeout: the stopped plans no longer hold threads.
    assert_eq!(forty_two(&mut client).await, 42, "after they were stopped");
    server.shutdown().await.unwrap();
}

/// Waits until the coordinator runs no job, failing with `why` after
/// `within`.
async fn no_running_jobs_within(server: &RunningServer, within: Duration, why: &str) {
    let deadline = Instant::now() + within;
    while server.coordinator.running_jobs() > 0 {
        assert!(Instant::now() < deadline, "{why}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A statement over constants only, run on the coordinator, that computes
/// for hours: 300⁴ = 8.1 billion combinations.
fn endless_sql() -> String {
    let values = (1..=300).map(|i| format!("({i})")).collect::<Vec<_>>();
    let values = format!("(VALUES {})", values.join(", "));
    format!(
        "SELECT count(*) FROM {values} a(x), {values} b(y), {values} c(z), {values} d(w) \
         WHERE x + y + z + w > 0"
    )
}

/// A plan over constants whose work is in proportion to its input runs in
/// the request that reads it (`LocalRun::AsRead`): the query timeout stops
/// it there too (at its next yield: here after its one batch), and it
/// leaves the running jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_computed_as_it_is_read_is_stopped_by_the_query_timeout() {
    let mut options = test_options(vec![], vec![]);
    options.limits.query_timeout = Some(Duration::from_millis(50));
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;
    // 4 million characters rewritten one by one in one batch: seconds of
    // work, far longer than 50 ms, inside one poll. (Once the complete
    // answer came back: the stop's timer had not been seen fired when the
    // one-batch stream ended; the deadline is now checked as a time.)
    let rows = vec!["('ab')"; 20].join(", ");
    let sql = format!(
        "SELECT sum(length(regexp_replace(repeat(x, 100000), '[a-z]', 'yy', 'g'))) \
         FROM (VALUES {rows}) t(x)"
    );
    let error = tokio::time::timeout(Duration::from_secs(120), query(&mut client, &sql))
        .await
        .expect("the query ends")
        .expect_err("stopped past the timeout");
    assert_eq!(error.code(), Code::DeadlineExceeded, "{error}");
    assert!(error.message().contains("--query-timeout"), "{error}");
    no_running_jobs_within(&server, IDLE_WITHIN, "a stopped query keeps its slot").await;
    let answer = query(&mut client, "SELECT 40 + 2").await.unwrap();
    assert_eq!(answer[0].column(0).as_primitive::<Int64Type>().value(0), 42);
    server.shutdown().await.unwrap();
}

/// The plans the coordinator runs itself have a memory pool: one that
/// needs more fails with RESOURCE_EXHAUSTED (the coordinator does not
/// spill), while other queries, on the coordinator and on the workers,
/// go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_on_the_coordinator_past_its_memory_limit_is_resource_exhausted() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = test_options(vec![], tables);
    options.coordinator_memory_limit = 16 << 20;
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;
    // Constants only, so it runs here: sorting eight strings of 8 MB.
    let rows = [
        "('a')", "('b')", "('c')", "('d')", "('e')", "('f')", "('g')", "('h')",
    ];
    let sort = format!(
        "SELECT length(s) FROM (SELECT repeat(x, 8000000) AS s FROM (VALUES {}) t(x)) \
         ORDER BY s",
        rows.join(", ")
    );
    let mut sort_client = client.clone();
    let sorting = tokio::spawn(async move { query(&mut sort_client, &sort).await });
    let nations = query(
        &mut client,
        "SELECT count(*) FROM nation WHERE n_regionkey >= 0",
    )
    .await
    .expect("a query on the workers meanwhile");
    assert_eq!(
        nations[0].column(0).as_primitive::<Int64Type>().value(0),
        25
    );
    let error = tokio::time::timeout(Duration::from_secs(60), sorting)
        .await
        .expect("refused, not grown")
        .unwrap()
        .expect_err("more than the limit");
    assert_eq!(error.code(), Code::ResourceExhausted, "{error}");
    let small = "SELECT max(x) FROM (SELECT x FROM (VALUES (1000), (7)) t(x) ORDER BY x DESC)";
    let answer = query(&mut client, small).await.expect("a sort that fits");
    assert_eq!(
        answer[0].column(0).as_primitive::<Int64Type>().value(0),
        1000
    );
    assert_no_running_jobs(&server, Duration::from_secs(10)).await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_plan_on_the_coordinator_stops_when_cancelled() {
    let server = coordinator_with(test_options(vec![], vec![])).await;
    let mut client = client(&server).await;
    let info = client.execute(endless_sql(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let mut reader = client.clone();
    let reading = tokio::spawn(async move {
        let stream = reader.do_get(ticket).await?;
        stream.try_collect::<Vec<_>>().await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.coordinator.running_jobs(), 1);

    let cancel = CancelFlightInfoRequest { info: Some(info) };
    let answer = client
        .do_action(Action::new("CancelFlightInfo", cancel.encode_to_vec()))
        .await
        .expect("CancelFlightInfo")
        .try_collect::<Vec<_>>()
        .await
        .expect("its answer");
    let answer = CancelFlightInfoResult::decode(answer[0].body.clone()).unwrap();
    assert_eq!(answer.status(), CancelStatus::Cancelled);
    let error = tokio::time::timeout(Duration::from_secs(30), reading)
        .await
        .expect("cancelling ends the stream")
        .unwrap()
        .expect_err("cancelled, not completed");
    assert!(error.to_string().contains("cancelled"), "{error}");
    no_running_jobs_within(&server, IDLE_WITHIN, "the cancelled query keeps its slot").await;
    server.shutdown().await.unwrap();
}

/// A worker that never answers is in the placement (workers count as up
/// until a probe says otherwise): dispatch fails part-way, after tasks on
/// the live worker were accepted. Those must stop; with retries the query
/// then runs on the live worker alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_that_fails_half_way_stops_what_it_started() {
    let (_dir, tables) = tpch_data(0.01);
    let (live_url, live) = spawn_worker("127.0.0.1:0".parse().unwrap(), WorkerOptions::default())
        .await
        .unwrap();
    let dead_url = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let mut options = test_options(vec![live_url.clone(), dead_url.clone()], tables);
    options.limits.max_attempts = 1;
    options.health_interval = Duration::from_secs(3600);
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    let err = query(
        &mut client,
        "SELECT count(*) FROM lineitem, orders WHERE l_orderkey = o_orderkey",
    )
    .await
    .expect_err("one attempt, and a worker that is not there");
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.message().contains(&dead_url), "{err}");
    wait_idle(&live).await;

    // The dead worker is now known lost: the next query runs on the other.
    let batches = query(
        &mut client,
        "SELECT count(*) AS n FROM nation WHERE n_regionkey >= 0",
    )
    .await
    .expect("placed on the live worker only");
    assert_eq!(batches[0].num_rows(), 1);
    wait_idle(&live).await;
    server.shutdown().await.unwrap();
}

async fn wait_idle(worker: &squadron_worker::Worker) {
    let deadline = std::time::Instant::now() + IDLE_WITHIN;
    while worker.tasks.len() + worker.streams.len() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} tasks and {} streams left",
            worker.tasks.len(),
            worker.streams.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_over_the_memory_limit_fails_and_others_keep_running() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = test_options(vec![], tables);
    options.worker_memory_limit = Some(3 << 20);
    // Partitioned, whatever the size estimates say: each worker then
    // builds half of the join's build side, a known amount.
    options.settings = ["", "_rows"]
        .iter()
        .map(|suffix| {
            let key = format!("datafusion.optimizer.hash_join_single_partition_threshold{suffix}");
            (key, "0".to_string())
        })
        .collect();
    let server = coordinator_with(options).await;
    let mut big_client = client(&server).await;
    let mut small_client = client(&server).await;

    // A hash join whose build side (lineitem's 60 K rows with four text
    // columns, ~4 MiB, half of it per worker plus the hash table) cannot
    // spill and needs more than the limit.
    let big = query(
        &mut big_client,
        "SELECT count(*), max(length(a.l_comment || a.l_shipinstruct || a.l_shipmode \
         || b.l_comment || b.l_shipinstruct || b.l_shipmode)) \
         FROM lineitem a JOIN lineitem b ON a.l_comment = b.l_comment",
    );
    let small = async {
        let mut ok = 0;
        for _ in 0..5 {
            if query(
                &mut small_client,
                "SELECT count(*) AS n FROM region WHERE r_regionkey >= 0",
            )
            .await
            .is_ok()
            {
                ok += 1;
            }
        }
        ok
    };
    let (big, ok) = futures::future::join(big, small).await;
    let err = big.expect_err("the join needs more memory than the limit");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert_eq!(ok, 5, "small queries kept running");
    assert_workers_idle(&server, IDLE_WITHIN, "a query over the memory limit").await;
    server.shutdown().await.unwrap();
}
