//! The client-facing Arrow Flight SQL service.

pub mod metadata;
pub mod prepared;
pub mod service;
pub mod sql_info;
pub mod statements;

pub use service::SquadronFlightSql;
