//! `squadron-server health-check`: asks a coordinator or worker for its
//! gRPC health (`grpc.health.v1`), for Kubernetes exec probes and scripts.
//! Exits 0 when it answers SERVING. Speaks TLS (with a client certificate
//! for a worker's mutual TLS) when given the files.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[derive(clap::Args, Debug)]
pub struct HealthCheckArgs {
    /// The server: http://HOST:PORT, or https://HOST:PORT with --ca.
    #[arg(long)]
    pub url: String,
    /// CA (PEM) the server's certificate is checked against.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// A client certificate and key (PEM), for a worker's mutual TLS.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// The name the server's certificate is checked for (default: the
    /// URL's host; workers' cluster certificates name squadron-cluster).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 3.0)]
    pub timeout: f64,
}

fn read(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// SERVING, or an error saying what the server answered.
pub async fn check(args: &HealthCheckArgs) -> anyhow::Result<()> {
    let timeout = Duration::try_from_secs_f64(args.timeout).context("--timeout")?;
    let mut endpoint = Channel::from_shared(args.url.clone())
        .context("--url")?
        .connect_timeout(timeout)
        .timeout(timeout);
    if let Some(ca) = &args.ca {
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &args.server_name {
            tls = tls.domain_name(name);
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {}", args.url))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .with_context(|| format!("health check of {}", args.url))?;
    match answer.get_ref().status() {
        ServingStatus::Serving => Ok(()),
        other => anyhow::bail!("{} is {other:?}", args.url),
    }
}
