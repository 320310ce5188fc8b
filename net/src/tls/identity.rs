//! Certificates and keys from PEM files, and the cluster role a peer's
//! certificate carries.
//!
//! Cluster certificates name their holder's role in a URI subject
//! alternative name (`urn:squadron:role:coordinator` or `…:worker`), so a
//! worker can tell the coordinator (which may start tasks) from another
//! worker (which may only read streams). They also carry the DNS name
//! `squadron-cluster`, which every node verifies instead of a host name:
//! workers come and go on addresses no certificate could list.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The DNS name every cluster certificate carries and every node checks.
pub const CLUSTER_DOMAIN: &str = "squadron-cluster";

const ROLE_URI_PREFIX: &str = "urn:squadron:role:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Worker,
}

impl Role {
    pub fn uri(self) -> String {
        let name = match self {
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
        };
        format!("{ROLE_URI_PREFIX}{name}")
    }
}

/// The roles the certificate `cert` names (none for a malformed one).
pub fn roles_of(cert: &CertificateDer<'_>) -> Vec<Role> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return vec![];
    };
    let Ok(Some(names)) = parsed.subject_alternative_name() else {
        return vec![];
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => uri.strip_prefix(ROLE_URI_PREFIX),
            _ => None,
        })
        .filter_map(|role| match role {
            "coordinator" => Some(Role::Coordinator),
            "worker" => Some(Role::Worker),
            _ => None,
        })
        .collect()
}

pub fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading certificates from {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificates in {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", path.display());
    Ok(certs)
}

pub fn load_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("reading a private key from {}", path.display()))
}

/// A node's cluster identity: the cluster CA, and its own certificate and
/// key (`--cluster-ca`, `--cluster-cert`, `--cluster-key`).
#[derive(Debug, Clone)]
pub struct ClusterTlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClusterTlsFiles {
    /// All three or none: half a configuration is a start-up error.
    pub fn from_args(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> anyhow::Result<Option<Self>> {
        match (ca, cert, key) {
            (Some(ca), Some(cert), Some(key)) => Ok(Some(Self { ca, cert, key })),
            (None, None, None) => Ok(None),
            _ => anyhow::bail!("--cluster-ca, --cluster-cert and --cluster-key go together"),
        }
    }
}
