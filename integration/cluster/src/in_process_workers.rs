//! Embedded workers started in this process, for tests that look inside
//! them (their tasks, streams and decoded plans): the coordinator runs its
//! embedded workers as child processes, which a test cannot inspect.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use squadron_server::local_workers::{EmbeddedWorker, LaunchWorkers, LocalWorkerOptions};
use squadron_server::{Launcher, RunningServer};
use squadron_worker::{spawn_worker, Worker, WorkerOptions};

/// Starts each embedded worker with `spawn_worker`, as the coordinator
/// did before its workers became processes.
pub struct InProcessWorkers;

impl InProcessWorkers {
    pub fn launcher() -> Launcher {
        Launcher(Arc::new(Self))
    }
}

impl LaunchWorkers for InProcessWorkers {
    fn launch<'a>(
        &'a self,
        options: &'a LocalWorkerOptions,
    ) -> BoxFuture<'a, anyhow::Result<(String, Box<dyn EmbeddedWorker>)>> {
        Box::pin(async move {
            let worker_options = WorkerOptions {
                memory_limit: options.memory_limit,
                spill: None,
                failpoint: None,
                cluster_tls: options.cluster_tls.clone(),
                data_roots: squadron_exec::plan::guard::DataRoots::default()
                    .with_warehouse(options.warehouse.as_ref().map(|u| u.as_str())),
                stores: options.stores.clone(),
            };
            let (url, worker) = spawn_worker("127.0.0.1:0".parse()?, worker_options).await?;
            Ok((url, Box::new(InProcessWorker(worker)) as _))
        })
    }
}

struct InProcessWorker(Worker);

impl EmbeddedWorker for InProcessWorker {
    fn stop(self: Box<Self>, _grace: Duration) -> BoxFuture<'static, ()> {
        // It serves on this process's runtime and ends with it.
        Box::pin(async {})
    }

    fn as_any(&self) -> &dyn std::any::Any {
        &self.0
    }
}

/// The embedded workers of `server`, when started by `InProcessWorkers`.
pub fn workers(server: &RunningServer) -> Vec<&Worker> {
    server
        .local_workers
        .iter()
        .map(|w| {
            w.as_any()
                .downcast_ref::<Worker>()
                .expect("embedded workers started by InProcessWorkers")
        })
        .collect()
}
