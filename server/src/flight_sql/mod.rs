//! The client-facing Arrow Flight SQL service.

pub mod service;
pub mod statements;

pub use service::SquadronFlightSql;
