//! The client-facing Arrow Flight SQL service.

pub mod action_types;
pub mod command_check;
pub mod front;
pub mod handles;
pub mod metadata;
pub mod poll;
pub mod poll_store;
pub mod prepared;
pub mod quotas;
pub mod rebind;
pub mod service;
pub mod session_options;
pub mod sessions;
pub mod sql_info;
pub mod statements;

pub use front::SquadronFlight;
pub use service::SquadronFlightSql;
