//! `squadron-server`: the Squadron coordinator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use squadron_coordinator::queries::LiveQueries;

use clap::Parser;
use squadron_common::logging::LogArgs;
use squadron_common::shutdown::parse_bytes;
use squadron_coordinator::cluster::Discovery;
use squadron_server::catalog::{tpch, TableSpec};
use squadron_server::health_check::HealthCheckArgs;
use squadron_server::security::SecurityArgs;
use squadron_server::warehouse::janitor::JanitorOptions;
use squadron_server::{start, JobLimits, ServerOptions, SpillSettings};
use squadron_storage::object_stores::StoreOptions;

// See the workspace Cargo.toml: large per-query buffers are reused instead
// of being returned to the OS and faulted back in.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Squadron: a distributed SQL query engine that speaks Arrow Flight SQL.
///
/// Runs the coordinator. With no --workers it starts --local-workers
/// embedded workers on loopback ports.
#[derive(Parser, Debug)]
#[command(name = "squadron-server", version)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// A TOML file of settings: keys are these flags' long names (see
    /// docs/configuration.md). Flags and SQUADRON_* variables override it.
    #[arg(long)]
    config: Option<PathBuf>,

    #[command(flatten)]
    security: SecurityArgs,

    /// Address the Flight SQL service listens on.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,

    /// Remote workers (host:port or http://host:port), comma separated.
    #[arg(long, value_delimiter = ',')]
    workers: Vec<String>,

    /// Discover workers from a file of URLs (one per line), re-read every
    /// --discovery-interval.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["workers", "workers_dns"])]
    workers_file: Option<PathBuf>,

    /// Discover workers as every address of a DNS name (NAME:PORT, e.g. a
    /// Kubernetes headless Service), resolved every --discovery-interval.
    #[arg(long, value_name = "NAME:PORT", conflicts_with = "workers")]
    workers_dns: Option<String>,

    /// Seconds between refreshes of --workers-file or --workers-dns.
    #[arg(long, default_value_t = 5.0)]
    discovery_interval: f64,

    /// Embedded workers to start when --workers is not given.
    #[arg(long, default_value_t = 2)]
    local_workers: usize,

    /// The squadron-worker binary the embedded workers run (each its own
    /// child process, ended with the coordinator). Default: the one beside
    /// this executable.
    #[arg(long, value_name = "FILE")]
    local_worker_binary: Option<PathBuf>,

    /// A table: NAME=LOCATION or NAME=LOCATION:FORMAT (parquet, csv, json,
    /// avro, arrow or delta). LOCATION is a file, a directory (a Delta
    /// table when it has a `_delta_log`; hive-style `key=value/`
    /// subdirectories become partition columns) or a URL
    /// (`s3://`, `gs://`, `az://`, `abfss://`, `https://`); workers must
    /// reach the same location. Repeatable.
    #[arg(long = "table", value_name = "NAME=LOCATION[:FORMAT]")]
    tables: Vec<TableSpec>,

    /// Options of remote stores, `SCHEME://[BUCKET]?KEY=VALUE&…` (e.g.
    /// `s3://data?endpoint=http://minio:9000&allow_http=true`); repeatable.
    /// Workers need the same. Credentials come from the environment, never
    /// from here.
    // Parsed after clap, whose error would echo a refused credential.
    #[arg(long = "store", value_name = "URL")]
    stores: Vec<String>,

    /// Generate TPC-H sample data into --data-dir (reused when present) and
    /// register its 8 tables; each file records the key order of its rows.
    #[arg(long)]
    demo: bool,

    /// TPC-H scale factor for --demo.
    #[arg(long, default_value_t = 0.1)]
    demo_scale: f64,

    /// Where --demo keeps its data, and the default --warehouse.
    #[arg(long, default_value = "squadron-data")]
    data_dir: PathBuf,

    /// Where tables created through Flight SQL (CREATE TABLE, INSERT,
    /// ingest) and the catalog of them are kept: a directory every worker
    /// reaches (a shared volume) or an object store URL (`s3://bucket/path`,
    /// `gs://…`, `az://…`, configured like tables with --store). Default:
    /// --data-dir. Give workers the same with their --warehouse.
    #[arg(long, value_name = "DIR|URL")]
    warehouse: Option<String>,

    /// Seconds a file a commit replaced or dropped stays readable for
    /// queries planned before it, before it is deleted.
    #[arg(long, default_value_t = 600.0)]
    file_retention: f64,

    /// Seconds between sweeps of warehouse files no catalog version names
    /// (left by statements that failed or were killed); 0: only at start.
    #[arg(long, default_value_t = 600.0)]
    sweep_interval: f64,

    /// Seconds a file no catalog version names is left alone by the sweep:
    /// another coordinator of the same warehouse may still be writing it.
    #[arg(long, default_value_t = 3600.0)]
    sweep_grace: f64,

    /// Partitions (tasks) per stage; default one per core of this machine
    /// with embedded workers, twice the number of workers with --workers.
    #[arg(long)]
    partitions: Option<usize>,

    /// A planning option, e.g.
    /// datafusion.optimizer.hash_join_single_partition_threshold=0.
    /// Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,

    /// Attempts per query when workers are lost (re-run on the healthy
    /// workers while no row has reached the client).
    #[arg(long, default_value_t = 3)]
    task_max_attempts: u32,

    /// Stop a query that runs longer than this many seconds (default: no
    /// limit).
    #[arg(long)]
    query_timeout: Option<f64>,

    /// Queries that run at once; more wait in a queue.
    #[arg(long, default_value_t = 32)]
    max_concurrent_queries: usize,

    /// Queries that may wait for a slot; beyond that a query is refused at
    /// once with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 128)]
    max_queued_queries: usize,

    /// Queries one user may run or queue at once (without authentication:
    /// one client address); more are refused with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = squadron_server::DEFAULT_MAX_QUERIES_PER_USER)]
    max_queries_per_user: usize,

    /// Memory for query execution in each embedded worker, e.g. 2G
    /// (default: unlimited).
    #[arg(long, value_parser = parse_bytes)]
    worker_memory_limit: Option<usize>,

    /// Memory for the plans the coordinator runs itself (lookups, queries
    /// over constants, system tables), e.g. 512M; a plan that needs more
    /// fails with RESOURCE_EXHAUSTED (the coordinator never spills).
    #[arg(long, value_parser = parse_bytes, default_value = "1G")]
    coordinator_memory_limit: usize,

    /// Queries whose table reads are Parquet row groups of at most this
    /// size in all (compressed, by the footers the coordinator holds; a
    /// lookup by a sorted key, a small table) run on the coordinator
    /// rather than on the workers, e.g. 4M; 0 sends every table read to
    /// the workers.
    #[arg(long, value_parser = parse_size_or_zero,
          default_value_t = squadron_planner::local::DEFAULT_COORDINATOR_SCAN_LIMIT as usize)]
    coordinator_scan_limit: usize,

    /// Whether a statement that differs from an earlier one of the same
    /// client session only in its constants (a lookup by another key)
    /// re-uses that statement's plan rather than being planned again.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    reuse_plans: bool,

    /// What a lost worker costs by default (`SET squadron.retry_policy`
    /// per session): `query` runs the job again while no row reached the
    /// client; `task` retains exchange outputs, runs only the lost tasks
    /// again and keeps the rows a client already has.
    #[arg(long, default_value = "query")]
    retry_policy: squadron_exec::squadron_options::RetryPolicy,

    /// Whether tasks prune the scans of a hash join's probe side once its
    /// build side is complete, and the scans below a TopK by its threshold
    /// (`SET squadron.dynamic_filters` per session).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    dynamic_filters: bool,

    /// Where the coordinator spools fault-tolerant results past memory, and
    /// the embedded workers spill (each process in a directory of its own
    /// in it, removed when it stops or, after a kill, by the next process
    /// that starts there); default: the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    spill_dir: Option<PathBuf>,

    /// Most bytes the coordinator's spool, and each embedded worker, may
    /// put in --spill-dir, e.g. 50G; past it a query fails with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, value_parser = parse_bytes, default_value = "100G")]
    spill_limit: usize,

    /// Seconds between health probes of the workers.
    #[arg(long, default_value_t = 2.0)]
    health_interval: f64,

    /// On SIGTERM, seconds to let running queries finish before exiting.
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,

    /// Serve Prometheus metrics at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,

    #[command(flatten)]
    log: LogArgs,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Certificates for development and tests.
    Certs {
        #[command(subcommand)]
        action: CertsAction,
    },
    /// The users file of --users.
    Users {
        #[command(subcommand)]
        action: UsersAction,
    },
    /// Asks a coordinator or worker for its gRPC health; exits 0 when it
    /// is SERVING (a Kubernetes exec probe).
    HealthCheck(HealthCheckArgs),
}

