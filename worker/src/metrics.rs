//! What workers record in Prometheus metrics (the exporter is
//! `squadron_common::metrics::serve`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use squadron_exec::stream::RetainedMemory;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

pub const WORKER_TASKS: &str = "squadron_worker_tasks_total";
pub const WORKER_TASKS_RUNNING: &str = "squadron_worker_tasks_running";
pub const WORKER_TASK_SECONDS: &str = "squadron_worker_task_duration_seconds";
pub const SHUFFLE_BYTES: &str = "squadron_shuffle_sent_bytes_total";
pub const SHUFFLE_BATCHES: &str = "squadron_shuffle_sent_batches_total";
pub const WORKER_MEMORY_RESERVED: &str = "squadron_worker_memory_reserved_bytes";
pub const WORKER_STAGE_PLANS: &str = "squadron_worker_stage_plans_total";
pub const EXCHANGE_SPILLED_BYTES: &str = "squadron_worker_exchange_spilled_bytes_total";
pub const EXCHANGE_RETAINED_BYTES: &str = "squadron_worker_exchange_retained_bytes";

/// Where a task's plan came from (`source` label): decoded from its
/// request, or shared with a running task of the same stage.
pub const STAGE_PLAN_SOURCES: &[&str] = &["decoded", "shared"];

/// Outcomes of a task (`outcome` label).
pub const TASK_OUTCOMES: &[&str] = &["succeeded", "failed", "cancelled"];

/// Describes the worker's metrics and creates them at zero (adding zero:
/// workers started in one process, as the cluster tests do, share its
/// counters).
pub fn describe_worker() {
    describe_counter!(WORKER_TASKS, "Tasks finished on this worker, by outcome");
    describe_gauge!(WORKER_TASKS_RUNNING, "Tasks running on this worker now");
    describe_histogram!(
        WORKER_TASK_SECONDS,
        Unit::Seconds,
        "Time from a task's start to its end"
    );
    describe_counter!(
        SHUFFLE_BYTES,
        Unit::Bytes,
        "Bytes of task output streamed to other workers and the coordinator"
    );
    describe_counter!(
        SHUFFLE_BATCHES,
        "Record batches of task output streamed to other workers and the coordinator"
    );
    describe_gauge!(
        WORKER_MEMORY_RESERVED,
        Unit::Bytes,
        "Execution memory reserved by the tasks of this worker"
    );
    describe_counter!(
        WORKER_STAGE_PLANS,
        "Task plans, by source: decoded, or shared with a running task of the same stage"
    );
    describe_counter!(
        EXCHANGE_SPILLED_BYTES,
        Unit::Bytes,
        "Bytes of task output spilled to disk (retained outputs past memory, queues past \
         --memory-limit)"
    );
    describe_gauge!(
        EXCHANGE_RETAINED_BYTES,
        Unit::Bytes,
        "Bytes of retained task output (fault-tolerant mode) held in memory now"
    );
    counter!(EXCHANGE_SPILLED_BYTES).increment(0);
    gauge!(EXCHANGE_RETAINED_BYTES).increment(0.0);
    for source in STAGE_PLAN_SOURCES {
        counter!(WORKER_STAGE_PLANS, "source" => *source).increment(0);
    }
    for outcome in TASK_OUTCOMES {
        counter!(WORKER_TASKS, "outcome" => *outcome).increment(0);
    }
    counter!(SHUFFLE_BYTES).increment(0);
    counter!(SHUFFLE_BATCHES).increment(0);
    gauge!(WORKER_TASKS_RUNNING).increment(0.0);
    gauge!(WORKER_MEMORY_RESERVED).increment(0.0);
}

/// Records a finished task.
pub fn task_finished(outcome: &'static str, elapsed: Duration) {
    counter!(WORKER_TASKS, "outcome" => outcome).increment(1);
    metrics::histogram!(WORKER_TASK_SECONDS).record(elapsed.as_secs_f64());
}

/// Reports the execution memory `runtime`'s tasks hold, the retained
/// exchange memory and the bytes spilled, every second, until dropped.
/// Adds changes, so the workers of one process sum up.
pub fn report_memory(
    runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    retained: Arc<RetainedMemory>,
    spilled: Arc<AtomicU64>,
) -> tokio_util::task::AbortOnDropHandle<()> {
    tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
        let reserved = gauge!(WORKER_MEMORY_RESERVED);
        let retained_gauge = gauge!(EXCHANGE_RETAINED_BYTES);
        let spilled_counter = counter!(EXCHANGE_SPILLED_BYTES);
        let (mut last, mut last_retained, mut last_spilled) = (0usize, 0usize, 0u64);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let now = runtime.memory_pool.reserved();
            reserved.increment(now as f64 - last as f64);
            last = now;
            let now = retained.used();
            retained_gauge.increment(now as f64 - last_retained as f64);
            last_retained = now;
            let now = spilled.load(Ordering::Relaxed);
            spilled_counter.increment(now.saturating_sub(last_spilled));
            last_spilled = now;
        }
    }))
}
