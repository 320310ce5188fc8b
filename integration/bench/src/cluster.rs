//! The cluster under test: two `squadron-worker` processes and a
//! `squadron-server` coordinator process over them, so that each one's
//! memory can be measured on its own and the load generator shares nothing
//! with the server but the machine.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::sql::client::FlightSqlServiceClient;
use squadron_cluster_tests::process_stats::rss_bytes;
use squadron_net::tls::generate::{generate, DevCerts};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

impl Secure {
    fn new(data_dir: &Path) -> anyhow::Result<Self> {
        let dir = data_dir.join("bench-certs");
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let certs = generate(&dir, &["localhost".into(), "127.0.0.1".into()])?;
        squadron_server::security::users::add_user(
            &certs.dir.join("users.toml"),
            BENCH_USER,
            BENCH_PASSWORD,
        )?;
        Ok(Self { certs })
    }
}

/// A child process killed on drop, with the URL it printed on start.
pub struct Process {
    child: Child,
    pub url: String,
}

impl Process {
    /// Starts a binary next to this one and waits for the line ending in
    /// its URL (`… listening on http://host:port`).
    fn spawn(binary: &str, args: &[String]) -> anyhow::Result<Self> {
        let bin = std::env::current_exe()?.with_file_name(binary);
        let mut child = Command::new(&bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", bin.display()))?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let url = loop {
            match lines.next() {
                Some(line) => {
                    let line = line?;
                    // Workers print http://, the coordinator grpc:// (for
                    // clients); tonic dials either as http://.
                    let last = line.rsplit(' ').next().unwrap_or_default();
                    if let Some(rest) = last.strip_prefix("grpc://") {
                        break format!("http://{rest}");
                    }
                    if let Some(rest) = last.strip_prefix("grpc+tls://") {
                        break format!("https://{rest}");
                    }
                    if last.starts_with("http://") || last.starts_with("https://") {
                        break last.to_string();
                    }
                }
                None => anyhow::bail!("{binary} exited before printing its address"),
            }
        };
        Ok(Self { child, url })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Cluster {
    pub coordinator: Process,
    pub workers: Vec<Process>,
    /// TLS and a login, when the cluster runs secured (`--secure`).
    secure: Option<Secure>,
}

/// A secured cluster's certificates and users file, made afresh under
/// the data directory for each run.
struct Secure {
    certs: DevCerts,
}

const BENCH_USER: &str = "bench";
const BENCH_PASSWORD: &str = "bench password, local only";

impl Cluster {
    /// Two workers and a coordinator serving the TPC-H data in `data_dir`
    /// (generated there beforehand at `scale`); `extra` are more arguments
    /// for the coordinator.
    pub fn start(
        data_dir: &Path,
        scale: f64,
        partitions: usize,
        extra: &[String],
        secure: bool,
    ) -> anyhow::Result<Self> {
        let secure = secure.then(|| Secure::new(data_dir)).transpose()?;
        let path = |p: std::path::PathBuf| p.display().to_string();
        let worker_security: Vec<String> = match &secure {
            None => vec!["--insecure".into()],
            Some(s) => vec![
                "--cluster-ca".into(),
                path(s.certs.ca()),
                "--cluster-cert".into(),
                path(s.certs.worker().0),
                "--cluster-key".into(),
                path(s.certs.worker().1),
            ],
        };
        let workers = (0..2)
            .map(|_| {
                let mut args = vec!["--listen".into(), "127.0.0.1:0".into()];
                args.extend(worker_security.iter().cloned());
                Process::spawn("squadron-worker", &args)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--demo".into(),
            "--demo-scale".into(),
            scale.to_string(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--workers".into(),
            workers
                .iter()
                .map(|w| w.url.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ];
        args.extend(["--partitions".into(), partitions.to_string()]);
        if let Some(s) = &secure {
            args.extend([
                "--tls-cert".into(),
                path(s.certs.server().0),
                "--tls-key".into(),
                path(s.certs.server().1),
                "--cluster-ca".into(),
                path(s.certs.ca()),
                "--cluster-cert".into(),
                path(s.certs.coordinator().0),
                "--cluster-key".into(),
                path(s.certs.coordinator().1),
                "--users".into(),
                path(s.certs.dir.join("users.toml")),
            ]);
        }
        args.extend(extra.iter().cloned());
        let coordinator = Process::spawn("squadron-server", &args)?;
        Ok(Self {
            coordinator,
            workers,
            secure,
        })
    }

    /// A client on its own connection (HTTP/2 multiplexes one connection's
    /// calls; separate clients should not queue behind each other).
    /// Secured, it connects over TLS and logs in (a Basic handshake; the
    /// token is sent with every call after).
    pub async fn client(&self) -> anyhow::Result<FlightSqlServiceClient<Channel>> {
        let Some(secure) = &self.secure else {
            let channel = Endpoint::from_shared(self.coordinator.url.clone())?
                .tcp_nodelay(true)
                .connect()
                .await?;
            return Ok(FlightSqlServiceClient::new(channel));
        };
        let url = self.coordinator.url.replace("127.0.0.1", "localhost");
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(std::fs::read(secure.certs.ca())?))
            .domain_name("localhost");
        let channel = Endpoint::from_shared(url)?
            .tls_config(tls)?
            .tcp_nodelay(true)
            .connect()
            .await?;
        let mut client = FlightSqlServiceClient::new(channel);
        client.handshake(BENCH_USER, BENCH_PASSWORD).await?;
        Ok(client)
    }

    pub fn is_secure(&self) -> bool {
        self.secure.is_some()
    }

    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(self.coordinator.pid())
            .chain(self.workers.iter().map(Process::pid))
            .collect()
    }
}

/// Samples the resident memory of some processes every 20 ms until
/// stopped; `stop` returns each one's peak.
pub struct RssSampler {
    running: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl RssSampler {
    pub fn start(pids: Vec<u32>) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&running);
        let thread = std::thread::spawn(move || {
            let mut peaks = vec![0u64; pids.len()];
            while flag.load(Ordering::Relaxed) {
                for (peak, pid) in peaks.iter_mut().zip(&pids) {
                    *peak = (*peak).max(rss_bytes(*pid));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            peaks
        });
        Self { running, thread }
    }

    pub fn stop(self) -> Vec<u64> {
        self.running.store(false, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}
