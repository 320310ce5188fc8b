//! Running tasks: preparing, executing and stopping them.

pub mod failpoint;
mod measure;
mod missing_files;
mod own_state;
pub mod registry;
pub mod runner;
pub mod stage_plans;

pub use failpoint::Failpoint;
pub use registry::{AttemptKey, TaskEntry, TaskRegistry};
pub use runner::{PreparedTask, TaskOwner, TaskRunner};
pub use stage_plans::StagePlans;
