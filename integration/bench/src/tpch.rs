//! TPC-H through Flight SQL, interleaved query by query with in-process
//! single-node DataFusion over the same files; every answer is checked
//! against DataFusion's, not only timed. Optionally DuckDB in the same
//! run (`--duckdb`), and Squadron again with its dynamic filters off
//! (`--dynamic-filters-ab`), with the rows the scans read either way.

use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;
use serde_json::{json, Value};
use squadron_cluster_tests::answers::{is_ordered, same_rows};
use squadron_cluster_tests::explained::rows_scanned;
use squadron_planner::context::coordinator_session_config;
use squadron_server::catalog::TableSpec;

use crate::duckdb::DuckDb;
use crate::flight::{self, Client};
use crate::stats::{median, ms};

pub struct TpchRun<'a> {
    pub tables: &'a [TableSpec],
    pub query_dir: &'a Path,
    pub queries: &'a [usize],
    pub iterations: usize,
    pub partitions: usize,
}

/// What else runs beside Squadron and DataFusion.
pub struct Others<'a> {
    pub duckdb: Option<&'a mut DuckDb>,
    /// A session with the setting `switched_off` off.
    pub without_filters: Option<&'a mut Client>,
    /// The `squadron.*` setting that session turns off
    /// (`squadron.dynamic_filters`, `squadron.join_reorder`).
    pub switched_off: &'static str,
}

/// One query's medians (and totals, summed).
#[derive(Default, Clone, Copy)]
struct Figures {
    squadron: Duration,
    datafusion: Duration,
    configured: Duration,
    duckdb: Option<Duration>,
    without_filters: Option<Duration>,
    /// Rows scanned with and without dynamic filters.
    scanned: Option<(u64, u64)>,
}

impl Figures {
    fn add(&mut self, other: &Figures) {
        self.squadron += other.squadron;
        self.datafusion += other.datafusion;
        self.configured += other.configured;
        let sum = |a: Option<Duration>, b: Option<Duration>| Some(a? + b?);
        self.duckdb = sum(self.duckdb.or(Some(Duration::ZERO)), other.duckdb);
        self.without_filters = sum(
            self.without_filters.or(Some(Duration::ZERO)),
            other.without_filters,
        );
        self.scanned = match (self.scanned.or(Some((0, 0))), other.scanned) {
            (Some((a, b)), Some((c, d))) => Some((a + c, b + d)),
            _ => None,
        };
    }

    fn print(&self, name: &str) {
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        let mut line = format!(
            "{:>5} {:>12.1} {:>14.1} {:>8.2}",
            name,
            ms(self.squadron),
            ms(self.datafusion),
            ratio(self.squadron, self.datafusion)
        );
        if let Some(duckdb) = self.duckdb {
            line += &format!(
                " {:>10.1} {:>10.2}",
                ms(duckdb),
                ratio(self.squadron, duckdb)
            );
        }
        if let Some(without) = self.without_filters {
            line += &format!(
                " {:>13.1} {:>8.2}",
                ms(without),
                ratio(self.squadron, without)
            );
        }
        if let Some((with, without)) = self.scanned {
            line += &format!(" {with:>12} {without:>12}");
        }
        line += &format!(" {:>18.1}", ms(self.configured));
        println!("{line}");
    }

    fn json(&self, name: &str, switched_off: &str) -> Value {
        let off = switched_off.trim_start_matches("squadron.");
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        let mut figures = json!({
            "query": name,
            "squadron_ms": ms(self.squadron),
            "datafusion_ms": ms(self.datafusion),
            "ratio": ratio(self.squadron, self.datafusion),
        });
        if let Some(duckdb) = self.duckdb {
            figures["duckdb_ms"] = json!(ms(duckdb));
            figures["ratio_to_duckdb"] = json!(ratio(self.squadron, duckdb));
        }
        if let Some(without) = self.without_filters {
            figures[format!("squadron_without_{off}_ms")] = json!(ms(without));
        }
        if let Some((with, without)) = self.scanned {
            figures["rows_scanned"] = json!(with);
            figures[format!("rows_scanned_without_{off}")] = json!(without);
        }
        figures
    }
}

fn header(others: &Others) -> String {
    let mut line = format!(
        "{:>5} {:>12} {:>14} {:>8}",
        "query", "squadron ms", "datafusion ms", "ratio"
    );
    if others.duckdb.is_some() {
        line += &format!(" {:>10} {:>10}", "duckdb ms", "vs duckdb");
    }
    if others.without_filters.is_some() {
        line += &format!(
            " {:>13} {:>8} {:>12} {:>12}",
            "without ms", "vs w/o", "scanned", "scanned w/o"
        );
    }
    line + &format!(" {:>18}", "df squadron-cfg ms")
}

