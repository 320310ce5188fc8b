//! The oracle (single-node DataFusion) and one Squadron session per mode,
//! each answering a statement as rows of rendered cells or an error.

use std::time::Duration;

use sqllogictest::DBOutput;
use squadron_sqllogictest::engines::{Answer, Baseline, Squadron};
use squadron_sqllogictest::format::output;

use crate::modes::Mode;

/// How long one statement may take on Squadron before it counts as hung.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long DataFusion may take: a generated query slower than this (a
/// near cross product) is left out rather than waited for.
pub const ORACLE_DEADLINE: Duration = Duration::from_secs(15);

/// What a statement gave: its rows as text (cells rendered alike for both
/// engines, whatever types they travelled in), or its error.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Rows(Vec<Vec<String>>),
    Error(String),
}

impl Outcome {
    fn of(answer: Answer) -> Self {
        let (fields, batches) = match answer {
            Ok(answer) => answer,
            Err(e) => return Outcome::Error(e.0),
        };
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
}

impl Engines {
    /// The oracle, and a session per mode on the coordinator at `addr`.
    pub async fn connect(addr: &str, modes: &[Mode]) -> anyhow::Result<Self> {
        let mut sessions = vec![];
        for mode in modes {
            let mut session = Squadron::connect(addr, DEADLINE).await?;
            for setting in mode.settings() {
                if let Err(e) = session.answer(&setting).await {
                    anyhow::bail!("{}: {setting}: {e}", mode.name());
                }
            }
            sessions.push((*mode, session));
        }
        Ok(Self {
            oracle: Baseline::new(ORACLE_DEADLINE),
            sessions,
        })
    }

    pub async fn oracle(&self, sql: &str) -> Outcome {
        Outcome::of(within(ORACLE_DEADLINE, self.oracle.answer(sql)).await)
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
        if let Some((_, session)) = self.sessions.first_mut() {
            if let Err(e) = session.answer(sql).await {
                anyhow::bail!("Squadron: {sql}: {e}");
            }
        }
        Ok(())
    }
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
