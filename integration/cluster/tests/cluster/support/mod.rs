//! Test helpers: worker processes, a coordinator, a Flight SQL client and
//! the single-node oracle.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};
use squadron_server::catalog::{tpch, TableSpec};
use squadron_server::{start, RunningServer, ServerOptions};
use tonic::transport::Channel;
use tonic::Status;

/// The `squadron-worker` binary next to this test's build, brought up to
/// date once per test run: a binary left from before a change to the
/// worker would speak an older plan encoding and fail in confusing ways
/// (cargo only rebuilds the test's own dependencies, not other packages'
/// binaries).
///
/// It is built for the whole workspace with its tests, as `./test.sh`
/// builds it, so that an up-to-date binary costs cargo a second to
/// confirm. Built with `-p squadron-worker` alone, cargo resolves the
/// dependencies' features for that package only (some crates below
/// DataFusion lose features the workspace turns on) and compiled all of
/// DataFusion once more, minutes of CPU under the running cluster tests.
pub fn worker_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test binary path");
            // target/<profile>/deps/<test> → target/<profile>/squadron-worker
            let dir = exe.parent().and_then(Path::parent).expect("target dir");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut args = vec!["build", "--workspace", "--bins", "--tests"];
            if dir.ends_with("release") {
                args.push("--release");
            }
            let mut build = Command::new(cargo);
            build.args(&args);
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(set_by_cargo_for_tests) {
                    build.env_remove(name);
                }
            }
            let status = build.status().expect("running cargo build");
            assert!(status.success(), "building squadron-worker failed");
            dir.join("squadron-worker")
        })
        .clone()
}

/// Variables cargo sets for a test process (the package's manifest
/// directory, name and version, ...). Build scripts read some of them, and
/// cargo reruns a build script when a variable it read changes: with this
/// test's values, `ring`'s ran again and everything above it was rebuilt,
/// DataFusion included (and once more by the next cargo command outside).
fn set_by_cargo_for_tests(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR"
        )
}

/// A worker process on an ephemeral loopback port, killed on drop.
pub struct WorkerProcess {
    pub url: String,
    child: Child,
}

impl WorkerProcess {
    pub fn spawn() -> Self {
        Self::spawn_with("127.0.0.1:0", &[])
    }

    /// A worker on `listen` (e.g. the address of one that was killed), with
    /// extra environment variables (e.g. a test failpoint).
    pub fn spawn_with(listen: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn_args(listen, env, &["--insecure"])
    }

    /// A worker with extra flags (its security: `--insecure` or the
    /// cluster TLS files).
    pub fn spawn_args(listen: &str, env: &[(&str, &str)], args: &[&str]) -> Self {
        let mut child = Command::new(worker_binary())
            .args(["--listen", listen, "--shutdown-grace", "20"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting squadron-worker");
        let stdout = child.stdout.take().expect("worker stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the worker's address");
        let url = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .unwrap_or_else(|| panic!("unexpected worker banner {line:?}"))
            .to_string();
        Self { url, child }
    }

    /// The `host:port` the worker listens on.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a worker that was sent SIGTERM to exit.
    pub fn terminate_wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("waiting for the worker")
    }

    /// SIGKILL: the worker vanishes without a goodbye.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// TPC-H data at `scale` in a fresh temporary directory.
pub fn tpch_data(scale: f64) -> (tempfile::TempDir, Vec<TableSpec>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let tables = tpch::generate(dir.path(), scale).expect("generating TPC-H data");
    (dir, tables)
}

/// A coordinator over the given workers (embedded ones when empty).
pub async fn coordinator(workers: Vec<String>, tables: Vec<TableSpec>) -> RunningServer {
    coordinator_with(test_options(workers, tables)).await
}

/// The options `coordinator` uses, to adjust before `coordinator_with`.
pub fn test_options(workers: Vec<String>, tables: Vec<TableSpec>) -> ServerOptions {
    ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers,
        local_workers: 2,
        // In this process, so tests can look inside them.
        local_worker_launcher: Some(squadron_cluster_tests::InProcessWorkers::launcher()),
        tables,
        partitions: Some(4),
        // Test tables are tiny: they would all be read on the coordinator.
        coordinator_scan_limit: 0,
        ..ServerOptions::default()
    }
}

pub async fn coordinator_with(options: ServerOptions) -> RunningServer {
    start(options).await.expect("starting the coordinator")
}

/// Waits until the embedded workers run no task and hold no stream and no
/// decoded plan, or panics naming what is left after `within`.
pub async fn assert_workers_idle(server: &RunningServer, within: std::time::Duration, after: &str) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let workers = squadron_cluster_tests::workers(server);
        let tasks: usize = workers.iter().map(|w| w.tasks.len()).sum();
        let streams: usize = workers.iter().map(|w| w.streams.len()).sum();
        let plans: usize = workers.iter().map(|w| w.stage_plans.len()).sum();
        if tasks == 0 && streams == 0 && plans == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{tasks} tasks, {streams} streams and {plans} decoded plans left on the workers \
             after {after}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits until the coordinator has no running job: a job ends on the
/// coordinator a little after its tasks stop on the workers.
pub async fn assert_no_running_jobs(server: &RunningServer, within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    while server.coordinator.running_jobs() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} jobs still running",
            server.coordinator.running_jobs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

pub async fn client(server: &RunningServer) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .expect("connecting to the coordinator");
    FlightSqlServiceClient::new(channel)
}

