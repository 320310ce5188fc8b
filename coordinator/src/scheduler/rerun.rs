//! Which tasks run again after a failure, in the fault-tolerant mode.
//!
//! Every task's output is retained on its worker until the job ends, so a
//! failure costs only:
//! - the tasks on a lost worker whose output is still needed: some task
//!   of a stage reading it has not finished, or (the final stage) the
//!   coordinator has not yet committed it to the client;
//! - the failed task itself (a read of a lost input, a reset stream);
//! - and, transitively, every unfinished task of a stage that reads a
//!   stage with a task running again: it may have read part of the old
//!   attempt's output, which the new attempt need not reproduce in the
//!   same order, so it starts over from the new one.
//!
//! Finished tasks elsewhere are never run again: their outputs are still
//! there for the new attempts to read.

use std::collections::{BTreeSet, HashSet};

use squadron_planner::JobGraph;

use super::placement::Placement;

/// The current attempt of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSlot {
    pub worker: String,
    pub attempt: u32,
    /// It succeeded (its whole output is retained on its worker).
    pub finished: bool,
}

/// Every task's current attempt, by stage and partition.
#[derive(Debug, Clone)]
pub struct TaskTable {
    pub slots: Vec<Vec<TaskSlot>>,
    /// Final-stage tasks whose rows went to the client.
    pub committed: Vec<bool>,
}

impl TaskTable {
    pub fn new(graph: &JobGraph, worker_of: impl Fn(usize, usize) -> String) -> Self {
        let slots = graph
            .stages
            .iter()
            .map(|stage| {
                (0..stage.tasks)
                    .map(|p| TaskSlot {
                        worker: worker_of(stage.id, p),
                        attempt: 0,
                        finished: false,
                    })
                    .collect()
            })
            .collect();
        Self {
            slots,
            committed: vec![false; graph.final_stage().tasks],
        }
    }

    pub fn slot(&self, stage: usize, partition: usize) -> &TaskSlot {
        &self.slots[stage][partition]
    }

    pub fn slot_mut(&mut self, stage: usize, partition: usize) -> &mut TaskSlot {
        &mut self.slots[stage][partition]
    }

    /// The distinct workers running or holding the current attempts.
    pub fn workers(&self) -> Vec<String> {
        let mut workers: Vec<String> = self
            .slots
            .iter()
            .flatten()
            .map(|slot| slot.worker.clone())
            .collect();
        workers.sort_unstable();
        workers.dedup();
        workers
    }

    /// Where the current attempts run, as a placement.
    pub fn placement(&self) -> Placement {
        let workers = self.workers();
        let tasks = self
            .slots
            .iter()
            .map(|slots| {
                slots
                    .iter()
                    .map(|slot| workers.iter().position(|w| *w == slot.worker).unwrap_or(0))
                    .collect()
            })
            .collect();
        Placement { workers, tasks }
    }

    /// Whether a task's output may still be read: by an unfinished task,
    /// or one that runs again.
    fn needed(
        &self,
        graph: &JobGraph,
        consumers: &[Vec<usize>],
        rerun: &BTreeSet<(usize, usize)>,
        stage: usize,
        p: usize,
    ) -> bool {
        if stage == graph.final_stage().id {
            return !self.committed[p];
        }
        consumers[stage].iter().any(|&c| {
            let rerun_reader = rerun.iter().any(|&(s, _)| s == c);
            rerun_reader || self.slots[c].iter().any(|slot| !slot.finished)
        })
    }

    /// The tasks to run again, producers first (see the module's rules),
    /// after `lost` workers went away and `failed` (if any) failed.
    pub fn to_rerun(
        &self,
        graph: &JobGraph,
        lost: &HashSet<String>,
        failed: Option<(usize, usize)>,
    ) -> BTreeSet<(usize, usize)> {
        let consumers = graph.consumers();
        let mut rerun: BTreeSet<(usize, usize)> = failed.into_iter().collect();
        // A task run again needs every output it reads, so a lost output
        // can become needed by a rerun found later: until nothing changes.
        loop {
            let before = rerun.len();
            self.add_lost_outputs(graph, &consumers, lost, &mut rerun);
            self.add_readers(graph, &mut rerun);
            if rerun.len() == before {
                return rerun;
            }
        }
    }

    fn add_lost_outputs(
        &self,
        graph: &JobGraph,
        consumers: &[Vec<usize>],
        lost: &HashSet<String>,
        rerun: &mut BTreeSet<(usize, usize)>,
    ) {
        for (stage, slots) in self.slots.iter().enumerate() {
            for (p, slot) in slots.iter().enumerate() {
                if lost.contains(&slot.worker) && self.needed(graph, consumers, rerun, stage, p) {
                    rerun.insert((stage, p));
                }
            }
        }
    }

