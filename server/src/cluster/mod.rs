//! The worker cluster as the coordinator sees it.

pub mod resolver;

pub use resolver::{normalize_url, StaticResolver, WorkerResolver};
