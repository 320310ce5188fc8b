//! The oracle (single-node DataFusion) and one Squadron session per mode,
//! each answering a statement as rows of rendered cells or an error.

use std::time::Duration;

use sqllogictest::DBOutput;
use squadron_sqllogictest::engines::{Answer, Baseline, Squadron};
use squadron_sqllogictest::format::output;

use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use squadron_planner::filter_pushdown_fence::with_fenced_filter_pushdown;
use squadron_planner::nan_safe_pruning::NanSafePruning;
use squadron_planner::projection_pushdown_fence::with_fenced_projection_pushdown;

use crate::modes::Mode;

/// How long one statement may take on Squadron before it counts as hung.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long DataFusion may take: a generated query slower than this (a
/// near cross product) is left out rather than waited for.
pub const ORACLE_DEADLINE: Duration = Duration::from_secs(15);

const ORACLE_SETTINGS: &[&str] = &[
    "SET datafusion.optimizer.enable_join_dynamic_filter_pushdown = false",
    "SET datafusion.optimizer.enable_topk_dynamic_filter_pushdown = false",
    "SET datafusion.optimizer.enable_topk_aggregation = false",
];

/// What a statement gave: its rows as text (cells rendered alike for both
/// engines, whatever types they travelled in), or its error.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Rows(Vec<Vec<String>>),
    Error(String),
}

/// Most rows of an answer the fuzzer renders and compares. A generated
/// join now and then answers millions (seed 13001, query 651: 13 M rows);
/// rendered as text in every mode it took minutes and gigabytes, and three
/// such runs side by side looked hung.
pub const MAX_ANSWER_ROWS: usize = 200_000;

/// How an answer too large to compare begins (the oracle's counts as a
/// query left out).
pub const TOO_LARGE: &str = "too large to compare:";

impl Outcome {
    fn of(answer: Answer) -> Self {
        let (fields, batches) = match answer {
            Ok(answer) => answer,
            Err(e) => return Outcome::Error(e.0),
        };
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if rows > MAX_ANSWER_ROWS {
            return Outcome::Error(format!(
                "{TOO_LARGE} {rows} rows, more than {MAX_ANSWER_ROWS}"
            ));
        }
        match output(&fields, &batches) {
            Ok(DBOutput::Rows { rows, .. }) => Outcome::Rows(rows),
            Ok(_) => Outcome::Rows(vec![]),
            Err(e) => Outcome::Error(format!("unreadable answer: {e}")),
        }
    }

    /// The single integer of a `SELECT count(*)`-like answer.
    pub fn number(&self) -> Option<i64> {
        match self {
            Outcome::Rows(rows) => rows.first()?.first()?.parse().ok(),
            Outcome::Error(_) => None,
        }
    }
}

pub struct Engines {
    pub oracle: Baseline,
    pub sessions: Vec<(Mode, Squadron)>,
    addr: String,
}

impl Engines {
    /// The oracle, and a session per mode on the coordinator at `addr`,
    /// each with `extra` settings after its mode's.
    pub async fn connect(addr: &str, modes: &[Mode], extra: &[String]) -> anyhow::Result<Self> {
        let mut sessions = vec![];
        for mode in modes {
            let settings: Vec<String> = mode.settings().into_iter().chain(extra.to_vec()).collect();
            sessions.push((*mode, session(addr, &settings).await?));
        }
        // DataFusion 55's filter pushdown moves a filter onto another
        // column of the same name, and its projection pushdown reads a
        // projecting filter's columns wrong (docs/correctness.md, findings
        // 10 and 21), and its Parquet pruning skips NaN a comparison keeps
        // (finding 22): the oracle plans with Squadron's fences and guard,
        // or it answers wrong where Squadron answers right.
        let mut rules = with_fenced_projection_pushdown(with_fenced_filter_pushdown(
            PhysicalOptimizer::new().rules,
        ));
        rules.push(std::sync::Arc::new(NanSafePruning));
        let oracle = Baseline::with_physical_rules(ORACLE_DEADLINE, rules);
        // DataFusion 55's dynamic filters can land on the wrong one of two
        // columns of one name (apache/datafusion#25244, #25296), and its
        // top-k of groups panics on a NaN group (`planner::float_top_k`):
        // the oracle answers without them.
        for setting in ORACLE_SETTINGS {
            if let Err(e) = oracle.answer(setting).await {
                anyhow::bail!("DataFusion: {setting}: {e}");
            }
        }
        Ok(Self {
            oracle,
            sessions,
            addr: addr.to_string(),
        })
    }

