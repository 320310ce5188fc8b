//! Placing tasks on workers and running them.

pub mod dispatch;
pub mod placement;

pub use dispatch::{start_job, RunningJob};
pub use placement::Placement;
