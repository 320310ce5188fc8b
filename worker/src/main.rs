//! `squadron-worker`: one Squadron worker process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use squadron_common::logging::LogArgs;
use squadron_common::shutdown::{drain, parse_bytes, termination};
use squadron_common::spill_dir::SpillSettings;
use squadron_exec::plan::guard::DataRoots;
use squadron_net::tls::ClusterTlsFiles;
use squadron_storage::object_stores::StoreOptions;
use squadron_worker::task::Failpoint;
use squadron_worker::{Worker, WorkerOptions};
use tokio::net::TcpListener;

// See the workspace Cargo.toml: large per-query buffers are reused instead
// of being returned to the OS and faulted back in.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Squadron worker: runs query tasks sent by a coordinator and serves their
/// output streams over Arrow Flight.
#[derive(Parser, Debug)]
#[command(name = "squadron-worker", version)]
struct Args {
    /// A TOML file of settings: keys are these flags' long names (see
    /// docs/configuration.md). Flags and SQUADRON_WORKER_* variables
    /// override it.
    #[arg(long)]
    config: Option<PathBuf>,

    /// Address to listen on (gRPC control, Flight streams, gRPC health).
    #[arg(long, default_value = "127.0.0.1:50061")]
    listen: SocketAddr,

    /// Memory for query execution, e.g. 4G or 512M (default: unlimited).
    /// Sorts, aggregates and joins spill to disk where DataFusion can; a
    /// query needing more fails with RESOURCE_EXHAUSTED.
    #[arg(long, value_parser = parse_bytes)]
    memory_limit: Option<usize>,

    /// Where exchange outputs spill past memory (retained outputs of the
    /// fault-tolerant mode, and queues past --memory-limit) and where
    /// DataFusion's sorts, aggregates and joins spill. The worker uses a
    /// directory of its own in it, removed when it stops (and, if it was
    /// killed, by the next process that starts there).
    #[arg(long, value_name = "DIR")]
    spill_dir: Option<PathBuf>,

    /// Most bytes this worker may spill, e.g. 50G; past it the query
    /// spilling fails with RESOURCE_EXHAUSTED and the worker keeps
    /// running.
    #[arg(long, value_parser = parse_bytes, default_value = "100G")]
    spill_limit: usize,

    /// On SIGTERM, seconds to let running tasks finish before exiting.
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,

    /// The cluster CA (PEM): peers must present a certificate it signed.
    #[arg(long)]
    cluster_ca: Option<PathBuf>,

    /// This worker's cluster certificate (PEM, with the worker role).
    #[arg(long)]
    cluster_cert: Option<PathBuf>,

    /// The key of `--cluster-cert` (PEM).
    #[arg(long)]
    cluster_key: Option<PathBuf>,

    /// Task plans may read files only under this directory (or object store
    /// URL prefix, `s3://bucket/path`); repeatable. Without it, anywhere
    /// the worker can read.
    #[arg(long = "data-root", value_name = "DIR|URL")]
    data_roots: Vec<PathBuf>,

    /// Where created tables live: the coordinator's --warehouse (a shared
    /// directory or an object store URL). With --data-root, task plans may
    /// also read and write there.
    #[arg(long, value_name = "DIR|URL")]
    warehouse: Option<String>,

    /// Options of remote stores, `SCHEME://[BUCKET]?KEY=VALUE&…` (e.g.
    /// `s3://data?endpoint=http://minio:9000&allow_http=true`); repeatable.
    /// Give the coordinator the same. Credentials come from the
    /// environment, never from here.
    // Parsed after clap, whose error would echo a refused credential.
    #[arg(long = "store", value_name = "URL")]
    stores: Vec<String>,

    /// Serve plaintext and run tasks from anyone who reaches the port. For
    /// a laptop only; without it the worker needs the cluster TLS files.
    #[arg(long)]
    insecure: bool,

    /// Stop (gracefully, as on SIGTERM) when standard input closes: set by
    /// a coordinator that starts its embedded workers as child processes,
    /// so they end with it even when it is killed.
    #[arg(long, hide = true)]
    exit_when_stdin_closes: bool,

    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,

    #[command(flatten)]
    log: LogArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = squadron_common::config::parse("SQUADRON_WORKER_")?;
    let _telemetry = args.log.init("squadron-worker")?;
    if let Some(listen) = args.metrics_listen {
        squadron_common::metrics::serve(listen)?;
    }
    let failpoint = Failpoint::from_env()?.map(Arc::new);
    if failpoint.is_some() {
        tracing::warn!("test failpoint armed: this worker will fail on purpose");
    }
    let cluster_tls =
        ClusterTlsFiles::from_args(args.cluster_ca, args.cluster_cert, args.cluster_key)?;
    match (&cluster_tls, args.insecure) {
        (None, false) => anyhow::bail!(
            "no cluster TLS: give --cluster-ca, --cluster-cert and --cluster-key \
             (see certs/README.md), or --insecure for a local, trusted network"
        ),
        (None, true) => tracing::warn!(
            "INSECURE: plaintext, and anyone who reaches this port can run tasks and read \
             their results; use only on a trusted local network"
        ),
        (Some(_), _) => {}
    }
    let listener = TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    let worker = Worker::new(WorkerOptions {
        memory_limit: args.memory_limit,
        spill: Some(SpillSettings {
            dir: args.spill_dir.unwrap_or(SpillSettings::default().dir),
            limit: args.spill_limit as u64,
        }),
        failpoint,
        cluster_tls,
        data_roots: DataRoots::new(&args.data_roots)?.with_warehouse(
            args.warehouse
                .as_deref()
                .map(squadron_storage::format::location_url)
                .transpose()?
                .as_ref()
                .map(|u| u.as_str()),
        ),
        stores: StoreOptions::parse_all(&args.stores)?,
    })?;
    let terminated = termination();
    // Tools that start workers read this line for the bound port.
    println!("squadron-worker listening on {}://{addr}", worker.scheme());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(worker.serve(listener, async {
        let _ = stopped.await;
    }));
    let parent_gone = stdin_closed(args.exit_when_stdin_closes);
    tokio::select! {
        result = &mut server => return result?,
        _ = terminated => {}
        _ = parent_gone => {}
    }
    tracing::info!("stopping: no new tasks, finishing running ones");
    let _ = stop.send(());
    drain(server, Duration::from_secs(args.shutdown_grace), "worker").await
}

/// Resolves when standard input reaches its end (never when `watch` is
/// off). Read on a plain thread: a blocking Tokio task would hold the
/// runtime's shutdown until the read returns.
async fn stdin_closed(watch: bool) {
    if !watch {
        return std::future::pending().await;
    }
    let (closed, on_close) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = closed.send(());
    });
    let _ = on_close.await;
}
