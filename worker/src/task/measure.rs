//! What one task did, sent with its final status (`TaskMetrics`): when it
//! ran, what it read and wrote, its CPU time, spill and peak memory, and
//! its operators' metrics. EXPLAIN ANALYZE and `system.tasks` show them.
//!
//! A stage's decoded plan is shared by its tasks on one worker, and so
//! are the metrics of operators the binding does not copy (the scans and
//! what is above them up to a stage read): of those, each task keeps only
//! the metrics of its own partition. The operators binding copied are the
//! task's own, all their partitions included (a merge reads every
//! partition of its stage read).

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::common::Result;
use datafusion::datasource::memory::DataSourceExec;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion::physical_plan::{displayable, ExecutionPlan};
use squadron_exec::plan::{StageReadExec, BYTES_RECEIVED};
use squadron_exec::stream::OutputCount;
use squadron_proto::v1::{Metric, OperatorMetrics, TaskMetrics};

/// Longest operator description sent (a scan lists its files).
const NAME_CHARS: usize = 240;

/// The worker's memory pool as one task sees it: every reservation goes
/// to the worker's pool, which alone decides; this only counts the task's
/// share and its peak.
#[derive(Debug)]
pub struct TaskMemory {
    inner: Arc<dyn MemoryPool>,
    held: AtomicUsize,
    peak: AtomicUsize,
}

impl TaskMemory {
    pub fn new(inner: Arc<dyn MemoryPool>) -> Self {
        Self {
            inner,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    fn grew(&self, bytes: usize) {
        let held = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(held, Ordering::Relaxed);
    }
}

impl fmt::Display for TaskMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task share of {}", self.inner)
    }
}

impl MemoryPool for TaskMemory {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer)
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer)
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        self.grew(additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        // Saturating: a reservation made before the task (none today)
        // would shrink what this never counted.
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(shrink))
            });
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        self.inner.try_grow(reservation, additional)?;
        self.grew(additional);
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

/// `ctx` with its memory counted by a `TaskMemory` of its own.
pub fn with_task_memory(ctx: &TaskContext) -> (Arc<TaskContext>, Arc<TaskMemory>) {
    let memory = Arc::new(TaskMemory::new(Arc::clone(ctx.memory_pool())));
    let mut runtime = ctx.runtime_env().as_ref().clone();
    runtime.memory_pool = Arc::clone(&memory) as Arc<dyn MemoryPool>;
    let task = TaskContext::new(
        ctx.task_id(),
        ctx.session_id(),
        ctx.session_config().clone(),
        ctx.scalar_functions().clone(),
        ctx.higher_order_functions().clone(),
        ctx.aggregate_functions().clone(),
        ctx.window_functions().clone(),
        Arc::new(runtime),
    );
    (Arc::new(task), memory)
}

pub fn unix_micros(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The operators of a decoded stage plan, by address: shared by the
/// stage's tasks on this worker unless binding copied them.
#[derive(Debug, Default)]
pub struct SharedNodes(HashSet<usize>);

impl SharedNodes {
    pub fn of(plan: &Arc<dyn ExecutionPlan>) -> Self {
        let mut nodes = HashSet::new();
        visit(plan.as_ref(), 0, &mut |node, _| {
            nodes.insert(address(node));
        });
        Self(nodes)
    }

    /// Whether `node`'s metrics are shared with the stage's other tasks
    /// here. A scan always is: the copy a task's dynamic filter makes of a
    /// shared scan (`squadron_task_rewrites::dynamic_filters`) keeps its source, and
    /// the source holds the metrics.
    fn contains(&self, node: &dyn ExecutionPlan) -> bool {
        self.0.contains(&address(node)) || node.is::<DataSourceExec>()
    }
}

fn address(node: &dyn ExecutionPlan) -> usize {
    node as *const dyn ExecutionPlan as *const () as usize
}

/// Which share of a stage's plan one task is: its partition, and the
/// operators it shares with the stage's other tasks.
#[derive(Clone, Copy)]
pub struct TaskShare<'a> {
    pub partition: usize,
    pub shared: &'a SharedNodes,
}

