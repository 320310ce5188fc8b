//! `squadron-server`: the Squadron coordinator.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use squadron_server::catalog::{tpch, TableSpec};
use squadron_server::{start, ServerOptions};

/// Squadron: a distributed SQL query engine that speaks Arrow Flight SQL.
///
/// Runs the coordinator. With no --workers it starts --local-workers
/// embedded workers on loopback ports.
#[derive(Parser, Debug)]
#[command(name = "squadron-server", version)]
struct Args {
    /// Address the Flight SQL service listens on.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,

    /// Remote workers (host:port or http://host:port), comma separated.
    #[arg(long, value_delimiter = ',')]
    workers: Vec<String>,

    /// Embedded workers to start when --workers is not given.
    #[arg(long, default_value_t = 2)]
    local_workers: usize,

    /// A table: NAME=PATH or NAME=PATH:FORMAT (parquet or csv). PATH is a
    /// file or a directory; workers must see the same path. Repeatable.
    #[arg(long = "table", value_name = "NAME=PATH[:FORMAT]")]
    tables: Vec<TableSpec>,

    /// Generate TPC-H sample data into --data-dir (reused when present) and
    /// register its 8 tables.
    #[arg(long)]
    demo: bool,

    /// TPC-H scale factor for --demo.
    #[arg(long, default_value_t = 0.1)]
    demo_scale: f64,

    /// Where --demo keeps its data.
    #[arg(long, default_value = "squadron-data")]
    data_dir: PathBuf,

    /// Partitions (tasks) per stage; default twice the number of workers.
    #[arg(long)]
    partitions: Option<usize>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    squadron_worker::logging::init();
    let args = Args::parse();
    let mut tables = args.tables;
    if args.demo {
        if args.demo_scale.is_nan() || args.demo_scale <= 0.0 {
            anyhow::bail!("--demo-scale must be positive");
        }
        let dir = args.data_dir.join(format!("tpch-sf{}", args.demo_scale));
        eprintln!(
            "TPC-H sample data (scale {}) in {}",
            args.demo_scale,
            dir.display()
        );
        tables.extend(tpch::generate(&dir, args.demo_scale)?);
    }
    let server = start(ServerOptions {
        listen: args.listen,
        workers: args.workers,
        local_workers: args.local_workers,
        tables,
        partitions: args.partitions,
    })
    .await?;
    eprintln!("workers: {}", server.workers.join(", "));
    // Tools that start the server read this line for the bound port.
    println!("Squadron Flight SQL server listening on {}", server.uri());
    tokio::select! {
        result = server.wait() => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
