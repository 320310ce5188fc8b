//! Admission control: at most `max_running` queries run at once and at most
//! `max_queued` wait for a slot; beyond that a query is refused at once with
//! RESOURCE_EXHAUSTED instead of piling up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use squadron_common::error::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Admission {
    running: Arc<Semaphore>,
    queued: AtomicUsize,
    max_running: usize,
    max_queued: usize,
}

/// A running query's slot; dropping it lets the next query in.
pub type Slot = OwnedSemaphorePermit;

impl Admission {
    pub fn new(max_running: usize, max_queued: usize) -> Self {
        let max_running = max_running.max(1);
        Self {
            running: Arc::new(Semaphore::new(max_running)),
            queued: AtomicUsize::new(0),
            max_running,
            max_queued,
        }
    }

    /// A slot now, or after waiting in the queue; refused when the queue is
    /// full too.
    pub async fn admit(&self) -> Result<Slot, Error> {
        if let Ok(slot) = Arc::clone(&self.running).try_acquire_owned() {
            return Ok(slot);
        }
        let queued = self.queued.fetch_add(1, Ordering::SeqCst);
        let _leave = LeaveQueue(&self.queued);
        if queued >= self.max_queued {
            return Err(Error::resource_exhausted(format!(
                "the server is busy: {} queries running and {} waiting \
                 (--max-concurrent-queries, --max-queued-queries); retry later",
                self.max_running, self.max_queued
            )));
        }
        Arc::clone(&self.running)
            .acquire_owned()
            .await
            .map_err(|_| Error::unavailable("the server is shutting down"))
    }

    /// Whether fewer than half the running slots are taken.
    pub fn mostly_free(&self) -> bool {
        self.running.available_permits() * 2 > self.max_running
    }

    /// Queries running now.
    pub fn running(&self) -> usize {
        self.max_running - self.running.available_permits()
    }
}

struct LeaveQueue<'a>(&'a AtomicUsize);

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squadron_common::error::ErrorKind;
    use std::time::Duration;

    #[tokio::test]
    async fn beyond_running_and_queued_a_query_is_refused_at_once() {
        let admission = Arc::new(Admission::new(1, 1));
        let first = admission.admit().await.unwrap();
        assert_eq!(admission.running(), 1);
        let waiting = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.admit().await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let refused = admission.admit().await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ResourceExhausted);
        drop(first);
        waiting
            .await
            .unwrap()
            .expect("the queued query gets the slot");
        assert_eq!(admission.running(), 0);
    }
}
