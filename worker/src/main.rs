//! `squadron-worker`: one Squadron worker process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use squadron_worker::shutdown::{drain, parse_bytes, termination};
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
    /// Address to listen on (gRPC control, Flight streams, gRPC health).
    #[arg(long, default_value = "127.0.0.1:50061")]
    listen: SocketAddr,

    /// Memory for query execution, e.g. 4G or 512M (default: unlimited).
    /// Sorts, aggregates and joins spill to disk where DataFusion can; a
    /// query needing more fails with RESOURCE_EXHAUSTED.
    #[arg(long, value_parser = parse_bytes)]
    memory_limit: Option<usize>,

    /// On SIGTERM, seconds to let running tasks finish before exiting.
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    squadron_worker::logging::init();
    let args = Args::parse();
    let failpoint = Failpoint::from_env()?.map(Arc::new);
    if failpoint.is_some() {
        tracing::warn!("test failpoint armed: this worker will fail on purpose");
    }
    let worker = Worker::new(WorkerOptions {
        memory_limit: args.memory_limit,
        failpoint,
    })?;
    let listener = TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    // Tools that start workers read this line for the bound port.
    println!("squadron-worker listening on http://{addr}");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(worker.serve(listener, async {
        let _ = stopped.await;
    }));
    tokio::select! {
        result = &mut server => return result?,
        _ = termination() => {}
    }
    tracing::info!("stopping: no new tasks, finishing running ones");
    let _ = stop.send(());
    drain(server, Duration::from_secs(args.shutdown_grace), "worker").await
}
