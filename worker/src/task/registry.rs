//! The tasks running on this worker, so they can be stopped.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::task::AbortHandle;

/// A task attempt: job, stage, partition, attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptKey {
    pub job_id: String,
    pub stage_id: u32,
    pub partition: u32,
    pub attempt: u32,
}

#[derive(Clone, Default)]
pub struct TaskRegistry {
    // An entry lives from start to end of its task; bounded by running tasks.
    running: Arc<DashMap<AttemptKey, AbortHandle>>,
}

impl TaskRegistry {
    pub fn insert(&self, key: AttemptKey, handle: AbortHandle) {
        self.running.insert(key, handle);
    }

    pub fn finished(&self, key: &AttemptKey) {
        self.running.remove(key);
    }

    /// Stops one attempt; false when it is not running here.
    pub fn stop(&self, key: &AttemptKey) -> bool {
        match self.running.remove(key) {
            Some((_, handle)) => {
                handle.abort();
                true
            }
            None => false,
        }
    }

    /// Stops every task of a job; returns how many.
    pub fn stop_job(&self, job_id: &str) -> usize {
        let keys: Vec<AttemptKey> = self
            .running
            .iter()
            .filter(|e| e.key().job_id == job_id)
            .map(|e| e.key().clone())
            .collect();
        keys.iter().filter(|k| self.stop(k)).count()
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}
