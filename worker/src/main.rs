//! `squadron-worker`: one Squadron worker process.

use std::net::SocketAddr;

use clap::Parser;
use tokio::net::TcpListener;

/// A Squadron worker: runs query tasks sent by a coordinator and serves their
/// output streams over Arrow Flight.
#[derive(Parser, Debug)]
#[command(name = "squadron-worker", version)]
struct Args {
    /// Address to listen on (gRPC control service and Flight streams).
    #[arg(long, default_value = "127.0.0.1:50061")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    squadron_worker::logging::init();
    let args = Args::parse();
    let listener = TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    // Tools that start workers read this line for the bound port.
    println!("squadron-worker listening on http://{addr}");
    squadron_worker::Worker::default()
        .serve(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
