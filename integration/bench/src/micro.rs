//! Micro figures through Flight SQL: round-trip latency of tiny queries,
//! streaming a whole table to the client, and many clients at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use futures::StreamExt;
use serde_json::{json, Value};

use datafusion::arrow::record_batch::RecordBatch;
use squadron_cluster_tests::answers::same_rows;
use squadron_cluster_tests::process_stats::cpu_seconds;

use crate::cluster::{Cluster, RssSampler};
use crate::flight::{self, Client};
use crate::stats::{median, mib, ms, percentile};

/// A short query; `i` varies its constant so that no two runs are alike.
#[derive(Clone, Copy)]
pub enum ShortQuery {
    SelectOne,
    /// One customer by primary key (a scan with a filter on the workers).
    PointLookup {
        customers: u64,
    },
    /// One order's line items by order key, every column: lineitem is
    /// sorted by it, but its row groups are wide (16 columns), so where
    /// it runs is less clear-cut than for the customer lookup.
    LineitemLookup {
        orders: u64,
    },
}

impl ShortQuery {
    pub fn name(&self) -> &'static str {
        match self {
            ShortQuery::SelectOne => "SELECT 1",
            ShortQuery::PointLookup { .. } => "point query",
            ShortQuery::LineitemLookup { .. } => "lineitem lookup",
        }
    }

    pub fn sql(&self, i: u64) -> String {
        match self {
            ShortQuery::SelectOne => "SELECT 1".into(),
            ShortQuery::PointLookup { customers } => format!(
                "SELECT c_name, c_acctbal FROM customer WHERE c_custkey = {}",
                1 + (i * 7919) % customers
            ),
            ShortQuery::LineitemLookup { orders } => {
                // TPC-H order keys use the first 8 of every 32.
                let n = (i * 7919) % orders;
                format!(
                    "SELECT * FROM lineitem WHERE l_orderkey = {}",
                    n / 8 * 32 + n % 8 + 1
                )
            }
        }
    }

    /// Rows every answer has, when that is fixed (answers are compared with
    /// DataFusion's in any case).
    fn expected_rows(&self) -> Option<usize> {
        match self {
            ShortQuery::LineitemLookup { .. } => None,
            _ => Some(1),
        }
    }
}

/// Distinct constants the concurrency runs cycle through, each answer
/// known from DataFusion beforehand.
const ORACLE_KEYS: u64 = 256;

/// DataFusion's answers to `query` for `i` in `0..ORACLE_KEYS`.
async fn oracle_answers(
    local: &SessionContext,
    query: ShortQuery,
) -> anyhow::Result<Vec<Vec<RecordBatch>>> {
    let mut answers = Vec::with_capacity(ORACLE_KEYS as usize);
    for i in 0..ORACLE_KEYS {
        answers.push(local.sql(&query.sql(i)).await?.collect().await?);
    }
    Ok(answers)
}

/// Runs `query` for `i` and compares its answer with DataFusion's.
async fn checked(
    client: &mut Client,
    query: ShortQuery,
    i: u64,
    expected: &[RecordBatch],
) -> anyhow::Result<()> {
    let sql = query.sql(i);
    let batches = flight::collect(client, &sql).await?;
    same_rows(&batches, expected, false)
        .map_err(|e| anyhow::anyhow!("{sql}: not DataFusion's answer: {e}"))
}

/// Where `query` runs in `client`'s session, from its EXPLAIN: "the
/// coordinator" when the coordinator answers it itself, else "the workers".
pub async fn runs_on(client: &mut Client, query: ShortQuery) -> anyhow::Result<&'static str> {
    let explained = flight::collect(client, &format!("EXPLAIN {}", query.sql(0))).await?;
    let shown = datafusion::arrow::util::pretty::pretty_format_batches(&explained)?.to_string();
    Ok(if shown.contains("Runs on the coordinator") {
        "the coordinator"
    } else {
        "the workers"
    })
}

