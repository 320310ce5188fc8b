//! `COPY (query) TO …` through Flight SQL: the query runs on the workers,
//! the files come out as single-node DataFusion writes them (formats,
//! partitioned directories), and only under the server's data roots.

use datafusion::arrow::util::pretty::pretty_format_batches;
use squadron_exec::plan::guard::DataRoots;
use tonic::Code;

use crate::support::{
    client, coordinator_with, oracle, oracle_context, query, test_options, tpch_data,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_writes_files_single_node_datafusion_reads_the_same() {
    let (_data, tables) = tpch_data(0.01);
    let out = tempfile::tempdir().unwrap();
    let catalog = tempfile::tempdir().unwrap();
    let mut options = test_options(vec![], tables.clone());
    options.data_dir = Some(catalog.path().to_path_buf());
    options.table_roots = Some(DataRoots::new(&[out.path().to_path_buf()]).unwrap());
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    let by_flag = out.path().join("by_flag");
    let copy = format!(
        "COPY (SELECT l_returnflag, l_orderkey, l_quantity FROM lineitem WHERE l_orderkey % 2 = 0) \
         TO '{}' STORED AS PARQUET PARTITIONED BY (l_returnflag)",
        by_flag.display()
    );
    let written = query(&mut client, &copy).await.unwrap();
    let oracle_ctx = oracle_context(&tables).await;
    let expected_rows = oracle(
        &oracle_ctx,
        "SELECT count(*) AS count FROM lineitem WHERE l_orderkey % 2 = 0",
    )
    .await;
    assert_eq!(
        pretty_format_batches(&written).unwrap().to_string(),
        pretty_format_batches(&expected_rows)
            .unwrap()
            .to_string()
            .replace("count(*)", "count"),
    );
    // Hive-style directories, one per flag, read back by DataFusion alone.
    let flags: Vec<String> = std::fs::read_dir(&by_flag)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        flags.iter().all(|d| d.starts_with("l_returnflag=")),
        "{flags:?}"
    );
    assert_eq!(flags.len(), 3, "{flags:?}");
    // Every task wrote its own files (the rows are not gathered into one
    // writer): a flag's directory holds a file from each task that read
    // rows of it.
    let files: usize = flags
        .iter()
        .map(|flag| std::fs::read_dir(by_flag.join(flag)).unwrap().count())
        .sum();
    assert!(files > flags.len(), "{files} files in {flags:?}");
    oracle_ctx
        .sql(&format!(
            "CREATE EXTERNAL TABLE copied STORED AS PARQUET LOCATION '{}/'",
            by_flag.display()
        ))
        .await
        .unwrap();
    let sum = "SELECT l_returnflag, sum(l_quantity) AS q FROM {} \
               WHERE l_orderkey % 2 = 0 GROUP BY 1 ORDER BY 1";
    assert_eq!(
        pretty_format_batches(&oracle(&oracle_ctx, &sum.replace("{}", "copied")).await)
            .unwrap()
            .to_string(),
        pretty_format_batches(&oracle(&oracle_ctx, &sum.replace("{}", "lineitem")).await)
            .unwrap()
            .to_string()
    );

    // An ORDER BY's rows are written in its order, by the one writer
    // DataFusion uses (the files' own order alone lets each task write).
    let sorted = out.path().join("sorted");
    let copy = format!(
        "COPY (SELECT o_orderkey FROM orders ORDER BY o_orderkey DESC) TO '{}' STORED AS CSV",
        sorted.display()
    );
    query(&mut client, &copy).await.unwrap();
    let mut keys = 0;
    for file in std::fs::read_dir(&sorted).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        let file_keys: Vec<i64> = text.lines().skip(1).map(|l| l.parse().unwrap()).collect();
        assert!(
            file_keys.windows(2).all(|w| w[0] > w[1]),
            "not in descending order"
        );
        keys += file_keys.len();
    }
    assert_eq!(keys, 15_000);

    // CSV too, as a client's ordinary query.
    let csv = out.path().join("nation.csv");
    let copy = format!("COPY nation TO '{}' STORED AS CSV", csv.display());
    query(&mut client, &copy).await.unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 26, "a header and 25 nations");

    // Outside the data roots: refused before anything is written.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("stolen.csv");
    let copy = format!("COPY nation TO '{}' STORED AS CSV", target.display());
    let err = query(&mut client, &copy).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert!(err.message().contains("--data-root"), "{err}");
    assert!(!target.exists());
}
