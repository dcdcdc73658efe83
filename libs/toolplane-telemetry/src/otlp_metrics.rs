//! OTLP/gRPC push of the services' metric registries through the OpenTelemetry SDK: one
//! `SdkMeterProvider` per registry handed to [`crate::metrics::export`], whose resource's
//! `service.name` is that service, with a periodic reader (`OTEL_METRIC_EXPORT_INTERVAL`,
//! milliseconds, default 60 s) and the OTLP metric exporter; cumulative temporality, as
//! Prometheus counts. The endpoint is `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT`. The registry's instruments record into the provider's meter as
//! well as into the Prometheus families (see [`crate::metrics`]); a failed push is logged by the
//! SDK and the next interval sends the cumulative values again.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};

use crate::metrics::Registry;

/// Where metrics go while a pipeline runs.
#[derive(Debug, Clone)]
struct Pipeline {
    endpoint: String,
    interval: Duration,
    version: Option<String>,
}

#[derive(Default)]
struct State {
    pipeline: Option<Pipeline>,
    providers: Vec<SdkMeterProvider>,
}

static STATE: Mutex<State> = Mutex::new(State {
    pipeline: None,
    providers: Vec::new(),
});

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn provider(pipeline: &Pipeline, service: &str) -> Option<SdkMeterProvider> {
    // The tonic channel spawns its connection task on the current runtime.
    tokio::runtime::Handle::try_current().ok()?;
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .with_endpoint(pipeline.endpoint.clone())
        .with_temporality(Temporality::Cumulative)
        .build()
        .inspect_err(|e| tracing::warn!(error = %e, "metrics are not pushed over otlp"))
        .ok()?;
    let reader = PeriodicReader::builder(exporter)
        .with_interval(pipeline.interval)
        .build();
    let mut resource = Resource::builder().with_service_name(service.to_owned());
    if let Some(v) = &pipeline.version {
        resource = resource.with_attribute(KeyValue::new("service.version", v.clone()));
    }
    Some(
        SdkMeterProvider::builder()
            .with_resource(resource.build())
            .with_reader(reader)
            .build(),
    )
}

fn attach(state: &mut State, pipeline: &Pipeline, registry: &Registry, service: &str) {
    if let Some(p) = provider(pipeline, service) {
        registry.attach(p.meter("toolplane"));
        state.providers.push(p);
    }
}

/// Called by [`crate::metrics::export`]: pushes `registry` when a pipeline runs.
pub(crate) fn exported(registry: &Arc<Registry>, service: &str) {
    let mut state = state();
    if let Some(pipeline) = state.pipeline.clone() {
        attach(&mut state, &pipeline, registry, service);
    }
}

/// The running push; [`MetricsPusher::stop`] pushes a last time and shuts the providers down.
#[derive(Debug)]
pub(crate) struct MetricsPusher(());

impl MetricsPusher {
    /// Pushes every exported registry, and those exported later, to `endpoint`.
    pub(crate) fn start(endpoint: &str, interval: Duration, version: Option<String>) -> Self {
        let pipeline = Pipeline {
            endpoint: endpoint.to_owned(),
            interval,
            version,
        };
        let mut state = state();
        for (service, registry) in crate::metrics::exported() {
            attach(&mut state, &pipeline, &registry, &service);
        }
        state.pipeline = Some(pipeline);
        MetricsPusher(())
    }

    /// Pushes once more and stops (the SDK waits for the last export).
    pub(crate) fn stop(self) {
        let providers = {
            let mut state = state();
            state.pipeline = None;
            std::mem::take(&mut state.providers)
        };
        for p in providers {
            if let Err(e) = crate::setup::blocking(|| p.shutdown()) {
                tracing::warn!(error = %e, "the last otlp metric push failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counters_gauges_and_histograms_reach_the_collector_when_the_push_stops() {
        let mut collector = fake_opentelemetry_collector::FakeCollectorServer::start()
            .await
            .unwrap();
        let registry = Arc::new(Registry::new());
        crate::metrics::export(&registry, "toolplane-test-service");
        let pusher = MetricsPusher::start(
            &collector.endpoint(),
            Duration::from_secs(3600),
            Some("9.9.9".into()),
        );
        registry
            .counter("t_otlp_total", "T.", &["tool"])
            .add(&["a"], 3.0);
        registry
            .gauge("t_otlp_connections", "C.", &["state"])
            .set(&["connected"], 2.0);
        registry
            .histogram("t_otlp_seconds", "S.", &[])
            .observe(&[], 0.003);
        pusher.stop();
        let exported = collector.exported_metrics(1, Duration::from_secs(10)).await;
        let text = format!("{exported:?}");
        for name in ["t_otlp_total", "t_otlp_connections", "t_otlp_seconds"] {
            assert!(
                text.contains(&format!("name: \"{name}\"")),
                "{name}: {text}"
            );
        }
        assert!(text.contains("unit: \"s\""), "{text}");
        assert!(text.contains("\"tool\""), "{text}");
    }
}
