//! Decoded stage plans, shared by the tasks of one stage on this worker.
//!
//! Every task of a stage carries the same encoded plan, and decoding it
//! (building each node and computing its properties) is a good part of a
//! short task's time. So the tasks of one stage attempt that run here at the
//! same time share one decoded instance and execute different partitions of
//! it, as single-node DataFusion executes the partitions of one plan. The
//! nodes above a stage read are rebuilt per task when its inputs are bound
//! (`bind_inputs`), so what depends on a task's own inputs is never shared;
//! a shared operator such a copy would execute for other partitions than
//! the task's own gets a fresh copy too (`own_state`).
//!
//! The map holds weak references and drops dead ones whenever it is used: an
//! entry lives while a task holding it runs, so the map is bounded by the
//! tasks running. A retried attempt decodes afresh (its key differs), so a
//! failed attempt's plan state is never reused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use datafusion::physical_plan::ExecutionPlan;
use squadron_common::error::Error;

/// One attempt of one stage of one job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StageAttempt {
    pub job_id: String,
    pub stage_id: u32,
    pub attempt: u32,
}

#[derive(Default, Clone)]
pub struct StagePlans {
    slots: Arc<Mutex<HashMap<StageAttempt, Weak<Slot>>>>,
    /// Plans decoded since start.
    decoded: Arc<AtomicU64>,
}

struct Slot {
    encoded: Vec<u8>,
    plan: Mutex<Option<Arc<dyn ExecutionPlan>>>,
}

/// Keeps a stage's decoded plan available to its other tasks; a task holds
/// it until it ends.
pub struct StagePlanLease {
    _slot: Arc<Slot>,
}

impl StagePlans {
    /// The decoded plan of `stage` encoded as `encoded`: the one a running
    /// task of the same stage attempt decoded, or `decode`'s. Tasks that
    /// arrive together wait for one decode rather than each doing it.
    pub fn get_or_decode(
        &self,
        stage: StageAttempt,
        encoded: &[u8],
        decode: impl FnOnce() -> Result<Arc<dyn ExecutionPlan>, Error>,
    ) -> Result<(Arc<dyn ExecutionPlan>, StagePlanLease), Error> {
        let slot = self.slot(stage, encoded);
        let mut plan = lock(&slot.plan);
        let decoded = match plan.as_ref() {
            Some(decoded) => {
                metrics::counter!(crate::metrics::WORKER_STAGE_PLANS, "source" => "shared")
                    .increment(1);
                Arc::clone(decoded)
            }
            None => {
                let decoded = decode()?;
                self.decoded.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::metrics::WORKER_STAGE_PLANS, "source" => "decoded")
                    .increment(1);
                *plan = Some(Arc::clone(&decoded));
                decoded
            }
        };
        drop(plan);
        Ok((decoded, StagePlanLease { _slot: slot }))
    }

    /// The stage attempt's slot, made if no running task holds one. A
    /// request whose plan differs from the slot's (which an honest
    /// coordinator never sends) gets a private slot.
    fn slot(&self, stage: StageAttempt, encoded: &[u8]) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        slots.retain(|_, slot| slot.strong_count() > 0);
        let new_slot = || {
            Arc::new(Slot {
                encoded: encoded.to_vec(),
                plan: Mutex::new(None),
            })
        };
        match slots.get(&stage).and_then(Weak::upgrade) {
            Some(slot) if slot.encoded == encoded => slot,
            Some(_) => new_slot(),
            None => {
                let slot = new_slot();
                slots.insert(stage, Arc::downgrade(&slot));
                slot
            }
        }
    }

    /// Plans decoded since start (each shared by the stage's tasks here).
    pub fn decoded(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    /// Stage attempts with a live decoded plan.
    pub fn len(&self) -> usize {
        let mut slots = lock(&self.slots);
        slots.retain(|_, slot| slot.strong_count() > 0);
        slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A panic while one task held the lock leaves nothing half-written here
/// (a slot's plan is set whole or not at all), so the poison is ignored.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use squadron_common::error::ErrorKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_plan::empty::EmptyExec;

    use super::*;

    fn stage(stage_id: u32, attempt: u32) -> StageAttempt {
        StageAttempt {
            job_id: "job".into(),
            stage_id,
            attempt,
        }
    }

    /// Decodes through `plans`, counting the decodes in `count`.
    fn get(
        plans: &StagePlans,
        stage: StageAttempt,
        encoded: &[u8],
        count: &AtomicUsize,
    ) -> (Arc<dyn ExecutionPlan>, StagePlanLease) {
        plans
            .get_or_decode(stage, encoded, || {
                count.fetch_add(1, Ordering::SeqCst);
                Ok(Arc::new(EmptyExec::new(Arc::new(Schema::empty()))))
            })
            .unwrap()
    }

    #[test]
    fn tasks_running_together_share_one_decode() {
        let (plans, decodes) = (StagePlans::default(), AtomicUsize::new(0));
        let (first, _lease1) = get(&plans, stage(1, 0), b"plan", &decodes);
        let (second, _lease2) = get(&plans, stage(1, 0), b"plan", &decodes);
        assert_eq!(decodes.load(Ordering::SeqCst), 1);
        assert_eq!(plans.decoded(), 1);
        assert!(Arc::ptr_eq(&first, &second));
    }

    #[test]
    fn other_stages_attempts_and_plans_decode_their_own() {
        let (plans, decodes) = (StagePlans::default(), AtomicUsize::new(0));
        let (first, _a) = get(&plans, stage(1, 0), b"plan", &decodes);
        let (_, _b) = get(&plans, stage(2, 0), b"plan", &decodes);
        let (_, _c) = get(&plans, stage(1, 1), b"plan", &decodes);
        let (other, _d) = get(&plans, stage(1, 0), b"other plan", &decodes);
        assert_eq!(decodes.load(Ordering::SeqCst), 4);
        assert!(!Arc::ptr_eq(&first, &other));
    }

    #[test]
    fn a_plan_is_kept_only_while_a_task_holds_it() {
        let (plans, decodes) = (StagePlans::default(), AtomicUsize::new(0));
        let leases: Vec<_> = (0..3)
            .map(|s| get(&plans, stage(s, 0), b"plan", &decodes).1)
            .collect();
        assert_eq!(plans.len(), 3);
        drop(leases);
        assert!(plans.is_empty());
        let _ = get(&plans, stage(0, 0), b"plan", &decodes);
        assert_eq!(
            decodes.load(Ordering::SeqCst),
            4,
            "decoded again once released"
        );
    }

    #[test]
    fn a_failed_decode_is_not_kept() {
        let plans = StagePlans::default();
        let failed = plans.get_or_decode(stage(1, 0), b"bad", || {
            Err(Error::invalid_argument("cannot decode"))
        });
        assert_eq!(failed.err().unwrap().kind(), ErrorKind::InvalidArgument);
        assert!(plans.is_empty());
    }
}
