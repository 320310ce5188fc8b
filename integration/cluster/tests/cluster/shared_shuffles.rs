//! A subtree the plan holds twice (TPC-H q15's `revenue0`, a CTE used
//! twice) is one shuffle stage that both uses read, each on channels of
//! its own: `lineitem` is scanned once, and the answer is the oracle's,
//! with stages streaming and in the fault-tolerant mode (retained outputs
//! read again from the start).

use squadron_cluster_tests::answers::{is_ordered, same_rows};
use squadron_cluster_tests::explained::rows_scanned;

use crate::support::{client, distributed_plan, oracle, query, tpch_on_two_workers, tpch_query};

/// Each TPC-H file at SF0.01 is one partition: with this the scans split
/// and the aggregate shuffles, as at larger scales.
const SPLIT_FILES: &str = "SET datafusion.optimizer.repartition_file_min_size = 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cte_used_twice_is_one_stage_read_by_both_uses() {
    let cluster = tpch_on_two_workers(0.01).await;
    let mut client = client(&cluster.server).await;
    query(&mut client, SPLIT_FILES).await.unwrap();
    let sql = tpch_query(15);
    let expected = oracle(&cluster.oracle, &sql).await;

    let plan = distributed_plan(&query(&mut client, &format!("EXPLAIN {sql}")).await.unwrap());
    let lineitem_scans = plan
        .lines()
        .filter(|l| l.contains("DataSourceExec") && l.contains("lineitem"))
        .count();
    assert_eq!(lineitem_scans, 1, "{plan}");
    assert!(plan.contains(") x2 consumers"), "{plan}");
    let second_reads = plan
        .lines()
        .filter(|l| l.contains("mode=shuffle") && l.contains("first_channel="))
        .count();
    assert_eq!(second_reads, 1, "{plan}");

    for retry_policy in ["query", "task"] {
        let set = format!("SET squadron.retry_policy = '{retry_policy}'");
        query(&mut client, &set).await.unwrap();
        let actual = query(&mut client, &sql).await.unwrap();
        same_rows(&actual, &expected, is_ordered(&sql))
            .unwrap_or_else(|diff| panic!("{retry_policy}: {diff}"));
    }
    let explained = query(&mut client, &format!("EXPLAIN ANALYZE VERBOSE {sql}"))
        .await
        .unwrap();
    let lineitem_rows = 60_175;
    let scanned = rows_scanned(&explained, "lineitem");
    assert!(
        scanned <= lineitem_rows,
        "lineitem scanned once per use: {scanned} rows"
    );
    cluster.server.shutdown().await.unwrap();
}
