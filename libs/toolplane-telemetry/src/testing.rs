//! Test support, behind the `testing` feature: capture the spans code under test finishes, in
//! memory, and assert on their names, attributes and parent/child links.
//!
//! Owns a thread-local subscriber (registry + OpenTelemetry layer + in-memory exporter) for the
//! duration of one test. It never touches the process-wide subscriber, so tests running in
//! parallel do not see each other's spans, and it never exports anything over a network. Because
//! the subscriber is thread-local, code that spawns tasks must run on a current-thread runtime
//! (`#[tokio::test]`'s default) for its spans to be captured.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;

/// Spans finished on this thread while the capture is alive.
///
/// ```
/// let capture = toolplane_telemetry::testing::SpanCapture::start();
/// tracing::info_span!("execute_tool").in_scope(|| {});
/// assert_eq!(capture.finished_spans()[0].name, "execute_tool");
/// ```
#[derive(Debug)]
pub struct SpanCapture {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _subscriber: DefaultGuard,
}

impl SpanCapture {
    /// Installs the capturing subscriber as this thread's default and the W3C propagator as the
    /// global one; both stay until the capture is dropped (the propagator stays for good).
    pub fn start() -> Self {
        crate::install_propagator();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("toolplane-test")));
        let subscriber = tracing::subscriber::set_default(subscriber);
        Self {
            exporter,
            provider,
            _subscriber: subscriber,
        }
    }

    /// Every span finished so far, in the order they ended.
    pub fn finished_spans(&self) -> Vec<SpanData> {
        // The simple processor exports each span as it ends; flushing covers nothing else, but
        // keeps this correct should the processor change.
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().unwrap_or_default()
    }

    /// Forgets the spans finished so far.
    pub fn reset(&self) {
        self.exporter.reset();
    }

    /// The finished span called `name`, if exactly one is; `None` if none or several are.
    pub fn span_named(&self, name: &str) -> Option<SpanData> {
        let mut matching = self
            .finished_spans()
            .into_iter()
            .filter(|span| span.name == name);
        match (matching.next(), matching.next()) {
            (Some(span), None) => Some(span),
            _ => None,
        }
    }
}

/// The value of attribute `key` on `span`, rendered as a string (`"grpc"`, `"0"`).
pub fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}
