//! TPC-H through Flight SQL, interleaved query by query with in-process
//! single-node DataFusion over the same files; every answer is checked
//! against DataFusion's, not only timed.

use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use serde_json::{json, Value};
use squadron_cluster_tests::answers::{is_ordered, same_rows};
use squadron_planner::context::coordinator_session_config;
use squadron_server::catalog::TableSpec;

use crate::flight::{self, Client};
use crate::stats::{median, ms};

pub struct TpchRun<'a> {
    pub tables: &'a [TableSpec],
    pub query_dir: &'a Path,
    pub queries: &'a [usize],
    pub iterations: usize,
    pub partitions: usize,
}

fn print_row(name: &str, squadron: Duration, datafusion: Duration, configured: Duration) {
    println!(
        "{:>5} {:>12.1} {:>14.1} {:>8.2} {:>18.1}",
        name,
        ms(squadron),
        ms(datafusion),
        squadron.as_secs_f64() / datafusion.as_secs_f64(),
        ms(configured)
    );
}

impl TpchRun<'_> {
    pub async fn run(&self, client: &mut Client) -> anyhow::Result<Value> {
        let ctx = SessionContext::new();
        // Single node again, but planned the way the coordinator plans
        // (Squadron's settings and partitions): separates what that planning
        // costs from what distribution costs.
        let ctx_cfg = SessionContext::new_with_config(coordinator_session_config(self.partitions));
        for t in self.tables {
            t.register(&ctx).await?;
            t.register(&ctx_cfg).await?;
        }
        println!(
            "{:>5} {:>12} {:>14} {:>8} {:>18}",
            "query", "squadron ms", "datafusion ms", "ratio", "df squadron-cfg ms"
        );
        let mut per_query = vec![];
        let (mut total_s, mut total_d, mut total_c) =
            (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        for &n in self.queries {
            let sql = std::fs::read_to_string(self.query_dir.join(format!("q{n}.sql")))?;
            let (mut ts, mut td, mut tc) = (vec![], vec![], vec![]);
            for _ in 0..self.iterations.max(1) {
                let start = Instant::now();
                let got = flight::collect(client, &sql).await?;
                ts.push(start.elapsed());
                let start = Instant::now();
                let expected = ctx.sql(&sql).await?.collect().await?;
                td.push(start.elapsed());
                let start = Instant::now();
                ctx_cfg.sql(&sql).await?.collect().await?;
                tc.push(start.elapsed());
                same_rows(&got, &expected, is_ordered(&sql))
                    .map_err(|e| anyhow::anyhow!("q{n}: wrong answer: {e}"))?;
            }
            let (s, d, c) = (median(ts), median(td), median(tc));
            total_s += s;
            total_d += d;
            total_c += c;
            print_row(&format!("q{n}"), s, d, c);
            per_query.push(json!({
                "query": format!("q{n}"),
                "squadron_ms": ms(s),
                "datafusion_ms": ms(d),
                "ratio": s.as_secs_f64() / d.as_secs_f64(),
            }));
        }
        print_row("total", total_s, total_d, total_c);
        Ok(json!({
            "iterations": self.iterations,
            "answers_checked": true,
            "queries": per_query,
            "total": {
                "squadron_ms": ms(total_s),
                "datafusion_ms": ms(total_d),
                "ratio": total_s.as_secs_f64() / total_d.as_secs_f64(),
            },
        }))
    }
}
