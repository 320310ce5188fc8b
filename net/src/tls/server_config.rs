//! The rustls configuration of a listener, with a certificate that is
//! read again when its files change or the process gets SIGHUP, so
//! certificates rotate without a restart and without dropping
//! connections (a handshake uses whatever certificate is current).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use rustls::crypto::ring::{default_provider, sign::any_supported_type};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use super::identity::{load_certs, load_key};

/// How often certificate files are checked for changes.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// A certificate and key read from files, and read again on change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    /// Modification times of the files last read.
    read_at: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn certified_key(cert_path: &Path, key_path: &Path) -> anyhow::Result<CertifiedKey> {
    let chain = load_certs(cert_path)?;
    let key = load_key(key_path)?;
    let signer = any_supported_type(&key)
        .map_err(|e| anyhow::anyhow!("unusable private key in {}: {e}", key_path.display()))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().with_context(|| {
        format!(
            "the key in {} does not belong to {}",
            key_path.display(),
            cert_path.display()
        )
    })?;
    Ok(certified)
}

impl ReloadingCert {
    pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<Self>> {
        let certified = certified_key(cert, key)?;
        Ok(Arc::new(Self {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            current: RwLock::new(Arc::new(certified)),
            read_at: Mutex::new((modified(cert), modified(key))),
        }))
    }

    /// Reads the files again if they changed (or always, when `force`);
    /// a bad new pair is reported and the current one kept.
    pub fn reload(&self, force: bool) -> anyhow::Result<bool> {
        let stamps = (modified(&self.cert_path), modified(&self.key_path));
        let mut read_at = self.read_at.lock().unwrap_or_else(|e| e.into_inner());
        if !force && *read_at == stamps {
            return Ok(false);
        }
        let certified = certified_key(&self.cert_path, &self.key_path)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
        *read_at = stamps;
        Ok(true)
    }

    /// Reloads on file changes and on SIGHUP, until `self` is dropped.
    pub fn watch(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut hangups = hangup_signals();
            let mut tick = tokio::time::interval(WATCH_EVERY);
            loop {
                let force = tokio::select! {
                    _ = tick.tick() => false,
                    _ = next_hangup(&mut hangups) => true,
                };
                let Some(cert) = weak.upgrade() else { return };
                match cert.reload(force) {
                    Ok(true) => tracing::info!(
                        cert = %cert.cert_path.display(),
                        "TLS certificate reloaded"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::error!(
                        cert = %cert.cert_path.display(),
                        "TLS certificate not reloaded, keeping the current one: {e:#}"
                    ),
                }
            }
        });
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

#[cfg(unix)]
fn hangup_signals() -> Hangups {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

#[cfg(unix)]
async fn next_hangup(signals: &mut Hangups) {
    match signals {
        Some(signals) => {
            signals.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
fn hangup_signals() -> Hangups {}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangups) {
    std::future::pending().await
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}

/// A TLS server configuration: `cert` as the server's certificate;
/// with `client_ca`, clients must present a certificate it signed.
pub fn server_config(
    cert: Arc<ReloadingCert>,
    client_ca: Option<&Path>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certs(ca)? {
                roots
                    .add(cert)
                    .with_context(|| format!("a CA certificate in {}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("the client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    // gRPC runs over HTTP/2, and gRPC clients (Go's, Java's) insist on
    // negotiating it.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}
