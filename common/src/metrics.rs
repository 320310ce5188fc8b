//! Prometheus metrics: the exporter every Squadron process serves on
//! `--metrics-listen` (`GET /metrics`).
//!
//! Names follow Prometheus conventions (`_total` counters, `_seconds`
//! histograms, `_bytes`); labels take only a handful of fixed values, never
//! SQL text, user names or job ids. Labelled counters are created at zero
//! at start-up, so dashboards and alerts see them before the first event.

use std::net::SocketAddr;

pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Buckets of every `_seconds` histogram: 1 ms to 5 min.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Installs the process-wide recorder without serving it: the caller
/// serves `handle.render()` (the coordinator, beside its query UI).
pub fn install_recorder() -> anyhow::Result<metrics_exporter_prometheus::PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))
}

/// Installs the process-wide recorder and serves `/metrics` on `listen`.
/// Call once per process, inside the Tokio runtime.
pub fn serve(listen: SocketAddr) -> anyhow::Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(listen)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .install()
        .map_err(|e| anyhow::anyhow!("--metrics-listen {listen}: {e}"))?;
    tracing::info!("metrics on http://{listen}/metrics");
    Ok(())
}
