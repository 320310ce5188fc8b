//! DuckDB in a process of its own (`duckdb_runner.py`, run by a Python
//! that has the `duckdb` package), over the same Parquet files, timed
//! there so the pipe to it is not counted.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use squadron_server::catalog::TableSpec;

const RUNNER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/duckdb_runner.py");

pub struct DuckDb {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub version: String,
}

impl DuckDb {
    /// Starts the runner with `python` and makes a view of each table.
    pub fn start(python: &Path, tables: &[TableSpec]) -> anyhow::Result<Self> {
        let mut child = Command::new(python)
            .arg(RUNNER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", python.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut duckdb = Self {
            child,
            stdin,
            stdout,
            version: String::new(),
        };
        let views: serde_json::Map<String, Value> = tables
            .iter()
            .map(|t| (t.name.clone(), json!(t.location)))
            .collect();
        let reply = duckdb.ask(json!({ "tables": views }))?;
        duckdb.version = reply["version"].as_str().unwrap_or("?").to_string();
        Ok(duckdb)
    }

    /// `sql` run `runs` times: each run's time and the answer's row count.
    pub fn run(&mut self, sql: &str, runs: usize) -> anyhow::Result<(Vec<Duration>, usize)> {
        let reply = self.ask(json!({ "sql": sql, "runs": runs }))?;
        let times = reply["ms"]
            .as_array()
            .ok_or_else(|| anyhow::anyhow!("DuckDB runner: no times in {reply}"))?
            .iter()
            .filter_map(Value::as_f64)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .collect();
        Ok((times, reply["rows"].as_u64().unwrap_or(0) as usize))
    }

    fn ask(&mut self, request: Value) -> anyhow::Result<Value> {
        writeln!(self.stdin, "{request}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            anyhow::bail!("the DuckDB runner exited (is the duckdb package installed?)");
        }
        let reply: Value = serde_json::from_str(&line)?;
        if let Some(error) = reply.get("error") {
            anyhow::bail!("DuckDB: {error}");
        }
        Ok(reply)
    }
}

impl Drop for DuckDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
