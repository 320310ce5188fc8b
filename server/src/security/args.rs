//! The command-line flags of the coordinator's security, and the rule
//! that a server reachable by others is not started without it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use squadron_worker::tls::ClusterTlsFiles;

use super::auth::Authenticator;
use super::tokens::{ExternalIssuer, TokenIssuer};
use super::users::Users;
use super::ClientTlsFiles;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct SecurityArgs {
    /// The client-facing TLS certificate chain (PEM). Reloaded when the file
    /// changes or on SIGHUP.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,

    /// The key of --tls-cert (PEM).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by this CA (PEM).
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,

    /// The cluster CA (PEM): workers must present a certificate it signed.
    #[arg(long)]
    pub cluster_ca: Option<PathBuf>,

    /// The coordinator's cluster certificate (PEM, coordinator role).
    #[arg(long)]
    pub cluster_cert: Option<PathBuf>,

    /// The key of --cluster-cert (PEM).
    #[arg(long)]
    pub cluster_key: Option<PathBuf>,

    /// Users who log in with a password: a TOML file of `[[user]]` tables
    /// with `name` and `password_hash` (argon2id PHC strings; add users with
    /// `squadron-server users add`).
    #[arg(long)]
    pub users: Option<PathBuf>,

    /// Accept tokens of an external issuer signed with this HS256 secret
    /// (a file of at least 32 bytes).
    #[arg(long)]
    pub jwt_hs256_secret_file: Option<PathBuf>,

    /// Accept tokens of an external issuer signed with the private key of
    /// this RS256 or ES256 public key (PEM).
    #[arg(long)]
    pub jwt_public_key: Option<PathBuf>,

    /// The `iss` external tokens must carry.
    #[arg(long)]
    pub jwt_issuer: Option<String>,

    /// The `aud` external tokens must carry.
    #[arg(long)]
    pub jwt_audience: Option<String>,

    /// Lifetime of the tokens the server issues at login, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub token_ttl: u64,

    /// Serve plaintext without authentication, for a laptop or a trusted
    /// network (--demo implies it). Without it the server refuses to start
    /// unless TLS and the cluster's mutual TLS are configured.
    #[arg(long)]
    pub insecure: bool,
}

/// The security a server runs with.
#[derive(Debug, Clone, Default)]
pub struct Security {
    pub tls: Option<ClientTlsFiles>,
    pub cluster_tls: Option<ClusterTlsFiles>,
    pub auth: Option<Arc<Authenticator>>,
}

impl SecurityArgs {
    /// Checks the flags: all of a kind or none, and without `--insecure`
    /// (or `demo`) everything configured.
    pub fn security(&self, demo: bool) -> anyhow::Result<Security> {
        let tls = ClientTlsFiles::from_args(
            self.tls_cert.clone(),
            self.tls_key.clone(),
            self.tls_client_ca.clone(),
        )?;
        let cluster_tls = ClusterTlsFiles::from_args(
            self.cluster_ca.clone(),
            self.cluster_cert.clone(),
            self.cluster_key.clone(),
        )?;
        let auth = self.authenticator()?;
        let insecure = self.insecure || demo;
        let mut missing = vec![];
        if auth.is_none() {
            missing.push("authentication (--users, --jwt-hs256-secret-file or --jwt-public-key)");
        }
        if tls.is_none() {
            missing.push("client TLS (--tls-cert, --tls-key)");
        }
        if cluster_tls.is_none() {
            missing.push("cluster mutual TLS (--cluster-ca, --cluster-cert, --cluster-key)");
        }
        if !missing.is_empty() {
            if !insecure {
                anyhow::bail!(
                    "refusing to serve without {}; see certs/README.md, or pass --insecure \
                     for a local, trusted network",
                    missing.join(" and ")
                );
            }
            tracing::warn!(
                "INSECURE: serving without {}: anyone who reaches the ports can read and \
                 change data; use only on a trusted local network",
                missing.join(" and ")
            );
        }
        Ok(Security {
            tls,
            cluster_tls,
            auth,
        })
    }

    fn authenticator(&self) -> anyhow::Result<Option<Arc<Authenticator>>> {
        let users = self.users.as_deref().map(Users::load).transpose()?;
        let external = match (&self.jwt_hs256_secret_file, &self.jwt_public_key) {
            (Some(_), Some(_)) => {
                anyhow::bail!("give one of --jwt-hs256-secret-file and --jwt-public-key")
            }
            (Some(secret), None) => Some(ExternalIssuer::hs256(secret)?),
            (None, Some(key)) => Some(ExternalIssuer::public_key(key)?),
            (None, None) => None,
        }
        .map(|issuer| {
            issuer
                .with_issuer(self.jwt_issuer.as_deref())
                .with_audience(self.jwt_audience.as_deref())
        });
        if users.is_none() && external.is_none() {
            anyhow::ensure!(
                self.jwt_issuer.is_none() && self.jwt_audience.is_none(),
                "--jwt-issuer and --jwt-audience need --jwt-hs256-secret-file or --jwt-public-key"
            );
            return Ok(None);
        }
        let tokens = TokenIssuer::random(Duration::from_secs(self.token_ttl.max(1)))?;
        Ok(Some(Arc::new(Authenticator::new(users, tokens, external))))
    }
}
