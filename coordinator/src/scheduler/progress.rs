//! How far a running job is: tasks finished out of the tasks of its
//! current attempt (PollFlightInfo reports it to clients).

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct JobProgress {
    tasks: AtomicUsize,
    finished: AtomicUsize,
}

impl JobProgress {
    /// A new attempt starts over with `tasks` tasks, none finished.
    pub fn start_attempt(&self, tasks: usize) {
        self.finished.store(0, Ordering::Relaxed);
        self.tasks.store(tasks, Ordering::Relaxed);
    }

    pub fn task_finished(&self) {
        self.finished.fetch_add(1, Ordering::Relaxed);
    }

    /// Finished tasks and all tasks of the current attempt.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.finished.load(Ordering::Relaxed),
            self.tasks.load(Ordering::Relaxed),
        )
    }

    /// The share of tasks finished, 0.0 to 1.0.
    pub fn fraction(&self) -> f64 {
        match self.counts() {
            (_, 0) => 0.0,
            (finished, tasks) => (finished.min(tasks) as f64) / (tasks as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_counts_the_current_attempt() {
        let progress = JobProgress::default();
        assert_eq!(progress.fraction(), 0.0);
        progress.start_attempt(4);
        progress.task_finished();
        assert_eq!(progress.fraction(), 0.25);
        progress.start_attempt(4);
        assert_eq!(progress.counts(), (0, 4), "a retry starts over");
    }
}
