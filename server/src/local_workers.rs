//! The coordinator's embedded workers (`--local-workers`, when no remote
//! ones are given): `squadron-worker` child processes on loopback ports.
//!
//! Each is its own process as a remote worker is, so the coordinator needs
//! no worker runtime linked in (Cargo keeps the `squadron-server` crate off
//! `squadron-worker`), and a task that brings its worker down leaves the
//! coordinator serving. Tests that look inside their workers start them in
//! their own process through the same trait (`LaunchWorkers`).

use std::any::Any;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use squadron_common::spill_dir::SpillSettings;
use squadron_net::tls::ClusterTlsFiles;
use squadron_storage::object_stores::StoreOptions;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// What every embedded worker is started with: the coordinator's own
/// settings for them.
#[derive(Debug, Clone, Default)]
pub struct LocalWorkerOptions {
    pub memory_limit: Option<usize>,
    /// `--spill-dir` (each worker uses its own directory in it) and
    /// `--spill-limit` (each).
    pub spill: Option<SpillSettings>,
    pub cluster_tls: Option<ClusterTlsFiles>,
    /// The warehouse, where task plans may also read and write.
    pub warehouse: Option<url::Url>,
    pub stores: Vec<StoreOptions>,
}

/// Starts one embedded worker and answers the URL peers reach it at.
pub trait LaunchWorkers: Send + Sync {
    fn launch<'a>(
        &'a self,
        options: &'a LocalWorkerOptions,
    ) -> BoxFuture<'a, anyhow::Result<(String, Box<dyn EmbeddedWorker>)>>;
}

/// A running embedded worker, kept by the coordinator until it stops.
pub trait EmbeddedWorker: Send + Sync {
    /// Lets the worker finish its tasks (at most `grace`) and stop.
    fn stop(self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()>;

    /// The worker itself, for tests that look inside one started in-process.
    fn as_any(&self) -> &dyn Any;
}

/// Embedded workers as `squadron-worker` child processes.
pub struct WorkerProcesses {
    binary: PathBuf,
}

impl WorkerProcesses {
    /// `binary`, or `squadron-worker` beside this process's executable
    /// (where cargo and the release archives put it).
    pub fn new(binary: Option<PathBuf>) -> anyhow::Result<Self> {
        let binary = match binary {
            Some(binary) => binary,
            None => beside_this_executable("squadron-worker")?,
        };
        if !binary.is_file() {
            anyhow::bail!(
                "embedded workers need the squadron-worker binary: {} does not exist \
                 (build it with `cargo build --bins`, give --local-worker-binary, \
                 or give remote --workers)",
                binary.display()
            );
        }
        Ok(Self { binary })
    }
}

fn beside_this_executable(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    Ok(dir.join(name))
}

/// How long a starting worker may take to print the address it bound.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl LaunchWorkers for WorkerProcesses {
    fn launch<'a>(
        &'a self,
        options: &'a LocalWorkerOptions,
    ) -> BoxFuture<'a, anyhow::Result<(String, Box<dyn EmbeddedWorker>)>> {
        Box::pin(async move {
            let mut command = Command::new(&self.binary);
            command.args(worker_args(options));
            // Its settings are the coordinator's, never a worker's own
            // variables that happen to be set here, nor a test's failpoint.
            for (name, _) in std::env::vars_os() {
                let name_text = name.to_string_lossy();
                if name_text.starts_with("SQUADRON_WORKER_")
                    || name_text == "SQUADRON_TEST_FAILPOINT"
                {
                    command.env_remove(name);
                }
            }
            // Their own process group: a terminal's Ctrl-C reaches only the
            // coordinator, which lets its queries finish on the workers
            // before it stops them.
            command.process_group(0);
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            let mut child = command
                .spawn()
                .with_context(|| format!("starting {}", self.binary.display()))?;
            let stdout = child.stdout.take().context("the worker's stdout")?;
            let mut lines = BufReader::new(stdout);
            let mut banner = String::new();
            tokio::time::timeout(START_TIMEOUT, lines.read_line(&mut banner))
                .await
                .context("the embedded worker did not start in time")??;
            let url = banner_url(&banner).with_context(|| {
                format!("the embedded worker did not start (it printed {banner:?})")
            })?;
            // Nothing more is expected there; read it so a stray line
            // never blocks the worker on a full pipe.
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut lines, &mut tokio::io::sink()).await;
            });
            let stdin = child.stdin.take();
            Ok((url, Box::new(WorkerProcess { child, stdin }) as _))
        })
    }
}

