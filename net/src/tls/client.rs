//! Dialing cluster peers over mutual TLS: the peer must present a
//! certificate from the cluster CA for the cluster name, and this node
//! presents its own.

use anyhow::Context;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::identity::{ClusterTlsFiles, CLUSTER_DOMAIN};

/// What a node presents and trusts when it dials a peer.
#[derive(Debug, Clone)]
pub struct ClusterClientTls {
    config: ClientTlsConfig,
}

impl ClusterClientTls {
    pub fn load(files: &ClusterTlsFiles) -> anyhow::Result<Self> {
        let read = |path: &std::path::Path| {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        };
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&files.ca)?))
            .identity(Identity::from_pem(read(&files.cert)?, read(&files.key)?))
            .domain_name(CLUSTER_DOMAIN);
        Ok(Self { config })
    }

    pub fn config(&self) -> ClientTlsConfig {
        self.config.clone()
    }
}