#[derive(clap::Subcommand, Debug)]
enum UsersAction {
    /// Adds a user: reads the password from the first line of stdin and
    /// appends its argon2id hash to the file (created if missing).
    Add {
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        name: String,
    },
}

#[derive(clap::Subcommand, Debug)]
enum CertsAction {
    /// Writes a development CA and certificates signed by it: `server`
    /// (the Flight SQL port), `coordinator` and `worker` (cluster
    /// identities), `client` (a client certificate). Not for production.
    Generate {
        /// Directory to write into.
        #[arg(long)]
        out: PathBuf,
        /// Names and addresses clients reach the server by.
        #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
        hosts: Vec<String>,
    },
}

impl Command {
    async fn run(self) -> anyhow::Result<()> {
        match self {
            Command::HealthCheck(args) => {
                squadron_server::health_check::check(&args).await?;
                println!("{} is SERVING", args.url);
                Ok(())
            }
            Command::Certs {
                action: CertsAction::Generate { out, hosts },
            } => {
                squadron_net::tls::generate::generate(&out, &hosts)?;
                println!("certificates written to {}", out.display());
                Ok(())
            }
            Command::Users {
                action: UsersAction::Add { file, name },
            } => {
                let mut password = String::new();
                std::io::stdin().read_line(&mut password)?;
                let password = password.trim_end_matches(['\r', '\n']);
                squadron_server::security::users::add_user(&file, &name, password)?;
                println!("user {name} added to {}", file.display());
                Ok(())
            }
        }
    }
}

