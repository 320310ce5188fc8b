//! A deterministic fault for tests of the retry paths.
//!
//! Read only by the `squadron-worker` binary from `SQUADRON_TEST_FAILPOINT`
//! (never by a coordinator's embedded workers: it clears the variable for
//! them). Not for production use: it can be armed only in builds with
//! debug assertions (every test build) or the `failpoints` feature (an
//! optimized build for fault tests); a release build refuses to start with
//! the variable set rather than run with a fault it will not inject.
//!
//! - `crash-on-task=N`: the worker process aborts when its N-th task
//!   arrives, as a machine that dies mid-query would.
//! - `panic-on-task=N`: the N-th task panics when it starts.
//! - `crash-after-batches=N`: the worker process aborts once its tasks
//!   produced N batches in all: a machine dying in the middle of a query,
//!   with part of its work done and part of its output read.

use std::sync::atomic::{AtomicU64, Ordering};

pub const ENV: &str = "SQUADRON_TEST_FAILPOINT";

/// Whether this build may arm a failpoint.
const ARMABLE: bool = cfg!(any(debug_assertions, feature = "failpoints"));

#[derive(Debug)]
pub struct Failpoint {
    fault: Fault,
    at_task: u64,
    seen: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Crash,
    Panic,
    CrashAfterBatches,
}

impl Failpoint {
    /// Parses the environment variable; `None` when unset.
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        match std::env::var(ENV) {
            Ok(spec) if ARMABLE => Self::parse(&spec).map(Some),
            Ok(_) => anyhow::bail!(
                "{ENV} is set, but this build has no failpoints (build with debug \
                 assertions or --features squadron-worker/failpoints)"
            ),
            Err(_) => Ok(None),
        }
    }

    pub fn parse(spec: &str) -> anyhow::Result<Self> {
        let (name, n) = spec
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("{ENV}: expected NAME=N, got {spec:?}"))?;
        let fault = match name {
            "crash-on-task" => Fault::Crash,
            "panic-on-task" => Fault::Panic,
            "crash-after-batches" => Fault::CrashAfterBatches,
            other => anyhow::bail!("{ENV}: unknown failpoint {other:?}"),
        };
        let at_task = n
            .parse()
            .map_err(|_| anyhow::anyhow!("{ENV}: {n:?} is not a task number"))?;
        Ok(Self {
            fault,
            at_task,
            seen: AtomicU64::new(0),
        })
    }

    /// Counts one arriving task; the fault to inject into it, if any.
    pub fn on_task(&self) -> Option<Fault> {
        if self.fault == Fault::CrashAfterBatches {
            return None;
        }
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        (n == self.at_task).then_some(self.fault)
    }

    /// Whether tasks must report their batches (`on_batch`).
    pub fn counts_batches(&self) -> bool {
        self.fault == Fault::CrashAfterBatches
    }

    /// Counts one batch a task produced; aborts the process at the N-th.
    pub fn on_batch(&self) {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fault == Fault::CrashAfterBatches && n == self.at_task {
            tracing::error!("failpoint: crashing the worker after {n} batches");
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_on_the_named_task() {
        let f = Failpoint::parse("panic-on-task=2").unwrap();
        assert_eq!(f.on_task(), None);
        assert_eq!(f.on_task(), Some(Fault::Panic));
        assert_eq!(f.on_task(), None);
        assert!(Failpoint::parse("explode=1").is_err());
        let f = Failpoint::parse("crash-after-batches=5").unwrap();
        assert!(f.counts_batches());
        assert_eq!(f.on_task(), None, "counted by batches, not tasks");
        assert!(Failpoint::parse("crash-on-task=x").is_err());
    }
}
