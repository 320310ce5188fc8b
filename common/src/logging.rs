//! Log setup shared by the server and worker binaries: to stderr (stdout
//! stays free for the ready line), as text or one JSON object per line.
//! Lines of a query's work carry its `query_id`/`job_id` fields.

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
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogArgs {
    pub fn init(&self) -> anyhow::Result<()> {
        use tracing_subscriber::EnvFilter;
        let filter = match &self.log_level {
            Some(directives) => EnvFilter::try_new(directives)
                .map_err(|e| anyhow::anyhow!("--log-level {directives:?}: {e}"))?,
            None => EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        };
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match self.log_format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().init(),
        }
        Ok(())
    }
}

/// Text logs at `RUST_LOG` (default info), for tools and tests.
pub fn init() {
    let _ = LogArgs {
        log_level: None,
        log_format: LogFormat::Text,
    }
    .init();
}
