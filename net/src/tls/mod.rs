//! TLS for Squadron's listeners and channels: client-facing TLS on the
//! coordinator, mutual TLS inside the cluster.
//!
//! - `identity`: PEM files, cluster roles in certificates
//! - `server_config`: rustls server settings, certificates reloaded live
//! - `conn`: accepted connections (plain or TLS) with the peer's identity
//! - `coalesced_writes`: fewer, larger socket writes under h2
//! - `client`: the TLS settings for dialing cluster peers
//! - `generate`: a development CA and certificates

pub mod client;
pub mod coalesced_writes;
pub mod conn;
pub mod generate;
pub mod identity;
pub mod server_config;

pub use identity::{ClusterTlsFiles, Role, CLUSTER_DOMAIN};