/// Runs `query` `runs` times after a warm-up, interleaved run by run with
/// the same query on in-process single-node DataFusion (`local`), and
/// reports both p50/p99 side by side with Squadron's CPU per query: on a
/// VM whose speed drifts between runs, the ratio and the CPU time are the
/// figures to compare across builds.
pub async fn latency(
    client: &mut Client,
    local: &SessionContext,
    pids: &[u32],
    query: ShortQuery,
    runs: usize,
) -> anyhow::Result<Value> {
    let runs_on = runs_on(client, query).await?;
    for i in 0..20 {
        flight::collect(client, &query.sql(i)).await?;
        local.sql(&query.sql(i)).await?.collect().await?;
    }
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let (mut squadron, mut datafusion) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..runs as u64 {
        let start = Instant::now();
        let batches = flight::collect(client, &query.sql(i)).await?;
        squadron.push(start.elapsed());
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        anyhow::ensure!(
            query.expected_rows().is_none_or(|n| n == rows),
            "{}: {rows} rows",
            query.name()
        );
        let start = Instant::now();
        let expected = local.sql(&query.sql(i)).await?.collect().await?;
        datafusion.push(start.elapsed());
        same_rows(&batches, &expected, false)
            .map_err(|e| anyhow::anyhow!("{}: not DataFusion's answer: {e}", query.sql(i)))?;
    }
    // The bench's own DataFusion runs are in this process, not in these.
    let cpu_ms: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| (cpu_seconds(*p) - before) * 1000.0 / runs as f64)
        .collect();
    let (p50, p99) = (
        percentile(squadron.clone(), 50.0),
        percentile(squadron, 99.0),
    );
    let (df50, df99) = (
        percentile(datafusion.clone(), 50.0),
        percentile(datafusion, 99.0),
    );
    println!(
        "{:<14} p50 {:>7.3} ms  p99 {:>7.3} ms | DataFusion p50 {:>7.3} ms  p99 {:>7.3} ms | p50 ratio {:>5.2} | CPU ms/query: coordinator {:.2}, workers {:.2?} | runs on {runs_on}",
        query.name(),
        ms(p50),
        ms(p99),
        ms(df50),
        ms(df99),
        p50.as_secs_f64() / df50.as_secs_f64(),
        cpu_ms[0],
        &cpu_ms[1..],
    );
    Ok(json!({
        "query": query.name(),
        "runs_on": runs_on,
        "answers_checked": true,
        "runs": runs,
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
        "datafusion_p50_ms": ms(df50),
        "datafusion_p99_ms": ms(df99),
        "cpu_ms_per_query_coordinator": cpu_ms[0],
        "cpu_ms_per_query_workers": &cpu_ms[1..],
    }))
}

