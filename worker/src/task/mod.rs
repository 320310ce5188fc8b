//! Running tasks: preparing, executing and stopping them.

pub mod registry;
pub mod runner;

pub use registry::{AttemptKey, TaskRegistry};
pub use runner::{AbortOnDrop, PreparedTask, TaskRunner};
