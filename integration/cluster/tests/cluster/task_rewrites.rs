//! What a task changes in its plan for speed alone: decimal arithmetic in
//! 64 bits (`squadron.narrow_decimals`), `LIKE` patterns of several
//! literals as substring searches (`squadron.like_substrings`) and filter
//! terms in the order their batches show is cheapest
//! (`squadron.adaptive_filters`). The answers are the oracle's with all
//! on and all off, and a filter
//! written with its costly, unselective term first runs its cheap,
//! selective term first.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::record_batch::RecordBatch;

use crate::support::{client, oracle, query, tpch_on_two_workers, tpch_query};
use squadron_cluster_tests::answers::{is_ordered, same_rows};

/// A string comparison that keeps 5/7 of the line items, then a
/// comparison that keeps about one in twelve.
const COSTLY_TERM_FIRST: &str = "SELECT count(*), sum(l_extendedprice * (1 - l_discount)) \
     FROM lineitem WHERE l_shipmode IN ('MAIL', 'SHIP', 'AIR', 'RAIL', 'TRUCK') \
     AND l_quantity < 5";

/// The filters over `l_shipmode` as the tasks ran them (their operator
/// lines, which carry metrics).
fn task_filters(explained: &[RecordBatch]) -> Vec<String> {
    explained
        .iter()
        .flat_map(|b| {
            let plans = b.column(1).as_string::<i32>();
            (0..plans.len())
                .flat_map(|i| {
                    plans
                        .value(i)
                        .lines()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .map(|line| line.trim_start().to_string())
        .filter(|line| {
            line.starts_with("FilterExec: ")
                && line.contains("l_shipmode")
                && line.contains("metrics=")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_hold_with_task_rewrites_on_and_off_and_filters_reorder() {
    let cluster = tpch_on_two_workers(0.01).await;
    let mut on = client(&cluster.server).await;
    let mut off = client(&cluster.server).await;
    query(&mut off, "SET squadron.narrow_decimals = false")
        .await
        .unwrap();
    query(&mut off, "SET squadron.adaptive_filters = false")
        .await
        .unwrap();
    query(&mut off, "SET squadron.like_substrings = false")
        .await
        .unwrap();

    // Decimal arithmetic over every line item (q1), filters of several
    // terms (q6, q12, q19), both in joins (q3, q10).
    let mut sqls: Vec<String> = [1, 3, 6, 10, 12, 19]
        .iter()
        .map(|&n| tpch_query(n))
        .collect();
    sqls.push(COSTLY_TERM_FIRST.to_string());
    for sql in &sqls {
        let expected = oracle(&cluster.oracle, sql).await;
        for (name, session) in [("on", &mut on), ("off", &mut off)] {
            let got = query(session, sql).await.unwrap();
            same_rows(&got, &expected, is_ordered(sql))
                .unwrap_or_else(|e| panic!("rewrites {name}: {e}\n{sql}"));
        }
    }

    // Small batches, so each task sees enough of them to reorder.
    for session in [&mut on, &mut off] {
        query(session, "SET datafusion.execution.batch_size = 1024")
            .await
            .unwrap();
    }
    let explain = format!("EXPLAIN ANALYZE VERBOSE {COSTLY_TERM_FIRST}");
    let ran_on = task_filters(&query(&mut on, &explain).await.unwrap());
    let ran_off = task_filters(&query(&mut off, &explain).await.unwrap());
    assert!(!ran_on.is_empty() && !ran_off.is_empty());
    for line in &ran_on {
        assert!(
            line.starts_with("FilterExec: l_quantity@"),
            "the selective comparison did not move first: {line}"
        );
    }
    for line in &ran_off {
        assert!(
            line.starts_with("FilterExec: l_shipmode@"),
            "the planned order changed with adaptive filters off: {line}"
        );
    }
    cluster.server.shutdown().await.unwrap();
}
