//! Log setup shared by the server and worker binaries: to stderr (stdout
//! stays free for the ready line), as text or one JSON object per line.
//! Lines of a query's work carry its `query_id`/`job_id` fields.

use crate::traces::{otlp_layer, Telemetry};

/// How a process logs: `--log-level` (a level or filter directives such
/// as `info,squadron_server=debug`; default `RUST_LOG`, else `info`) and
/// `--log-format`.
#[derive(clap::Args, Debug, Clone)]
pub struct LogArgs {
    /// Log level or filter directives, e.g. `debug` or
    /// `info,squadron_server=debug` (default: RUST_LOG, else info).
    #[arg(long)]
    pub log_level: Option<String>,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Export traces of queries over OTLP/gRPC to this collector, e.g.
    /// http://localhost:4317 (default: no traces).
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogArgs {
    /// Installs the process's logging (and trace export as `service`, with
    /// `--otlp-endpoint`); keep the returned guard until the process ends,
    /// it flushes the last traces.
    pub fn init(&self, service: &str) -> anyhow::Result<Telemetry> {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::{EnvFilter, Layer};
        let filter = match &self.log_level {
            Some(directives) => EnvFilter::try_new(directives)
                .map_err(|e| anyhow::anyhow!("--log-level {directives:?}: {e}"))?,
            None => EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        };
        let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let fmt = match self.log_format {
            LogFormat::Text => fmt.with_filter(filter).boxed(),
            LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        };
        let (traces, telemetry) = match &self.otlp_endpoint {
            Some(endpoint) => {
                let (layer, telemetry) = otlp_layer(endpoint, service)?;
                (Some(layer), telemetry)
            }
            None => (None, Telemetry::off()),
        };
        tracing_subscriber::registry()
            .with(fmt)
            .with(traces)
            .try_init()
            .map_err(|e| anyhow::anyhow!("installing the logger: {e}"))?;
        Ok(telemetry)
    }
}

/// Text logs at `RUST_LOG` (default info), for tools and tests.
pub fn init() {
    let _ = LogArgs {
        log_level: None,
        log_format: LogFormat::Text,
        otlp_endpoint: None,
    }
    .init("squadron");
}