    /// `sql` in a fresh session with `settings` (SET statements).
    pub async fn squadron_with(&self, settings: &[String], sql: &str) -> anyhow::Result<Outcome> {
        let mut session = session(&self.addr, settings).await?;
        Ok(Outcome::of(within(DEADLINE, session.answer(sql)).await))
    }

    pub async fn oracle(&self, sql: &str) -> Outcome {
        Outcome::of(within(ORACLE_DEADLINE, self.oracle.answer(sql)).await)
    }

    /// `sql` on the oracle under the DataFusion settings of mode number
    /// `index` (its `SET datafusion.…` statements), each put back after:
    /// whether single-node DataFusion planned the way the mode does fails
    /// too. `None` when the mode sets nothing of DataFusion's.
    pub async fn oracle_under_mode(&self, index: usize, sql: &str) -> Option<Outcome> {
        let settings: Vec<(String, String)> = self.sessions[index]
            .0
            .settings()
            .iter()
            .filter_map(|s| s.strip_prefix("SET "))
            .filter_map(|s| s.split_once(" = "))
            .filter(|(key, _)| key.starts_with("datafusion."))
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        if settings.is_empty() {
            return None;
        }
        let mut restore = vec![];
        for (key, value) in &settings {
            let before = self.oracle(&format!("SHOW {key}")).await;
            let Outcome::Rows(rows) = before else {
                return None;
            };
            let old = rows.first().and_then(|row| row.get(1)).cloned()?;
            restore.push(format!("SET {key} = {old}"));
            if let Outcome::Error(_) = self.oracle(&format!("SET {key} = {value}")).await {
                return None;
            }
        }
        let answer = self.oracle(sql).await;
        for setting in restore {
            self.oracle(&setting).await;
        }
        Some(answer)
    }

    /// `sql` in the session of mode number `index`.
    pub async fn squadron(&mut self, index: usize, sql: &str) -> Outcome {
        Outcome::of(within(DEADLINE, self.sessions[index].1.answer(sql)).await)
    }

    /// Runs `sql` on the oracle and in every session; any error is the
    /// statement's failure (table set-up).
    pub async fn everywhere(&mut self, sql: &str) -> anyhow::Result<()> {
        if let Outcome::Error(e) = self.oracle(sql).await {
            anyhow::bail!("DataFusion: {sql}: {e}");
        }
        // The catalog is the coordinator's: one session sets it up for all.
        // Within the deadline too: a set-up that hangs stops the run with
        // the statement named rather than silently.
        if let Some((_, session)) = self.sessions.first_mut() {
            if let Err(e) = within(DEADLINE, session.answer(sql)).await {
                anyhow::bail!("Squadron: {sql}: {e}");
            }
        }
        Ok(())
    }
}

/// A session on the coordinator at `addr`, `settings` applied.
async fn session(addr: &str, settings: &[String]) -> anyhow::Result<Squadron> {
    let mut session = Squadron::connect(addr, DEADLINE).await?;
    for setting in settings {
        if let Err(e) = session.answer(setting).await {
            anyhow::bail!("{setting}: {e}");
        }
    }
    Ok(session)
}

async fn within(deadline: Duration, answer: impl std::future::Future<Output = Answer>) -> Answer {
    tokio::time::timeout(deadline, answer)
        .await
        .unwrap_or_else(|_| {
            Err(squadron_sqllogictest::engines::EngineError(format!(
                "no answer within {deadline:?}"
            )))
        })
}

/// An outcome as lines of text, for a person reading a report.
pub fn rendered(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Rows(rows) => rows
            .iter()
            .map(|row| row.join(" | "))
            .collect::<Vec<_>>()
            .join("\n"),
        Outcome::Error(e) => format!("error: {e}"),
    }
}
