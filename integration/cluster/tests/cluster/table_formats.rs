//! Tables registered from CSV and Parquet files and directories are scanned
//! by the workers and give the single-node answer.

use std::io::Write;

use crate::support::{client, coordinator, oracle, oracle_context, query};
use squadron_cluster_tests::answers::same_rows;
use squadron_server::catalog::TableSpec;

fn write_csv_dir(dir: &std::path::Path) {
    for part in 0..3 {
        let mut f = std::fs::File::create(dir.join(format!("part-{part}.csv"))).unwrap();
        writeln!(f, "id,city,amount").unwrap();
        for i in 0..500 {
            let id = part * 500 + i;
            writeln!(f, "{id},city{},{}.25", id % 7, id % 13).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_directory_and_parquet_file_tables() {
    let dir = tempfile::tempdir().unwrap();
    let csv_dir = dir.path().join("sales");
    std::fs::create_dir(&csv_dir).unwrap();
    write_csv_dir(&csv_dir);
    let (_tpch, tpch_tables) = crate::support::tpch_data(0.001);
    let nation = tpch_tables.iter().find(|t| t.name == "nation").unwrap();
    let tables: Vec<TableSpec> = vec![
        format!("sales={}", csv_dir.display()).parse().unwrap(),
        format!("nations={}", nation.location).parse().unwrap(),
    ];
    let server = coordinator(vec![], tables.clone()).await;
    let mut client = client(&server).await;
    let ctx = oracle_context(&tables).await;

    for sql in [
        "SELECT city, count(*) AS n, sum(amount) AS total FROM sales GROUP BY city",
        "SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM sales",
        "SELECT s.id, n.n_name FROM sales s JOIN nations n ON s.id = n.n_nationkey ORDER BY s.id",
    ] {
        let actual = query(&mut client, sql).await.unwrap();
        let expected = oracle(&ctx, sql).await;
        same_rows(&actual, &expected, sql.contains("ORDER BY"))
            .unwrap_or_else(|d| panic!("{sql}: {d}"));
    }
    server.shutdown().await.unwrap();
}
