//! The client-facing Arrow Flight SQL service.

pub mod metadata;
pub mod prepared;
pub mod service;
pub mod statements;

pub use service::SquadronFlightSql;
