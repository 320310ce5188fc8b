//! Admitting, placing, dispatching and retrying jobs.

pub mod admission;
pub mod dispatch;
pub mod fault_tolerant;
pub mod job_runner;
pub mod local_run;
pub mod placement;
pub mod policy;
pub mod progress;
pub mod rerun;
pub mod stoppable;

pub use admission::Admission;
pub use dispatch::{start_job, JobAttempt, JobIds, TaskFailure};
pub use job_runner::{JobReport, JobRunner};
pub use local_run::{run_locally, started_at_once};
pub use placement::Placement;
pub use progress::{JobProgress, TaskRun};
