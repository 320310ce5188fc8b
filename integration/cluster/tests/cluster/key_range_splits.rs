//! Joins and aggregates on `orderkey`, which the TPC-H files are written
//! in order of, split by key range instead of shuffled, through a real
//! coordinator and workers: the plans show the splits (and a shuffle
//! routed by range where one side cannot be split), and the TPC-H queries
//! answer as single-node DataFusion does with the splits on and off.

use crate::support::{
    client, coordinator, distributed_plan, explain_rows, oracle_context, query, tpch_data,
    tpch_mismatches, tpch_query,
};
use squadron_cluster_tests::explained::dynamic_filters_over_scans;

/// Files split into ranges however small, and every join partitioned: at
/// SF0.01 each table would be one partition and every join collected.
const PARTITIONED: &[&str] = &[
    "SET datafusion.optimizer.repartition_file_min_size = 0",
    "SET datafusion.optimizer.hash_join_single_partition_threshold = 0",
    "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
];

fn stages(plan: &str) -> usize {
    plan.lines()
        .filter(|line| line.starts_with("Stage "))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_on_the_order_key_read_ranges_and_answer_as_the_oracle() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables.clone()).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut on = client(&server).await;
    let mut off = client(&server).await;
    for sql in PARTITIONED {
        query(&mut on, sql).await.unwrap();
        query(&mut off, sql).await.unwrap();
    }
    query(&mut off, "SET squadron.key_range_splits = false")
        .await
        .unwrap();

    // q3: lineitem split, joined where it is read (orders, one row group
    // at this scale, comes shuffled by range).
    let q3 = format!("EXPLAIN {}", tpch_query(3));
    let split = distributed_plan(&query(&mut on, &q3).await.unwrap());
    let whole = distributed_plan(&query(&mut off, &q3).await.unwrap());
    assert!(split.contains("UnionExec"), "{split}");
    assert!(split.contains("l_orderkey@0 <"), "{split}");
    assert!(!whole.contains("UnionExec"), "{whole}");
    assert!(stages(&split) < stages(&whole), "{split}\n{whole}");
    // q18: lineitem split; customer ⋈ orders (keyed by o_custkey below)
    // shuffled by the same ranges.
    let q18 = format!("EXPLAIN {}", tpch_query(18));
    let split = distributed_plan(&query(&mut on, &q18).await.unwrap());
    assert!(split.contains("UnionExec"), "{split}");
    assert!(split.contains("Hash([CASE WHEN o_orderkey"), "{split}");

    let failures = tpch_mismatches(
        &oracle_ctx,
        1..=22,
        &mut [("on", &mut on), ("off", &mut off)],
    )
    .await;
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    server.shutdown().await.unwrap();
}

/// TPC-H q21 as it runs at SF10, `lineitem` and `orders` split by key
/// range: `supplier ⋈ (orders ⋈ l1)` in one task. The supplier join's
/// filter (the suppliers of one nation) reaches the `l1` scans under the
/// join below it and drops their rows there, before that join probes
/// them; the answers are the oracle's with dynamic filters on and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_filter_drops_the_rows_of_scans_under_the_join_below_it() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables.clone()).await;
    let oracle_ctx = oracle_context(&tables).await;
    let mut on = client(&server).await;
    let mut off = client(&server).await;
    // Small build sides (supplier ⋈ nation) collected, orders ⋈ lineitem
    // partitioned, as at SF10.
    let settings = [
        "SET datafusion.optimizer.repartition_file_min_size = 0",
        "SET datafusion.optimizer.hash_join_single_partition_threshold = 0",
        "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 1000",
    ];
    for sql in settings {
        query(&mut on, sql).await.unwrap();
        query(&mut off, sql).await.unwrap();
    }
    query(&mut off, "SET squadron.dynamic_filters = false")
        .await
        .unwrap();

    let explained = query(
        &mut on,
        &format!("EXPLAIN ANALYZE VERBOSE {}", tpch_query(21)),
    )
    .await
    .unwrap();
    let (scanned, kept) = dynamic_filters_over_scans(&explained, "lineitem");
    let plan = explain_rows(&explained)
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join("\n");
    // One nation's suppliers are about a twenty-fifth of them.
    assert!(scanned > 0, "no filter over a lineitem scan:\n{plan}");
    assert!(kept * 5 < scanned, "{kept} of {scanned} rows kept:\n{plan}");

    let failures =
        tpch_mismatches(&oracle_ctx, [21], &mut [("on", &mut on), ("off", &mut off)]).await;
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
    server.shutdown().await.unwrap();
}
