//! Log setup shared by the server and worker binaries: to stderr, filtered
//! by `RUST_LOG` (default `info`), so stdout stays free for the ready line.

pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}
