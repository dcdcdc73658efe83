//! Process-wide telemetry setup for a service binary: the tracing subscriber (filtered fmt logs on
//! stderr, plus the OpenTelemetry layer when spans are exported), the W3C propagator, the OTLP
//! exporter and the guard that flushes it.
//!
//! Owns everything global that telemetry installs, and installs it once. It never decides what
//! is logged or traced (that is each call site's business) and never fails a service over
//! telemetry that can degrade: a bad `RUST_LOG` or an unsupported OTLP protocol is logged as a
//! warning, and an unreachable collector only loses spans.

use std::io::IsTerminal;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::Layer;

use crate::otlp_metrics::MetricsPusher;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::TelemetryError;
use crate::config::{self, ConfigWarning, Export, TelemetryConfig};
use crate::propagation::install_propagator;

/// The instrumentation scope of every span toolplane exports.
const TRACER_NAME: &str = "toolplane";

/// Sets up logging and tracing for this process; call once, early, inside the tokio runtime.
///
/// - Logs go to stderr through `tracing_subscriber::fmt`, filtered by `RUST_LOG` (default: the
///   config's directive, `info`).
/// - When `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set and
///   `OTEL_SDK_DISABLED` is not `true`, spans at `info` and above are batched and exported over
///   OTLP/gRPC, under `OTEL_SERVICE_NAME` or else the configured service name. The exporter
///   reads the other standard variables itself (`OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`,
///   `_COMPRESSION`, `_INSECURE`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER*`, `OTEL_RESOURCE_ATTRIBUTES`).
///   `RUST_LOG` does not thin out traces: it filters logs only.
/// - The W3C TraceContext propagator becomes the global text-map propagator.
///
/// Keep the returned guard alive until the service stops; dropping it (or calling
/// [`TelemetryGuard::shutdown`]) flushes the spans still queued.
///
/// # Errors
/// [`TelemetryError::AlreadyInitialized`] when a global subscriber is already set;
/// [`TelemetryError::NoRuntime`] when export is configured but no tokio runtime is running;
/// [`TelemetryError::Exporter`] when the OTLP exporter rejects its configuration, e.g. an
/// `https://` endpoint or one without a scheme (TLS is not built in; collectors are reached over
/// plain gRPC inside the deployment's network, or `OTEL_EXPORTER_OTLP_INSECURE=true` for a
/// scheme-less endpoint).
pub fn init(config: TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let resolved = config::resolve(&config, |name| {
        config.lookup(name, |n| std::env::var(n).ok())
    });

    let provider = match &resolved.export {
        Export::Otlp { endpoint, .. } => Some(otlp_provider(
            endpoint,
            &resolved.service_name,
            resolved.service_version.as_deref(),
        )?),
        Export::Off(_) => None,
    };

    let fmt_layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_filter(resolved.log_filter);
    let otel_layer = provider.as_ref().map(|provider| {
        // Source locations, thread names and busy/idle times are not worth their cost on every
        // span of the hot path: spans carry what the conventions ask for and nothing else.
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(TRACER_NAME))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(exported_spans())
    });
    tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInitialized)?;

    install_propagator();

    for warning in &resolved.warnings {
        match warning {
            ConfigWarning::UnsupportedProtocol { variable, value } => tracing::warn!(
                variable,
                value = value.as_str(),
                "unsupported otlp protocol, exporting over grpc"
            ),
            ConfigWarning::InvalidLogFilter {
                source,
                error,
                fallback,
            } => tracing::warn!(
                source,
                error = error.as_str(),
                fallback = fallback.as_str(),
                "invalid log filter, using fallback"
            ),
        }
    }
    match &resolved.export {
        Export::Otlp { endpoint, variable } => tracing::info!(
            service.name = resolved.service_name.as_str(),
            otlp.endpoint = endpoint.as_str(),
            otlp.endpoint_variable = *variable,
            "exporting traces over otlp"
        ),
        Export::Off(reason) => tracing::debug!(
            service.name = resolved.service_name.as_str(),
            reason = reason.as_str(),
            "trace export off"
        ),
    }

    let metrics = match &resolved.metrics {
        Some((endpoint, interval)) if tokio::runtime::Handle::try_current().is_ok() => Some(
            MetricsPusher::start(endpoint, *interval, resolved.service_version.clone()),
        ),
        _ => None,
    };

    Ok(TelemetryGuard { provider, metrics })
}

