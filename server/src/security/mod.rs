//! Who may talk to the coordinator, and over what: client-facing TLS,
//! mutual TLS to the workers, and (in `auth`) users and their tokens.

pub mod args;
pub mod auth;
pub mod layer;
pub mod secret;
pub mod tickets;
pub mod tokens;
pub mod users;

use std::path::PathBuf;

pub use args::{Security, SecurityArgs};

/// The client-facing certificate (`--tls-cert`, `--tls-key`), and the CA
/// whose client certificates are required (`--tls-client-ca`), if any.
#[derive(Debug, Clone)]
pub struct ClientTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl ClientTlsFiles {
    pub fn from_args(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        client_ca: Option<PathBuf>,
    ) -> anyhow::Result<Option<Self>> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(Self {
                cert,
                key,
                client_ca,
            })),
            (None, None) if client_ca.is_none() => Ok(None),
            _ => anyhow::bail!(
                "--tls-cert and --tls-key go together (and --tls-client-ca needs them)"
            ),
        }
    }
}
