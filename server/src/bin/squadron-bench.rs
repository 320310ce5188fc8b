//! `squadron-bench`: TPC-H through Flight SQL against a coordinator with two
//! worker processes, interleaved query by query with in-process single-node
//! DataFusion over the same files. Prints per-query medians and ratios.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use clap::Parser;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use squadron_server::catalog::tpch;
use squadron_server::{coordinator_session_config, start, ServerOptions};
use tonic::transport::Channel;

#[derive(Parser, Debug)]
#[command(name = "squadron-bench")]
struct Args {
    /// TPC-H scale factor.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Runs per query and engine; the median is reported.
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// Queries to run (default all 22), comma separated numbers.
    #[arg(long, value_delimiter = ',')]
    queries: Vec<usize>,
    /// Where the generated data is kept (reused across runs).
    #[arg(long, default_value = "squadron-data")]
    data_dir: PathBuf,
    /// Partitions (tasks) per stage for Squadron; default 2 per worker.
    #[arg(long)]
    partitions: Option<usize>,
    /// Where the TPC-H query files are.
    #[arg(long, default_value = "testdata/tpch")]
    query_dir: PathBuf,
}

struct WorkerProcess(Child, String);

impl WorkerProcess {
    fn spawn() -> anyhow::Result<Self> {
        let bin = std::env::current_exe()?.with_file_name("squadron-worker");
        let mut child = Command::new(&bin)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", bin.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        let url = line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        Ok(Self(child, url))
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn flight_sql(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> anyhow::Result<usize> {
    let info = client.execute(sql.to_string(), None).await?;
    let mut rows = 0;
    for endpoint in info.endpoint {
        let ticket = endpoint
            .ticket
            .ok_or_else(|| anyhow::anyhow!("no ticket"))?;
        let batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
        rows += batches.iter().map(|b| b.num_rows()).sum::<usize>();
    }
    Ok(rows)
}

async fn single_node(ctx: &SessionContext, sql: &str) -> anyhow::Result<usize> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(batches.iter().map(|b| b.num_rows()).sum())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_row(name: &str, squadron: Duration, datafusion: Duration, configured: Duration) {
    println!(
        "{:>5} {:>12.1} {:>14.1} {:>8.2} {:>18.1}",
        name,
        ms(squadron),
        ms(datafusion),
        squadron.as_secs_f64() / datafusion.as_secs_f64(),
        ms(configured)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    squadron_worker::logging::init();
    let args = Args::parse();
    let queries: Vec<usize> = if args.queries.is_empty() {
        (1..=22).collect()
    } else {
        args.queries.clone()
    };
    let dir = args.data_dir.join(format!("tpch-sf{}", args.scale));
    eprintln!("data: {} (generating if missing)", dir.display());
    let tables = tpch::generate(&dir, args.scale)?;

    let workers = [WorkerProcess::spawn()?, WorkerProcess::spawn()?];
    let server = start(ServerOptions {
        listen: "127.0.0.1:0".parse()?,
        workers: workers.iter().map(|w| w.1.clone()).collect(),
        local_workers: 0,
        tables: tables.clone(),
        partitions: args.partitions,
        ..ServerOptions::default()
    })
    .await?;
    let channel = Channel::from_shared(format!("http://{}", server.addr))?
        .connect()
        .await?;
    let mut client = FlightSqlServiceClient::new(channel);

    let ctx = SessionContext::new();
    // Single node again, but planned the way the coordinator plans (no
    // dynamic filters, scalar subqueries as joins, Squadron's partitions):
    // separates what that planning costs from what distribution costs.
    let partitions = args.partitions.unwrap_or(4);
    let ctx_cfg = SessionContext::new_with_config(coordinator_session_config(partitions));
    for t in &tables {
        t.register(&ctx).await?;
        t.register(&ctx_cfg).await?;
    }

    println!(
        "TPC-H SF{} | Squadron: coordinator + 2 worker processes | DataFusion: single node, in-process | median of {}",
        args.scale, args.iterations
    );
    println!(
        "{:>5} {:>12} {:>14} {:>8} {:>18}",
        "query", "squadron ms", "datafusion ms", "ratio", "df squadron-cfg ms"
    );
    let (mut total_s, mut total_d, mut total_c) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for n in queries {
        let sql = std::fs::read_to_string(args.query_dir.join(format!("q{n}.sql")))?;
        let (mut ts, mut td, mut tc) = (vec![], vec![], vec![]);
        for _ in 0..args.iterations.max(1) {
            let start = Instant::now();
            let rows_s = flight_sql(&mut client, &sql).await?;
            ts.push(start.elapsed());
            let start = Instant::now();
            let rows_d = single_node(&ctx, &sql).await?;
            td.push(start.elapsed());
            let start = Instant::now();
            single_node(&ctx_cfg, &sql).await?;
            tc.push(start.elapsed());
            if rows_s != rows_d {
                anyhow::bail!("q{n}: Squadron returned {rows_s} rows, DataFusion {rows_d}");
            }
        }
        let (s, d, c) = (median(ts), median(td), median(tc));
        total_s += s;
        total_d += d;
        total_c += c;
        print_row(&format!("q{n}"), s, d, c);
    }
    print_row("total", total_s, total_d, total_c);
    drop(workers);
    Ok(())
}