/// The metrics of the task `task` that ran its partition of `plan` from
/// `started` until now and wrote `output`.
pub fn task_metrics(
    plan: &Arc<dyn ExecutionPlan>,
    task: TaskShare<'_>,
    started: SystemTime,
    output: OutputCount,
    memory: &TaskMemory,
) -> TaskMetrics {
    let mut metrics = TaskMetrics {
        started_unix_micros: unix_micros(started),
        ended_unix_micros: unix_micros(SystemTime::now()),
        output_rows: output.rows,
        output_batches: output.batches,
        output_bytes: output.bytes,
        spilled_bytes: output.spilled_bytes,
        output_rows_filtered: output.rows_filtered,
        peak_memory_bytes: memory.peak() as u64,
        ..Default::default()
    };
    visit(plan.as_ref(), 0, &mut |node, depth| {
        let partition = task.shared.contains(node).then_some(task.partition);
        let own = node
            .metrics()
            .map(|set| of_partition(&set, partition))
            .unwrap_or_default();
        let value = |name: &str| {
            own.iter()
                .find(|m| m.name == name)
                .map_or(0, |m: &Metric| m.value)
        };
        metrics.elapsed_compute_nanos += value("elapsed_compute");
        metrics.spilled_bytes += value("spilled_bytes");
        if node.downcast_ref::<StageReadExec>().is_some() {
            metrics.input_rows += value("output_rows");
            metrics.input_bytes += value(BYTES_RECEIVED);
        }
        metrics.operators.push(OperatorMetrics {
            depth: depth as u32,
            name: truncated(&one_line(node)),
            metrics: own,
        });
    });
    metrics
}

fn visit(node: &dyn ExecutionPlan, depth: usize, f: &mut dyn FnMut(&dyn ExecutionPlan, usize)) {
    f(node, depth);
    for child in node.children() {
        visit(child.as_ref(), depth + 1, f);
    }
}

fn one_line(node: &dyn ExecutionPlan) -> String {
    displayable(node)
        .one_line()
        .to_string()
        .trim_end()
        .to_string()
}

fn truncated(text: &str) -> String {
    match text.char_indices().nth(NAME_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// The metrics of `set` that are `partition`'s (or no partition's; all
/// of them when `None`), summed by name; timestamps are left out (start
/// and end are the task's).
fn of_partition(set: &MetricsSet, partition: Option<usize>) -> Vec<Metric> {
    let mut summed: Vec<Metric> = vec![];
    for metric in set.iter() {
        if partition.is_some_and(|want| metric.partition().is_some_and(|p| p != want)) {
            continue;
        }
        let value = metric.value();
        if matches!(
            value,
            MetricValue::StartTimestamp(_) | MetricValue::EndTimestamp(_)
        ) {
            continue;
        }
        let name = value.name();
        let amount = value.as_usize() as u64;
        match summed.iter_mut().find(|m| m.name == name) {
            Some(m) => m.value += amount,
            None => summed.push(Metric {
                name: name.to_string(),
                value: amount,
            }),
        }
    }
    summed
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder};

    #[test]
    fn a_task_counts_its_own_share_and_peak_of_the_worker_pool() {
        let worker: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1000));
        let task: Arc<dyn MemoryPool> = Arc::new(TaskMemory::new(Arc::clone(&worker)));
        let other = MemoryConsumer::new("other").register(&worker);
        other.grow(100);
        let mine = MemoryConsumer::new("mine").register(&task);
        mine.grow(300);
        mine.shrink(200);
        mine.grow(50);
        assert_eq!(worker.reserved(), 250, "the worker's pool holds both");
        let counted = task.downcast_ref::<TaskMemory>().unwrap();
        assert_eq!(counted.held.load(Ordering::Relaxed), 150);
        assert_eq!(counted.peak(), 300);
        assert!(
            mine.try_grow(800).is_err(),
            "the worker's limit still applies"
        );
        assert_eq!(counted.peak(), 300);
    }

    #[test]
    fn only_the_tasks_partition_is_kept_and_summed_by_name() {
        let set = ExecutionPlanMetricsSet::new();
        MetricBuilder::new(&set).output_rows(0).add(5);
        MetricBuilder::new(&set).output_rows(1).add(7);
        MetricBuilder::new(&set).global_counter("files").add(2);
        MetricBuilder::new(&set).counter("bytes", 1).add(3);
        MetricBuilder::new(&set).counter("bytes", 1).add(4);
        let kept = of_partition(&set.clone_inner(), Some(1));
        let value = |name: &str| kept.iter().find(|m| m.name == name).map(|m| m.value);
        assert_eq!(value("output_rows"), Some(7));
        assert_eq!(value("files"), Some(2), "metrics of no partition are kept");
        assert_eq!(value("bytes"), Some(7));
        let all = of_partition(&set.clone_inner(), None);
        let rows = all
            .iter()
            .find(|m| m.name == "output_rows")
            .map(|m| m.value);
        assert_eq!(rows, Some(12), "an operator of the task's own counts whole");
    }

    #[test]
    fn long_descriptions_are_cut() {
        assert_eq!(truncated("short"), "short");
        let long = "é".repeat(NAME_CHARS + 10);
        assert_eq!(truncated(&long).chars().count(), NAME_CHARS + 1);
    }
}