/// A size like 4M, or 0 (off).
fn parse_size_or_zero(text: &str) -> Result<usize, String> {
    match text.trim() {
        "0" => Ok(0),
        size => parse_bytes(size),
    }
}

fn parse_setting(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

fn seconds(value: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow::anyhow!("{flag} must be a positive number of seconds"))
}

fn non_negative(value: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| anyhow::anyhow!("{flag} must be a number of seconds, 0 or more"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = squadron_common::config::parse("SQUADRON_")?;
    let _telemetry = args.log.init("squadron-server")?;
    if let Some(command) = args.command {
        return command.run().await;
    }
    let metrics = match args.metrics_listen {
        Some(_) => Some(squadron_common::metrics::install_recorder()?),
        None => None,
    };
    squadron_coordinator::metrics::describe();
    let security = args.security.security(args.demo)?;
    let auth = security.auth.clone();
    let scheme = if security.cluster_tls.is_some() {
        "https"
    } else {
        "http"
    };
    let discovery = match (args.workers_file, args.workers_dns) {
        (Some(file), _) => Some(Discovery::File(file)),
        (None, Some(name)) => Some(Discovery::Dns { name, scheme }),
        (None, None) => None,
    };
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
        discovery,
        discovery_interval: seconds(args.discovery_interval, "--discovery-interval")?,
        local_workers: args.local_workers,
        local_worker_binary: args.local_worker_binary,
        local_worker_launcher: None,
        tables,
        stores: StoreOptions::parse_all(&args.stores)?,
        partitions: args.partitions,
        settings: args.settings,
        limits: JobLimits {
            max_attempts: args.task_max_attempts.max(1),
            query_timeout: args
                .query_timeout
                .map(|t| seconds(t, "--query-timeout"))
                .transpose()?,
            max_concurrent_queries: args.max_concurrent_queries.max(1),
            max_queued_queries: args.max_queued_queries,
        },
        worker_memory_limit: args.worker_memory_limit,
        coordinator_memory_limit: args.coordinator_memory_limit,
        health_interval: seconds(args.health_interval, "--health-interval")?,
        warehouse: args.warehouse,
        data_dir: Some(args.data_dir),
        janitor: JanitorOptions {
            retention: non_negative(args.file_retention, "--file-retention")?,
            sweep_interval: non_negative(args.sweep_interval, "--sweep-interval")?,
            sweep_grace: non_negative(args.sweep_grace, "--sweep-grace")?,
        },
        tls: security.tls,
        cluster_tls: security.cluster_tls,
        auth: auth.clone(),
        table_roots: security.table_roots,
        max_queries_per_user: args.max_queries_per_user.max(1),
        coordinator_scan_limit: args.coordinator_scan_limit as u64,
        reuse_plans: args.reuse_plans,
        retry_policy: args.retry_policy,
        dynamic_filters: args.dynamic_filters,
        spill: SpillSettings {
            dir: args.spill_dir.unwrap_or(SpillSettings::default().dir),
            limit: args.spill_limit as u64,
        },
    })
    .await?;
    if let (Some(listen), Some(metrics)) = (args.metrics_listen, metrics) {
        let admin = squadron_server::admin::Admin {
            metrics,
            queries: Arc::downgrade(&server.coordinator) as Weak<dyn LiveQueries>,
            session: server.coordinator.session().clone(),
            auth: auth.clone(),
        };
        squadron_server::admin::serve(listen, admin).await?;
    }
    eprintln!("workers: {}", server.workers.join(", "));
    let terminated = squadron_common::shutdown::termination();
    // Tools that start the server read this line for the bound port.
    println!("Squadron Flight SQL server listening on {}", server.uri());
    server
        .serve_until_terminated(Duration::from_secs(args.shutdown_grace), terminated)
        .await
}