/// The worker's flags for `options`: a loopback port of its own, and the
/// coordinator's memory, TLS, warehouse and store settings.
fn worker_args(options: &LocalWorkerOptions) -> Vec<String> {
    let mut args: Vec<String> = ["--listen", "127.0.0.1:0", "--exit-when-stdin-closes"]
        .map(String::from)
        .to_vec();
    match &options.cluster_tls {
        Some(files) => {
            for (flag, path) in [
                ("--cluster-ca", &files.ca),
                ("--cluster-cert", &files.cert),
                ("--cluster-key", &files.key),
            ] {
                args.push(flag.into());
                args.push(path.display().to_string());
            }
        }
        // On loopback, as the coordinator without cluster TLS is.
        None => args.push("--insecure".into()),
    }
    if let Some(limit) = options.memory_limit {
        args.extend(["--memory-limit".into(), limit.to_string()]);
    }
    if let Some(spill) = &options.spill {
        args.extend(["--spill-dir".into(), spill.dir.display().to_string()]);
        args.extend(["--spill-limit".into(), spill.limit.to_string()]);
    }
    if let Some(warehouse) = &options.warehouse {
        args.extend(["--warehouse".into(), warehouse.to_string()]);
    }
    for store in &options.stores {
        args.extend(["--store".into(), store.to_flag()]);
    }
    args
}

/// The URL in the worker's first line (`squadron-worker listening on URL`).
fn banner_url(line: &str) -> Option<String> {
    line.trim()
        .rsplit(' ')
        .next()
        .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
        .map(str::to_string)
}

struct WorkerProcess {
    child: Child,
    /// Closing it tells the worker to stop (`--exit-when-stdin-closes`).
    stdin: Option<ChildStdin>,
}

impl EmbeddedWorker for WorkerProcess {
    fn stop(mut self: Box<Self>, grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            drop(self.stdin.take());
            // The worker drains within its own grace; past ours it is killed
            // (and on drop, if this future is abandoned).
            let waited = grace + Duration::from_secs(1);
            if tokio::time::timeout(waited, self.child.wait())
                .await
                .is_err()
            {
                tracing::warn!("an embedded worker did not stop in time; killing it");
                let _ = self.child.kill().await;
            }
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_names_the_url() {
        assert_eq!(
            banner_url("squadron-worker listening on http://127.0.0.1:5000\n").as_deref(),
            Some("http://127.0.0.1:5000")
        );
        assert_eq!(banner_url("error: no cluster TLS"), None);
        assert_eq!(banner_url(""), None);
    }

    #[test]
    fn workers_get_the_coordinators_settings() {
        let options = LocalWorkerOptions {
            spill: None,
            memory_limit: Some(1 << 30),
            cluster_tls: None,
            warehouse: Some(url::Url::parse("s3://bucket/wh/").unwrap()),
            stores: vec!["s3://bucket?region=eu-west-1".parse().unwrap()],
        };
        let args = worker_args(&options).join(" ");
        assert!(args.contains("--insecure"), "{args}");
        assert!(args.contains("--memory-limit 1073741824"), "{args}");
        assert!(args.contains("--warehouse s3://bucket/wh/"), "{args}");
        assert!(
            args.contains("--store s3://bucket?region=eu-west-1"),
            "{args}"
        );
    }

    #[test]
    fn a_missing_worker_binary_is_a_clear_error() {
        let missing = WorkerProcesses::new(Some("/nonexistent/squadron-worker".into()));
        let error = missing.err().expect("refused").to_string();
        assert!(error.contains("--local-worker-binary"), "{error}");
    }
}
