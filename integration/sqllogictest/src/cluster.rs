//! The Squadron side: two worker processes for the whole run, and a fresh
//! coordinator per file (catalogs are shared by every session of a
//! coordinator, and the files reuse table names).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{anyhow, Context};
use squadron_server::{start, RunningServer, ServerOptions};

use crate::engines::PARTITIONS;

/// How the coordinator plans joins, and whether tasks use dynamic filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The shipped settings: small build sides are broadcast.
    Default,
    /// No broadcast joins: every equi-join's inputs are hash-partitioned
    /// across tasks, so the exchange carries both sides.
    Partitioned,
    /// The shipped settings with `squadron.dynamic_filters` and
    /// `squadron.join_reorder` off (joins in the order the query lists).
    DefaultNoFilters,
    /// Partitioned joins with `squadron.dynamic_filters` and
    /// `squadron.join_reorder` off.
    PartitionedNoFilters,
}

impl Mode {
    fn settings(self) -> Vec<(String, String)> {
        let partitioned = [
            "datafusion.optimizer.hash_join_single_partition_threshold",
            "datafusion.optimizer.hash_join_single_partition_threshold_rows",
        ]
        .iter()
        .map(|key| (key.to_string(), "0".to_string()));
        let no_filters = ["squadron.dynamic_filters", "squadron.join_reorder"]
            .iter()
            .map(|key| (key.to_string(), "false".to_string()));
        match self {
            Mode::Default => vec![],
            Mode::Partitioned => partitioned.collect(),
            Mode::DefaultNoFilters => no_filters.collect(),
            Mode::PartitionedNoFilters => partitioned.chain(no_filters).collect(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Partitioned => "partitioned joins",
            Mode::DefaultNoFilters => "default, no dynamic filters",
            Mode::PartitionedNoFilters => "partitioned joins, no dynamic filters",
        }
    }
}

/// A `squadron-worker` process, killed on drop.
pub struct Worker {
    pub url: String,
    child: Child,
}

impl Worker {
    /// Starts one in `dir` (relative paths in the files resolve there, as
    /// on the coordinator).
    /// Its log level is `SQUADRON_TEST_WORKER_LOG` (filter directives,
    /// e.g. `error,squadron_worker::task::runner=debug` to see each task's
    /// plan while reducing a case), else `error`.
    pub fn spawn(binary: &Path, dir: &Path) -> anyhow::Result<Self> {
        let log_level =
            std::env::var("SQUADRON_TEST_WORKER_LOG").unwrap_or_else(|_| "error".to_string());
        let mut child = Command::new(binary)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--insecure",
                "--log-level",
                &log_level,
            ])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let mut banner = String::new();
        BufReader::new(stdout).read_line(&mut banner)?;
        let url = banner
            .trim()
            .rsplit(' ')
            .next()
            .filter(|url| url.starts_with("http://"))
            .ok_or_else(|| anyhow!("unexpected worker banner {banner:?}"))?
            .to_string();
        Ok(Self { url, child })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `squadron-worker` next to this binary (both are built by the
/// workspace build).
pub fn worker_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let binary = exe
        .parent()
        .map(|dir| dir.join("squadron-worker"))
        .filter(|path| path.exists())
        .ok_or_else(|| {
            anyhow!(
                "no squadron-worker next to {}: build the workspace's binaries first",
                exe.display()
            )
        })?;
    Ok(binary)
}

/// A coordinator over `workers`, keeping created tables under `data_dir`.
pub async fn coordinator(
    workers: &[Worker],
    mode: Mode,
    data_dir: &Path,
) -> anyhow::Result<RunningServer> {
    let options = ServerOptions {
        listen: "127.0.0.1:0".parse()?,
        workers: workers.iter().map(|w| w.url.clone()).collect(),
        partitions: Some(PARTITIONS),
        settings: mode.settings(),
        data_dir: Some(data_dir.to_path_buf()),
        // The corpus's tables are tiny: without this every query would run
        // on the coordinator, and the corpus is here to check distribution.
        coordinator_scan_limit: 0,
        ..ServerOptions::default()
    };
    start(options).await
}
