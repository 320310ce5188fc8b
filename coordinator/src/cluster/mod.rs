//! The worker cluster as the coordinator sees it.

pub mod discovery;
pub mod health;
pub mod resolver;

pub use discovery::{DiscoveredWorkers, Discovery};
pub use health::WorkerHealth;
pub use resolver::{normalize_url, StaticResolver, WorkerResolver};
