//! Which worker runs which task.

use squadron_planner::JobGraph;

/// `workers[placement[stage][partition]]` runs that task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub workers: Vec<String>,
    pub tasks: Vec<Vec<usize>>,
}

impl Placement {
    /// Spreads tasks round robin over the workers, continuing across stages
    /// so that single-task stages do not all land on the first worker.
    pub fn round_robin(graph: &JobGraph, workers: Vec<String>, offset: usize) -> Self {
        let n = workers.len().max(1);
        let mut next = offset;
        let tasks = graph
            .stages
            .iter()
            .map(|stage| {
                (0..stage.tasks)
                    .map(|_| {
                        let w = next % n;
                        next += 1;
                        w
                    })
                    .collect()
            })
            .collect();
        Self { workers, tasks }
    }

    pub fn worker_of(&self, stage: usize, partition: usize) -> &str {
        &self.workers[self.tasks[stage][partition]]
    }

    /// The distinct workers used by the job.
    pub fn workers_used(&self) -> Vec<String> {
        let mut used: Vec<usize> = self.tasks.iter().flatten().copied().collect();
        used.sort_unstable();
        used.dedup();
        used.into_iter().map(|w| self.workers[w].clone()).collect()
    }
}
