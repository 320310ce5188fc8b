//! 32 concurrent clients mixing short and TPC-H queries get correct
//! answers or, beyond the admission limits, an immediate RESOURCE_EXHAUSTED;
//! afterwards nothing is left running.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{
    assert_no_running_jobs, assert_workers_idle, client, coordinator_with, oracle, oracle_context,
    query, test_options, tpch_data, tpch_query,
};
use squadron_cluster_tests::answers::{is_ordered, same_rows};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_clients_get_answers_or_admission_errors() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = test_options(vec![], tables.clone());
    options.limits.max_concurrent_queries = 8;
    options.limits.max_queued_queries = 16;
    let server = Arc::new(coordinator_with(options).await);
    let oracle_ctx = oracle_context(&tables).await;

    let mix: Vec<String> = vec![
        "SELECT count(*) AS n FROM nation WHERE n_regionkey >= 0".into(),
        "SELECT o_totalprice FROM orders WHERE o_orderkey = 7".into(),
        "SELECT r_name FROM region ORDER BY r_name".into(),
        tpch_query(1),
        tpch_query(6),
        tpch_query(3),
        tpch_query(12),
    ];
    let mut expected = vec![];
    for sql in &mix {
        expected.push(oracle(&oracle_ctx, sql).await);
    }
    let cases = Arc::new(mix.into_iter().zip(expected).collect::<Vec<_>>());

    let until = Instant::now() + Duration::from_secs(8);
    let clients = (0..32).map(|c| {
        let server = Arc::clone(&server);
        let cases = Arc::clone(&cases);
        tokio::spawn(async move {
            let mut client = client(&server).await;
            let (mut ok, mut refused, mut i) = (0, 0, c);
            while Instant::now() < until {
                let (sql, expected) = &cases[i % cases.len()];
                i += 1;
                match query(&mut client, sql).await {
                    Ok(actual) => {
                        same_rows(&actual, expected, is_ordered(sql))
                            .unwrap_or_else(|d| panic!("client {c}: {sql}: {d}"));
                        ok += 1;
                    }
                    Err(e) if e.code() == Code::ResourceExhausted => refused += 1,
                    Err(e) => panic!("client {c}: {sql}: {e}"),
                }
            }
            (ok, refused)
        })
    });
    let results = futures::future::join_all(clients).await;
    let (ok, refused) = results.into_iter().fold((0, 0), |(a, b), r| {
        let (o, f) = r.expect("a client task");
        (a + o, b + f)
    });
    eprintln!("32 clients for 8s: {ok} answers, {refused} admission refusals");
    assert!(ok > 32, "answers were served: {ok}");
    assert_workers_idle(&server, Duration::from_secs(30), "the load").await;
    assert_no_running_jobs(&server, Duration::from_secs(10)).await;
}
