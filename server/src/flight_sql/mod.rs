//! The client-facing Arrow Flight SQL service.

pub mod action_types;
mod client_state;
mod column_metadata;
pub mod command_check;
pub mod front;
pub mod handles;
pub mod metadata;
mod parameter_types;
pub mod poll;
pub mod poll_store;
pub mod prepared;
pub mod primary_keys;
pub mod quotas;
pub mod rebind;
pub mod service;
pub mod session_options;
mod session_planning;
pub mod sessions;
pub mod sql_info;
mod statement_runs;
pub mod statements;
mod update_runs;
mod wire;

pub use front::SquadronFlight;
pub use service::SquadronFlightSql;