    /// Adds the unfinished readers of outputs that are produced again.
    fn add_readers(&self, graph: &JobGraph, rerun: &mut BTreeSet<(usize, usize)>) {
        // Stages are numbered producers first, so one pass in order
        // reaches every transitive reader.
        for stage in &graph.stages {
            let reads_rerun = stage
                .inputs
                .iter()
                .any(|&input| rerun.iter().any(|&(s, _)| s == input));
            if !reads_rerun {
                continue;
            }
            for (p, slot) in self.slots[stage.id].iter().enumerate() {
                let uncommitted = stage.id != graph.final_stage().id || !self.committed[p];
                if !slot.finished && uncommitted {
                    rerun.insert((stage.id, p));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::empty::EmptyExec;
    use squadron_exec::plan::{StageOutput, StageWriteExec};
    use squadron_planner::Stage;
    use std::sync::Arc;

    /// scan (2 tasks) -> aggregate (2 tasks) -> final (1 task)
    fn graph() -> JobGraph {
        let stage = |id: usize, tasks: usize, inputs: Vec<usize>| {
            let empty = Arc::new(EmptyExec::new(Arc::new(
                datafusion::arrow::datatypes::Schema::empty(),
            )));
            Stage {
                id,
                plan: Arc::new(StageWriteExec::try_new(empty, StageOutput::JobOutput).unwrap()),
                tasks,
                inputs,
                encoded: Default::default(),
            }
        };
        JobGraph {
            stages: vec![
                stage(0, 2, vec![]),
                stage(1, 2, vec![0]),
                stage(2, 1, vec![1]),
            ],
        }
    }

    fn table(graph: &JobGraph) -> TaskTable {
        // Partition 0 of every stage on worker a, partition 1 on b.
        TaskTable::new(graph, |_, p| ["a", "b"][p].to_string())
    }

    fn lost(url: &str) -> HashSet<String> {
        [url.to_string()].into()
    }

    fn set(tasks: &[(usize, usize)]) -> BTreeSet<(usize, usize)> {
        tasks.iter().copied().collect()
    }

    #[test]
    fn while_everything_runs_a_lost_worker_reruns_its_tasks_and_their_readers() {
        let g = graph();
        let t = table(&g);
        assert_eq!(
            t.to_rerun(&g, &lost("b"), None),
            set(&[(0, 1), (1, 0), (1, 1), (2, 0)])
        );
    }

    #[test]
    fn finished_tasks_on_healthy_workers_are_kept() {
        let g = graph();
        let mut t = table(&g);
        for p in 0..2 {
            t.slot_mut(0, p).finished = true;
        }
        t.slot_mut(1, 0).finished = true;
        // b ran scan 1 (finished, but aggregate 1 still reads it) and
        // aggregate 1; the final task reads aggregate 1.
        assert_eq!(
            t.to_rerun(&g, &lost("b"), None),
            set(&[(0, 1), (1, 1), (2, 0)])
        );
        // Once every aggregate finished, the scans' outputs are needed only
        // because b's aggregate, lost with its output, must read them again.
        t.slot_mut(1, 1).finished = true;
        assert_eq!(
            t.to_rerun(&g, &lost("b"), None),
            set(&[(0, 1), (1, 1), (2, 0)])
        );
        // Lost a: its aggregate is finished and its output read by the
        // final task on a too, which runs again; nothing of b's.
        assert_eq!(
            t.to_rerun(&g, &lost("a"), None),
            set(&[(0, 0), (1, 0), (2, 0)])
        );
    }

    #[test]
    fn a_committed_final_task_is_never_run_again() {
        let g = graph();
        let mut t = table(&g);
        for (s, p) in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)] {
            t.slot_mut(s, p).finished = true;
        }
        t.committed[0] = true;
        assert!(t.to_rerun(&g, &lost("a"), None).is_empty());
        assert!(t.to_rerun(&g, &lost("b"), None).is_empty());
    }

    #[test]
    fn a_failed_read_reruns_the_reader_and_what_reads_it() {
        let g = graph();
        let mut t = table(&g);
        t.slot_mut(0, 0).finished = true;
        t.slot_mut(0, 1).finished = true;
        assert_eq!(
            t.to_rerun(&g, &HashSet::new(), Some((1, 0))),
            set(&[(1, 0), (2, 0)])
        );
    }
}
