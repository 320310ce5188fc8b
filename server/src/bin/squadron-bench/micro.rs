//! Micro figures through Flight SQL: round-trip latency of tiny queries,
//! streaming a whole table to the client, and many clients at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use serde_json::{json, Value};

use squadron_server::process_stats::cpu_seconds;

use crate::cluster::{Cluster, RssSampler};
use crate::flight::{self, Client};
use crate::stats::{mib, ms, percentile};

/// A short query; `i` varies its constant so that no two runs are alike.
#[derive(Clone, Copy)]
pub enum ShortQuery {
    SelectOne,
    /// One customer by primary key (a scan with a filter on the workers).
    PointLookup {
        customers: u64,
    },
}

impl ShortQuery {
    pub fn name(&self) -> &'static str {
        match self {
            ShortQuery::SelectOne => "SELECT 1",
            ShortQuery::PointLookup { .. } => "point query",
        }
    }

    pub fn sql(&self, i: u64) -> String {
        match self {
            ShortQuery::SelectOne => "SELECT 1".into(),
            ShortQuery::PointLookup { customers } => format!(
                "SELECT c_name, c_acctbal FROM customer WHERE c_custkey = {}",
                1 + (i * 7919) % customers
            ),
        }
    }

    fn expected_rows(&self) -> usize {
        1
    }
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
            rows == query.expected_rows(),
            "{}: {rows} rows",
            query.name()
        );
        let start = Instant::now();
        local.sql(&query.sql(i)).await?.collect().await?;
        datafusion.push(start.elapsed());
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
        "{:<14} p50 {:>7.3} ms  p99 {:>7.3} ms | DataFusion p50 {:>7.3} ms  p99 {:>7.3} ms | p50 ratio {:>5.2} | CPU ms/query: coordinator {:.2}, workers {:.2?}",
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
        "runs": runs,
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
        "datafusion_p50_ms": ms(df50),
        "datafusion_p99_ms": ms(df99),
        "cpu_ms_per_query_coordinator": cpu_ms[0],
        "cpu_ms_per_query_workers": &cpu_ms[1..],
    }))
}

/// Streams a whole table to the client, sampling every process's memory.
pub async fn stream_table(cluster: &Cluster, table: &str) -> anyhow::Result<Value> {
    let mut client = cluster.client().await?;
    let pids = cluster.pids();
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    // The client shares the machine's cores with the cluster: on two cores
    // its decoding is a good part of what the wall time is made of.
    let client_before = cpu_seconds(std::process::id());
    let sampler = RssSampler::start(pids.clone());
    let start = Instant::now();
    let (rows, bytes) = flight::count(&mut client, &format!("SELECT * FROM {table}")).await?;
    let elapsed = start.elapsed();
    let client_cpu = cpu_seconds(std::process::id()) - client_before;
    let peaks = sampler.stop();
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| cpu_seconds(*p) - before)
        .collect();
    let coordinator = peaks.first().copied().unwrap_or(0);
    let workers: Vec<f64> = peaks.iter().skip(1).map(|b| mib(*b)).collect();
    println!(
        "SELECT * FROM {table}: {:.2} s, {rows} rows, {:.0} rows/s, {:.0} MiB of rows\n    peak RSS: coordinator {:.0} MiB, workers {:?} MiB\n    CPU seconds: coordinator {:.2}, workers {:.2?}, this client {:.2}",
        elapsed.as_secs_f64(),
        rows as f64 / elapsed.as_secs_f64(),
        mib(bytes),
        mib(coordinator),
        workers.iter().map(|w| w.round()).collect::<Vec<_>>(),
        cpu[0],
        &cpu[1..],
        client_cpu,
    );
    Ok(json!({
        "table": table,
        "seconds": elapsed.as_secs_f64(),
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

/// `clients` clients, each on its own connection, run `query` back to back
/// for `duration`; reports completed queries per second and errors.
pub async fn concurrent(
    cluster: &Cluster,
    query: ShortQuery,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Value> {
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
            tokio::spawn(async move {
                let mut i = c as u64 * 1_000_003;
                while Instant::now() < deadline {
                    i += 1;
                    match flight::collect(&mut client, &query.sql(i)).await {
                        Ok(_) => done.fetch_add(1, Ordering::Relaxed),
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
        "clients": clients,
        "seconds": elapsed,
        "queries": done,
        "queries_per_second": qps,
        "errors": errors,
    }))
}
