//! OpenTelemetry traces of queries (`--otlp-endpoint`): the coordinator's
//! `query` span is the root of one trace per query; every task a worker
//! runs for it is a child, its trace context carried in the task's
//! request (W3C `traceparent`). Spans of Squadron's own crates at info
//! level and above are exported over OTLP/gRPC in batches.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::Layer;

/// Exports spans while it lives; dropping it flushes what is left.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("flushing the traces: {e}");
            }
        }
    }
}

impl Telemetry {
    pub fn off() -> Self {
        Self { provider: None }
    }
}

/// The layer exporting spans to `endpoint` as `service`, and the guard
/// that flushes them. Must run inside the Tokio runtime (the exporter's
/// connection lives there).
pub fn otlp_layer<S>(endpoint: &str, service: &str) -> anyhow::Result<(impl Layer<S>, Telemetry)>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| anyhow::anyhow!("--otlp-endpoint {endpoint}: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_string())
                .build(),
        )
        .build();
    let tracer = provider.tracer("squadron");
    let ours = filter_fn(|meta| {
        meta.target().starts_with("squadron") && *meta.level() <= tracing::Level::INFO
    });
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(ours);
    Ok((
        layer,
        Telemetry {
            provider: Some(provider),
        },
    ))
}

/// The trace context of the current span, to send with a task.
pub fn current_context() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier
}

/// Makes `span` a child of the trace `carrier` names (nothing when it
/// names none).
pub fn continue_trace(span: &tracing::Span, carrier: &HashMap<String, String>) {
    if carrier.is_empty() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(carrier);
    let _ = span.set_parent(parent);
}