/// Streams a whole table to the client `runs` times, each run followed by
/// in-process DataFusion reading the same table, sampling every process's
/// memory. The medians and their ratio are the figures: a whole-table
/// read swings with the VM's speed more than anything else measured here.
pub async fn stream_table(
    cluster: &Cluster,
    local: &SessionContext,
    table: &str,
    runs: usize,
) -> anyhow::Result<Value> {
    let sql = format!("SELECT * FROM {table}");
    let mut client = cluster.client().await?;
    let pids = cluster.pids();
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    // The client shares the machine's cores with the cluster: on two cores
    // its decoding is a good part of what the wall time is made of.
    let mut client_cpu = 0.0;
    let sampler = RssSampler::start(pids.clone());
    let (mut squadron, mut datafusion) = (vec![], vec![]);
    let (mut rows, mut bytes) = (0, 0);
    for _ in 0..runs.max(1) {
        let client_before = cpu_seconds(std::process::id());
        let start = Instant::now();
        (rows, bytes) = flight::count(&mut client, &sql).await?;
        squadron.push(start.elapsed());
        client_cpu += cpu_seconds(std::process::id()) - client_before;
        let start = Instant::now();
        let local_rows = count_local(local, &sql).await?;
        datafusion.push(start.elapsed());
        anyhow::ensure!(
            local_rows == rows,
            "{table}: {rows} rows through Squadron, {local_rows} in process"
        );
    }
    let peaks = sampler.stop();
    let per_run = |total: f64| total / squadron.len() as f64;
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| per_run(cpu_seconds(*p) - before))
        .collect();
    let client_cpu = per_run(client_cpu);
    let runs_seconds: Vec<f64> = squadron.iter().map(Duration::as_secs_f64).collect();
    let (elapsed, local_elapsed) = (median(squadron), median(datafusion));
    let ratio = elapsed.as_secs_f64() / local_elapsed.as_secs_f64();
    let coordinator = peaks.first().copied().unwrap_or(0);
    let workers: Vec<f64> = peaks.iter().skip(1).map(|b| mib(*b)).collect();
    println!(
        "SELECT * FROM {table}: {:.2} s (median of {:.2?}), {rows} rows, {:.0} rows/s, {:.0} MiB of rows\n    in-process DataFusion {:.2} s, ratio {ratio:.2}\n    peak RSS: coordinator {:.0} MiB, workers {:?} MiB\n    CPU seconds per stream: coordinator {:.2}, workers {:.2?}, this client {:.2}",
        elapsed.as_secs_f64(),
        runs_seconds,
        rows as f64 / elapsed.as_secs_f64(),
        mib(bytes),
        local_elapsed.as_secs_f64(),
        mib(coordinator),
        workers.iter().map(|w| w.round()).collect::<Vec<_>>(),
        cpu[0],
        &cpu[1..],
        client_cpu,
    );
    Ok(json!({
        "table": table,
        "seconds": elapsed.as_secs_f64(),
        "runs_seconds": runs_seconds,
        "datafusion_seconds": local_elapsed.as_secs_f64(),
        "ratio": ratio,
        "rows": rows,
        "rows_per_second": rows as f64 / elapsed.as_secs_f64(),
        "row_data_mib": mib(bytes),
        "cpu_seconds_coordinator": cpu[0],
        "cpu_seconds_workers": &cpu[1..],
        "cpu_seconds_client": client_cpu,
        "peak_rss_coordinator_mib": mib(coordinator),
        "peak_rss_workers_mib": workers,
    }))
}

/// Rows of `sql` run by in-process DataFusion, batches dropped as read.
async fn count_local(local: &SessionContext, sql: &str) -> anyhow::Result<u64> {
    let mut stream = local.sql(sql).await?.execute_stream().await?;
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        rows += batch?.num_rows() as u64;
    }
    Ok(rows)
}

/// `clients` clients, each on its own connection, run `query` back to back
/// for `duration`; reports completed queries per second and errors.
pub async fn concurrent(
    cluster: &Cluster,
    local: &SessionContext,
    query: ShortQuery,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Value> {
    // Every answer is checked: a wrong one counts as an error.
    let oracle = Arc::new(oracle_answers(local, query).await?);
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(cluster.client().await?);
    }
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let deadline = Instant::now() + duration;
    let start = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| {
            let (done, errors, first_error) = (done.clone(), errors.clone(), first_error.clone());
            let oracle = Arc::clone(&oracle);
            tokio::spawn(async move {
                let mut i = c as u64 * 31;
                while Instant::now() < deadline {
                    i = (i + 1) % ORACLE_KEYS;
                    match checked(&mut client, query, i, &oracle[i as usize]).await {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            first_error
                                .lock()
                                .unwrap()
                                .get_or_insert_with(|| e.to_string());
                            errors.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (done, errors) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
    let qps = done as f64 / elapsed;
    println!(
        "{:<14} {clients:>3} clients   {qps:>8.0} queries/s   {errors} errors",
        query.name()
    );
    if let Some(e) = first_error.lock().unwrap().take() {
        println!("    first error: {e}");
    }
    Ok(json!({
        "query": query.name(),
        "answers_checked": true,
        "clients": clients,
        "seconds": elapsed,
        "queries": done,
        "queries_per_second": qps,
        "errors": errors,
    }))
}