/// Spans that leave the process: `info` and above, whatever `RUST_LOG` says, minus the HTTP/2
/// stack and the OpenTelemetry crates themselves (targets match by prefix), whose spans around
/// each export would otherwise be exported in turn.
fn exported_spans() -> Targets {
    Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("h2", LevelFilter::OFF)
        .with_target("hyper", LevelFilter::OFF)
        .with_target("tower", LevelFilter::OFF)
        .with_target("opentelemetry", LevelFilter::OFF)
}

fn otlp_provider(
    endpoint: &str,
    service_name: &str,
    service_version: Option<&str>,
) -> Result<SdkTracerProvider, TelemetryError> {
    // The tonic channel spawns its connection task on the current runtime; without one it would
    // panic inside the exporter instead of failing here.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(TelemetryError::NoRuntime);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(TelemetryError::Exporter)?;

    // `Resource::builder()` reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; the name set
    // here already has OTEL_SERVICE_NAME applied, so setting it last keeps that precedence.
    let mut resource = Resource::builder().with_service_name(service_name.to_owned());
    if let Some(version) = service_version {
        resource = resource.with_attribute(KeyValue::new("service.version", version.to_owned()));
    }

    Ok(SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build())
}

/// Keeps trace export running; flushes queued spans when shut down or dropped.
///
/// Shut it down while the tokio runtime is still running (at the end of an async `main`): the
/// flush sends its last batch through the runtime. On a multi-thread runtime the blocking flush
/// moves off the worker by itself; on a current-thread runtime call
/// `tokio::task::spawn_blocking(move || guard.shutdown())` instead, or the flush waits out its
/// five-second timeout and the last batch is lost.
#[derive(Debug)]
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    metrics: Option<MetricsPusher>,
}

impl TelemetryGuard {
    /// Whether spans are being exported over OTLP.
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes queued spans and stops export. Spans created afterwards are not exported.
    ///
    /// # Errors
    /// [`TelemetryError::Shutdown`] when the flush failed or timed out.
    pub fn shutdown(mut self) -> Result<(), TelemetryError> {
        self.shutdown_provider()
    }

    fn shutdown_provider(&mut self) -> Result<(), TelemetryError> {
        if let Some(metrics) = self.metrics.take() {
            metrics.stop();
        }
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        blocking(|| provider.shutdown()).map_err(TelemetryError::Shutdown)
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown_provider() {
            tracing::warn!(%error, "trace export did not shut down cleanly");
        }
    }
}

/// Runs a blocking call without stalling the runtime worker it may be called from: the export
/// the flush waits for may be scheduled on this very worker.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_without_export_shuts_down_quietly() {
        let guard = TelemetryGuard {
            provider: None,
            metrics: None,
        };
        assert!(!guard.is_exporting());
        guard.shutdown().unwrap();
    }

    #[test]
    fn exporter_needs_a_runtime() {
        let error = otlp_provider("http://127.0.0.1:4317", "catalog", None).unwrap_err();
        assert!(matches!(error, TelemetryError::NoRuntime));
        assert!(error.to_string().starts_with("telemetry.no_runtime: "));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutting_the_guard_down_flushes_queued_spans_to_the_collector() {
        let collector = crate::tests::FakeCollector::start().await;
        let provider = otlp_provider(&collector.endpoint(), "catalog", Some("1.2.3")).unwrap();
        let tracer = provider.tracer(TRACER_NAME);
        opentelemetry::trace::Tracer::in_span(&tracer, "queued_before_shutdown", |_| {});
        let guard = TelemetryGuard {
            provider: Some(provider),
            metrics: None,
        };
        assert!(guard.is_exporting());
        // The batch processor waits up to 5 s before its first export; only the flush on
        // shutdown gets the span there in time for the assertion below.
        guard.shutdown().unwrap();

        let spans = collector.spans();
        let [(resource, span)] = spans.as_slice() else {
            panic!("expected exactly one exported span, got {spans:?}");
        };
        assert_eq!(span.name, "queued_before_shutdown");
        assert_eq!(
            resource.get("service.name").map(String::as_str),
            Some("catalog")
        );
        assert_eq!(
            resource.get("service.version").map(String::as_str),
            Some("1.2.3")
        );
    }
}
