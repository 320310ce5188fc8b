//! The tables the coordinator serves.

pub mod delta;
pub mod persisted;
pub mod system;
pub mod tables;
pub mod tpch;

pub use tables::{TableFormat, TableSpec};
