//! `squadron-bench`: Squadron measured through Flight SQL against a
//! coordinator process with two worker processes, side by side with
//! in-process single-node DataFusion in the same run.
//!
//! Suites (all by default): `latency` (SELECT 1 and a point query, p50/p99;
//! the point query where the coordinator puts it, which its EXPLAIN names,
//! then forced onto the workers with `squadron.coordinator_scan_limit = 0`),
//! `concurrency` (8 and 32 clients on short queries, queries/s), `stream`
//! (SELECT * FROM lineitem to the client, with peak memory per process) and
//! `tpch` (the 22 queries). Every answer is checked against DataFusion's.
//! Prints a table per suite and optionally writes every figure as JSON.

mod cluster;
mod duckdb;
mod flight;
mod micro;
mod stats;
mod tpch;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use squadron_server::catalog::tpch as tpch_data;

use cluster::Cluster;
use micro::ShortQuery;

// See the workspace Cargo.toml: large per-query buffers are reused instead
// of being returned to the OS and faulted back in.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(name = "squadron-bench")]
struct Args {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Suites to run, comma separated: latency, concurrency, stream, tpch.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "latency,concurrency,stream,tpch"
    )]
    suites: Vec<String>,
    /// TPC-H runs per query and engine; the median is reported.
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// TPC-H queries to run (default all 22), comma separated numbers.
    #[arg(long, value_delimiter = ',')]
    queries: Vec<usize>,
    /// Round trips per latency figure.
    #[arg(long, default_value_t = 500)]
    latency_runs: usize,
    /// Whole-table streams in the stream suite, each followed by
    /// in-process DataFusion reading the table; medians are reported.
    #[arg(long, default_value_t = 3)]
    stream_runs: usize,
    /// Seconds per concurrency figure.
    #[arg(long, default_value_t = 5.0)]
    concurrency_seconds: f64,
    /// Where the generated data is kept (reused across runs).
    #[arg(long, default_value = "squadron-data")]
    data_dir: PathBuf,
    /// Partitions (tasks) per stage for Squadron; default one per core of
    /// this machine, which its workers share.
    #[arg(long)]
    partitions: Option<usize>,
    /// A DataFusion option for Squadron's coordinator, `KEY=VALUE`
    /// (passed on as its `--set`); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Any other argument for Squadron's coordinator, e.g.
    /// `--server-arg=--coordinator-scan-limit=0`; repeatable.
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Where the TPC-H query files are.
    #[arg(long, default_value = "testdata/tpch")]
    query_dir: PathBuf,
    /// Also write every figure to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also run each TPC-H query on DuckDB, interleaved, over the same
    /// files: the path of a Python that has the `duckdb` package
    /// (`integration/bench/requirements.txt`).
    #[arg(long, value_name = "PYTHON")]
    duckdb: Option<PathBuf>,
    /// Also run each TPC-H query with `squadron.dynamic_filters` off, in a
    /// session of its own, interleaved, and count the rows every scan read
    /// either way (one EXPLAIN ANALYZE each, outside the timings).
    #[arg(long)]
    dynamic_filters_ab: bool,
    /// The same with `squadron.join_reorder` off (joins in the order the
    /// query lists them) instead.
    #[arg(long, conflicts_with = "dynamic_filters_ab")]
    join_reorder_ab: bool,
    /// The same with `squadron.key_range_splits` off (joins and
    /// aggregates on a key the files are ordered by shuffled, not split by
    /// key range) instead.
    #[arg(long, conflicts_with_all = ["dynamic_filters_ab", "join_reorder_ab"])]
    key_range_splits_ab: bool,
    /// Run the cluster secured: client TLS with a password login, mutual
    /// TLS between coordinator and workers (certificates made for the run).
    #[arg(long)]
    secure: bool,
}