/// Runs a statement through Flight SQL: GetFlightInfo, then DoGet of each
/// endpoint.
pub async fn query(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> Result<Vec<RecordBatch>, Status> {
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(to_status)?;
    let mut batches = vec![];
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("endpoint ticket");
        let stream = client.do_get(ticket).await.map_err(to_status)?;
        let mut got: Vec<RecordBatch> = stream.try_collect().await.map_err(to_status)?;
        batches.append(&mut got);
    }
    Ok(batches)
}

/// Starts a query far larger than the buffers between tasks hold (1.5
/// million rows at SF0.01) and reads its first batch: the job is then still
/// running, with every task mid-stream.
/// Reads `stream` to its end: the first error's text, or `None` when it
/// ended cleanly.
pub async fn first_error(stream: &mut FlightRecordBatchStream) -> Option<String> {
    while let Some(item) = stream.next().await {
        if let Err(e) = item {
            return Some(e.to_string());
        }
    }
    None
}

pub async fn start_large_query(
    client: &mut FlightSqlServiceClient<Channel>,
) -> FlightRecordBatchStream {
    let info = client
        .execute("SELECT * FROM lineitem, nation".to_string(), None)
        .await
        .expect("planning the large query");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let mut stream = client
        .do_get(ticket)
        .await
        .expect("starting the large query");
    let first = stream
        .next()
        .await
        .expect("a first batch")
        .expect("a batch");
    assert!(first.num_rows() > 0);
    stream
}

pub fn to_status(e: arrow_flight::error::FlightError) -> Status {
    match e {
        arrow_flight::error::FlightError::Tonic(s) => *s,
        other => Status::unknown(other.to_string()),
    }
}

/// Single-node DataFusion over the same tables: the oracle.
pub async fn oracle_context(tables: &[TableSpec]) -> SessionContext {
    let ctx = SessionContext::new();
    for t in tables {
        t.register(&ctx).await.expect("registering an oracle table");
    }
    ctx
}

/// TPC-H at `scale` served by a coordinator over two worker processes,
/// with the single-node oracle over the same files; the data lives as long
/// as the value.
pub struct TpchCluster {
    pub _data: tempfile::TempDir,
    pub workers: [WorkerProcess; 2],
    pub server: RunningServer,
    pub oracle: SessionContext,
}

pub async fn tpch_on_two_workers(scale: f64) -> TpchCluster {
    let (data, tables) = tpch_data(scale);
    let workers = [WorkerProcess::spawn(), WorkerProcess::spawn()];
    let server = coordinator(
        workers.iter().map(|w| w.url.clone()).collect(),
        tables.clone(),
    )
    .await;
    let oracle = oracle_context(&tables).await;
    TpchCluster {
        _data: data,
        workers,
        server,
        oracle,
    }
}

pub async fn oracle(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .expect("oracle planning")
        .collect()
        .await
        .expect("oracle execution")
}

/// The `(plan_type, plan)` rows of an EXPLAIN answer.
pub fn explain_rows(batches: &[RecordBatch]) -> Vec<(String, String)> {
    batches
        .iter()
        .flat_map(|batch| {
            let kinds = datafusion::arrow::array::AsArray::as_string::<i32>(batch.column(0));
            let plans = datafusion::arrow::array::AsArray::as_string::<i32>(batch.column(1));
            (0..batch.num_rows())
                .map(|i| (kinds.value(i).to_string(), plans.value(i).to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The distributed plan of an EXPLAIN answer.
pub fn distributed_plan(batches: &[RecordBatch]) -> String {
    explain_rows(batches)
        .into_iter()
        .filter(|(kind, _)| kind == "distributed_plan")
        .map(|(_, plan)| plan)
        .collect()
}

/// The TPC-H queries numbered `queries`, each asked in every named
/// session, checked against the oracle: one line per mismatch or error.
pub async fn tpch_mismatches(
    oracle_ctx: &SessionContext,
    queries: impl IntoIterator<Item = usize>,
    sessions: &mut [(&str, &mut FlightSqlServiceClient<Channel>)],
) -> Vec<String> {
    let mut failures = vec![];
    for n in queries {
        let sql = tpch_query(n);
        let expected = oracle(oracle_ctx, &sql).await;
        for (name, session) in sessions.iter_mut() {
            match query(session, &sql).await {
                Ok(actual) => {
                    if let Err(diff) = squadron_cluster_tests::answers::same_rows(
                        &actual,
                        &expected,
                        squadron_cluster_tests::answers::is_ordered(&sql),
                    ) {
                        failures.push(format!("q{n} ({name}): {diff}"));
                    }
                }
                Err(status) => failures.push(format!("q{n} ({name}): {status}")),
            }
        }
    }
    failures
}

/// The TPC-H query texts in testdata, by number.
pub fn tpch_query(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tpch")
        .join(format!("q{n}.sql"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Sends CancelFlightInfo for `info` through a raw Flight client; its
/// answer.
pub async fn cancel_flight_info(
    client: &mut arrow_flight::flight_service_client::FlightServiceClient<Channel>,
    info: arrow_flight::FlightInfo,
) -> arrow_flight::CancelStatus {
    use prost::Message;
    let cancel = arrow_flight::CancelFlightInfoRequest { info: Some(info) };
    let action = arrow_flight::Action::new("CancelFlightInfo", cancel.encode_to_vec());
    let results: Vec<_> = client
        .do_action(action)
        .await
        .expect("CancelFlightInfo")
        .into_inner()
        .try_collect()
        .await
        .expect("its answer");
    arrow_flight::CancelFlightInfoResult::decode(results[0].body.clone())
        .expect("a CancelFlightInfoResult")
        .status()
}
