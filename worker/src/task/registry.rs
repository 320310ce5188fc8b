//! The tasks running on this worker, so they can be stopped.
//!
//! A task's entry is reserved before the task starts (so a task can never
//! finish before it is registered) and removed by the task itself when it
//! ends or is dropped. A second task with the same key is refused while the
//! first one runs: an entry is never overwritten.

use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use squadron_common::error::Error;
use tokio_util::sync::CancellationToken;

/// A task attempt: job, stage, partition, attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptKey {
    pub job_id: String,
    pub stage_id: u32,
    pub partition: u32,
    pub attempt: u32,
}

impl std::fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/s{}/p{}/a{}",
            self.job_id, self.stage_id, self.partition, self.attempt
        )
    }
}

#[derive(Clone, Default)]
pub struct TaskRegistry {
    running: Arc<DashMap<AttemptKey, CancellationToken>>,
}

/// A task's place in the registry; dropping it removes the entry.
pub struct TaskEntry {
    key: AttemptKey,
    token: CancellationToken,
    registry: TaskRegistry,
}

impl TaskEntry {
    /// Cancelled when the task is stopped.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl Drop for TaskEntry {
    fn drop(&mut self) {
        self.registry.running.remove(&self.key);
    }
}

impl TaskRegistry {
    /// Reserves the entry of a new task; refused while that attempt runs.
    pub fn reserve(&self, key: AttemptKey) -> Result<TaskEntry, Error> {
        match self.running.entry(key.clone()) {
            Entry::Occupied(_) => Err(Error::already_exists(format!(
                "task {key} is already running on this worker"
            ))),
            Entry::Vacant(slot) => {
                let token = CancellationToken::new();
                slot.insert(token.clone());
                Ok(TaskEntry {
                    key,
                    token,
                    registry: self.clone(),
                })
            }
        }
    }

    /// Stops one attempt; false when it is not running here.
    pub fn stop(&self, key: &AttemptKey) -> bool {
        match self.running.get(key) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Stops every task of one attempt of a job; returns how many.
    pub fn stop_job(&self, job_id: &str, attempt: u32) -> usize {
        let mut stopped = 0;
        for entry in self.running.iter() {
            if entry.key().job_id == job_id && entry.key().attempt == attempt {
                entry.value().cancel();
                stopped += 1;
            }
        }
        stopped
    }

    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squadron_common::error::ErrorKind;

    fn key(attempt: u32) -> AttemptKey {
        AttemptKey {
            job_id: "j".into(),
            stage_id: 1,
            partition: 2,
            attempt,
        }
    }

    #[test]
    fn a_running_key_is_refused_and_freed_when_its_task_ends() {
        let registry = TaskRegistry::default();
        let entry = registry.reserve(key(0)).unwrap();
        let err = registry.reserve(key(0)).err().expect("duplicate refused");
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert!(registry.reserve(key(1)).is_ok(), "another attempt is fine");
        assert_eq!(registry.len(), 1, "the dropped entry of attempt 1 is gone");
        drop(entry);
        assert!(registry.is_empty());
        assert!(registry.reserve(key(0)).is_ok());
    }

    #[test]
    fn stopping_cancels_only_the_named_attempt() {
        let registry = TaskRegistry::default();
        let a = registry.reserve(key(0)).unwrap();
        let b = registry.reserve(key(1)).unwrap();
        assert_eq!(registry.stop_job("j", 1), 1);
        assert!(!a.token().is_cancelled());
        assert!(b.token().is_cancelled());
        assert!(registry.stop(&key(0)));
        assert!(a.token().is_cancelled());
        assert!(!registry.stop(&key(5)));
    }
}