const SUITES: [&str; 4] = ["latency", "concurrency", "stream", "tpch"];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    squadron_common::logging::init();
    let args = Args::parse();
    // Interrupted, the run returns so the cluster's processes are dropped
    // (killed) instead of outliving the benchmark.
    tokio::select! {
        result = run(args) => result,
        _ = squadron_common::shutdown::termination() => {
            anyhow::bail!("interrupted")
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(bad) = args.suites.iter().find(|s| !SUITES.contains(&s.as_str())) {
        anyhow::bail!("unknown suite {bad:?}; choose from {}", SUITES.join(", "));
    }
    let wants = |suite: &str| args.suites.iter().any(|s| s == suite);
    let dir = args.data_dir.join(format!("tpch-sf{}", args.scale));
    eprintln!("data: {} (generating if missing)", dir.display());
    let tables = tpch_data::generate(&dir, args.scale)?;
    let partitions = args
        .partitions
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let mut coordinator_args: Vec<String> = args
        .settings
        .iter()
        .flat_map(|setting| ["--set".to_string(), setting.clone()])
        .collect();
    coordinator_args.extend(args.server_args.iter().cloned());
    let cluster = Cluster::start(
        &args.data_dir,
        args.scale,
        partitions,
        &coordinator_args,
        args.secure,
    )?;
    let mut client = cluster.client().await?;
    let transport = if cluster.is_secure() {
        "TLS + login, cluster mTLS"
    } else {
        "plaintext"
    };
    println!(
        "Squadron: coordinator process + 2 worker processes, loopback, {transport}, \
         {partitions} tasks per stage | TPC-H SF{}",
        args.scale
    );
    let mut results = serde_json::Map::new();
    results.insert("machine".into(), machine());
    results.insert("scale".into(), json!(args.scale));
    results.insert("tasks_per_stage".into(), json!(partitions));
    results.insert("secure".into(), json!(cluster.is_secure()));
    let point = ShortQuery::PointLookup {
        customers: (150_000.0 * args.scale).max(1.0) as u64,
    };
    let lineitem_lookup = ShortQuery::LineitemLookup {
        orders: (1_500_000.0 * args.scale).max(1.0) as u64,
    };

    // In-process single-node DataFusion over the same files, interleaved
    // with Squadron in the latency and stream suites.
    let local = datafusion::prelude::SessionContext::new();
    for t in &tables {
        t.register(&local).await?;
    }

    if wants("latency") {
        println!(
            "\n== latency (one client, round trip: GetFlightInfo + DoGet; \
             in-process DataFusion interleaved)"
        );
        let mut figures = vec![];
        for query in [ShortQuery::SelectOne, point, lineitem_lookup] {
            figures.push(
                micro::latency(
                    &mut client,
                    &local,
                    &cluster.pids(),
                    query,
                    args.latency_runs,
                )
                .await?,
            );
        }
        // The same lookup forced onto the workers in a session of its own:
        // the cost of distributing a lookup.
        let mut on_workers = cluster.client().await?;
        flight::collect(&mut on_workers, "SET squadron.coordinator_scan_limit = 0").await?;
        for query in [point, lineitem_lookup] {
            figures.push(
                micro::latency(
                    &mut on_workers,
                    &local,
                    &cluster.pids(),
                    query,
                    args.latency_runs,
                )
                .await?,
            );
        }
        results.insert("latency".into(), Value::Array(figures));
    }
    if wants("concurrency") {
        println!("\n== concurrency (each client on its own connection)");
        let duration = Duration::from_secs_f64(args.concurrency_seconds);
        let mut figures = vec![];
        for query in [ShortQuery::SelectOne, point] {
            for clients in [8, 32] {
                figures.push(micro::concurrent(&cluster, &local, query, clients, duration).await?);
            }
        }
        results.insert("concurrency".into(), Value::Array(figures));
    }
    if wants("stream") {
        println!("\n== streaming a whole table to the client (in-process DataFusion interleaved)");
        results.insert(
            "stream".into(),
            micro::stream_table(&cluster, &local, "lineitem", args.stream_runs).await?,
        );
    }
    if wants("tpch") {
        println!(
            "\n== TPC-H SF{} vs in-process single-node DataFusion, median of {}",
            args.scale, args.iterations
        );
        let queries: Vec<usize> = if args.queries.is_empty() {
            (1..=22).collect()
        } else {
            args.queries.clone()
        };
        let run = tpch::TpchRun {
            tables: &tables,
            query_dir: &args.query_dir,
            queries: &queries,
            iterations: args.iterations,
            partitions,
        };
        let mut duckdb = match &args.duckdb {
            Some(python) => Some(duckdb::DuckDb::start(python, &tables)?),
            None => None,
        };
        let ab = args.dynamic_filters_ab || args.join_reorder_ab || args.key_range_splits_ab;
        let mut without_filters = match ab {
            true => Some(cluster.client().await?),
            false => None,
        };
        let others = tpch::Others {
            duckdb: duckdb.as_mut(),
            without_filters: without_filters.as_mut(),
            switched_off: match (args.join_reorder_ab, args.key_range_splits_ab) {
                (true, _) => "squadron.join_reorder",
                (_, true) => "squadron.key_range_splits",
                _ => "squadron.dynamic_filters",
            },
        };
        results.insert("tpch".into(), run.run(&mut client, others).await?);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&Value::Object(results))?)?;
        eprintln!("figures written to {}", path.display());
    }
    Ok(())
}

/// What the figures were measured on.
fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "memory_gib": mem_kib as f64 / (1024.0 * 1024.0),
        "os": std::env::consts::OS,
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
    })
}
