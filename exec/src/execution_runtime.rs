//! The threads tasks execute on, apart from the threads serving gRPC.
//!
//! DataFusion operators are CPU-bound and can hold a thread for a long
//! poll (a nested-loop join over large batches). On the runtime that also
//! serves RunTask, StopTask, stream DoGets and health checks, a few such
//! tasks left the worker unable to answer: the coordinator's health probe
//! timed out, the worker was declared lost, and a cancel could not reach
//! it. Tasks therefore run on their own runtime, one thread per core; the
//! serving runtime stays responsive and the OS shares the cores.

use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

static EXECUTION: OnceLock<Runtime> = OnceLock::new();

/// The runtime tasks run on; built on first use and kept for the life of
/// the process (a static is never dropped, so it never shuts down inside
/// an async context). Workers started in one process (tests) share it,
/// and so does a coordinator for the plans it answers itself.
pub fn execution_runtime() -> Handle {
    EXECUTION
        .get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("squadron-exec")
                .enable_all()
                .build()
                .expect("building the task execution runtime")
        })
        .handle()
        .clone()
}