impl TpchRun<'_> {
    pub async fn run(&self, client: &mut Client, mut others: Others<'_>) -> anyhow::Result<Value> {
        let ctx = SessionContext::new();
        // Single node again, but planned the way the coordinator plans
        // (Squadron's settings and partitions): separates what that planning
        // costs from what distribution costs.
        let ctx_cfg = SessionContext::new_with_config(coordinator_session_config(self.partitions));
        for t in self.tables {
            t.register(&ctx).await?;
            t.register(&ctx_cfg).await?;
        }
        if let Some(without) = others.without_filters.as_deref_mut() {
            flight::collect(without, &format!("SET {} = false", others.switched_off)).await?;
        }
        println!("{}", header(&others));
        let mut per_query = vec![];
        let mut total = Figures::default();
        for &n in self.queries {
            let sql = std::fs::read_to_string(self.query_dir.join(format!("q{n}.sql")))?;
            let name = format!("q{n}");
            let figures = self
                .one_query(&name, &sql, client, &ctx, &ctx_cfg, &mut others)
                .await?;
            total.add(&figures);
            figures.print(&name);
            per_query.push(figures.json(&name, others.switched_off));
        }
        total.print("total");
        Ok(json!({
            "iterations": self.iterations,
            "answers_checked": true,
            "duckdb_version": others.duckdb.as_ref().map(|d| d.version.clone()),
            "queries": per_query,
            "total": total.json("total", others.switched_off),
        }))
    }

    /// `sql` by every engine, interleaved run by run; the medians.
    async fn one_query(
        &self,
        name: &str,
        sql: &str,
        client: &mut Client,
        ctx: &SessionContext,
        ctx_cfg: &SessionContext,
        others: &mut Others<'_>,
    ) -> anyhow::Result<Figures> {
        let (mut ts, mut td, mut tc, mut tk, mut tw) = (vec![], vec![], vec![], vec![], vec![]);
        for iteration in 0..self.iterations.max(1) {
            // Squadron without dynamic filters goes first every other run:
            // the first engine to run a query pays for what the runs before
            // left cold (the page cache, at SF10), and the A/B pair should
            // share that cost.
            let without_first = iteration % 2 == 1;
            let mut without_answer = None;
            if without_first {
                if let Some(without) = others.without_filters.as_deref_mut() {
                    let (took, got) = timed(without, sql).await?;
                    tw.push(took);
                    without_answer = Some(got);
                }
            }
            let start = Instant::now();
            let got = flight::collect(client, sql).await?;
            ts.push(start.elapsed());
            let start = Instant::now();
            let expected = ctx.sql(sql).await?.collect().await?;
            td.push(start.elapsed());
            let start = Instant::now();
            ctx_cfg.sql(sql).await?.collect().await?;
            tc.push(start.elapsed());
            same_rows(&got, &expected, is_ordered(sql))
                .map_err(|e| anyhow::anyhow!("{name}: wrong answer: {e}"))?;
            if let Some(duckdb) = others.duckdb.as_deref_mut() {
                let (times, rows) = duckdb.run(sql, 1)?;
                let expected_rows: usize = expected.iter().map(|b| b.num_rows()).sum();
                anyhow::ensure!(
                    rows == expected_rows,
                    "{name}: DuckDB answered {rows} rows, DataFusion {expected_rows}"
                );
                tk.extend(times);
            }
            if !without_first {
                if let Some(without) = others.without_filters.as_deref_mut() {
                    let (took, got) = timed(without, sql).await?;
                    tw.push(took);
                    without_answer = Some(got);
                }
            }
            if let Some(got) = without_answer {
                same_rows(&got, &expected, is_ordered(sql)).map_err(|e| {
                    anyhow::anyhow!("{name}: wrong answer without {}: {e}", others.switched_off)
                })?;
            }
        }
        let mut figures = Figures {
            squadron: median(ts),
            datafusion: median(td),
            configured: median(tc),
            duckdb: (!tk.is_empty()).then(|| median(tk)),
            without_filters: (!tw.is_empty()).then(|| median(tw)),
            scanned: None,
        };
        if let Some(without) = others.without_filters.as_deref_mut() {
            // Outside the timings: one EXPLAIN ANALYZE each way.
            let explain = format!("EXPLAIN ANALYZE VERBOSE {sql}");
            let with = rows_scanned(&flight::collect(client, &explain).await?, "");
            let no = rows_scanned(&flight::collect(without, &explain).await?, "");
            figures.scanned = Some((with, no));
        }
        Ok(figures)
    }
}

/// `sql` through `client`: how long it took, and the answer.
async fn timed(client: &mut Client, sql: &str) -> anyhow::Result<(Duration, Vec<RecordBatch>)> {
    let start = Instant::now();
    let got = flight::collect(client, sql).await?;
    Ok((start.elapsed(), got))
}
