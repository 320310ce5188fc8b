//! The command-line flags of the coordinator's security, and the rule
//! that a server reachable by others is not started without it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use squadron_exec::plan::guard::DataRoots;
use squadron_net::tls::ClusterTlsFiles;

use super::auth::Authenticator;
use super::secret::read_secret;
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

    /// Sign the tokens issued at login with this secret (a file of at least
    /// 32 bytes), so they outlive a restart and every coordinator sharing
    /// it accepts them. Default: a random key per process.
    #[arg(long)]
    pub token_secret_file: Option<PathBuf>,

    /// Lifetime of the tokens the server issues at login, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub token_ttl: u64,

    /// Where clients may create external tables (`CREATE EXTERNAL TABLE …
    /// LOCATION`): a directory, or an object store URL prefix such as
    /// s3://bucket/tables. Repeatable. Without it, anywhere with --insecure
    /// and nowhere otherwise. (Workers have their own --data-root.)
    #[arg(long = "data-root", value_name = "DIR|URL")]
    pub data_roots: Vec<PathBuf>,

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
    /// Where clients may create external tables; `None`: nowhere.
    pub table_roots: Option<DataRoots>,
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
        let table_roots = if !self.data_roots.is_empty() {
            Some(DataRoots::new(&self.data_roots)?)
        } else if insecure {
            Some(DataRoots::default())
        } else {
            None
        };
        Ok(Security {
            tls,
            cluster_tls,
            auth,
            table_roots,
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
        let ttl = Duration::from_secs(self.token_ttl.max(1));
        let tokens = match &self.token_secret_file {
            Some(file) => TokenIssuer::new(&read_secret(file)?, ttl),
            None => TokenIssuer::random(ttl)?,
        };
        Ok(Some(Arc::new(Authenticator::new(users, tokens, external))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn tokens_signed_with_a_secret_file_outlive_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users.toml");
        super::super::users::add_user(&users, "alice", "wonderland").unwrap();
        let secret = dir.path().join("token.secret");
        std::fs::write(&secret, [7u8; 40]).unwrap();
        let args = SecurityArgs {
            users: Some(users),
            token_secret_file: Some(secret),
            token_ttl: 60,
            insecure: true,
            ..Default::default()
        };
        let login = base64::engine::general_purpose::STANDARD.encode("alice:wonderland");
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", format!("Basic {login}").parse().unwrap());
        let first = args.security(false).unwrap().auth.unwrap();
        let (_, token) = first.handshake(&headers, None).unwrap();
        let mut bearer = http::HeaderMap::new();
        bearer.insert("authorization", format!("Bearer {token}").parse().unwrap());
        // A restarted server (a new authenticator from the same flags).
        let restarted = args.security(false).unwrap().auth.unwrap();
        assert_eq!(restarted.authenticate(&bearer).unwrap().user, "alice");
        // Without the file each process has its own key.
        let random = SecurityArgs {
            token_secret_file: None,
            ..args.clone()
        };
        let other = random.security(false).unwrap().auth.unwrap();
        assert!(other.authenticate(&bearer).is_err());
    }

    #[test]
    fn without_insecure_everything_must_be_configured() {
        let err = SecurityArgs::default().security(false).unwrap_err();
        let text = format!("{err:#}");
        for part in [
            "client TLS",
            "cluster mutual TLS",
            "authentication",
            "--insecure",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert!(
            SecurityArgs::default().security(true).is_ok(),
            "--demo is insecure"
        );
    }
}
