//! W3C trace context (`traceparent`, `tracestate`) carried in gRPC metadata, i.e. HTTP/2 headers.
//!
//! Owns the translation between an OpenTelemetry [`Context`] and request headers, in both
//! directions, through the process-wide text-map propagator that [`install_propagator`] sets (and
//! [`crate::init`] calls). It never creates spans, never decides sampling and never rejects a
//! request: a missing or malformed `traceparent` just yields a context without a remote parent,
//! and the server span then starts a new trace.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::MetadataMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Installs the W3C TraceContext propagator as the process-wide text-map propagator. Idempotent;
/// [`crate::init`] calls it, tests that build their own subscriber call it themselves.
pub fn install_propagator() {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
}

/// Writes the current tracing span's OpenTelemetry context into outgoing request metadata as
/// `traceparent`/`tracestate`. Writes nothing when the current span has no OpenTelemetry span
/// context (no OpenTelemetry layer installed, or no current span).
pub fn inject_context(metadata: &mut MetadataMap) {
    inject_context_into_headers(&tracing::Span::current().context(), metadata.as_mut());
}

/// Writes `cx` into `headers` as `traceparent`/`tracestate`, replacing any values already there
/// so that a forwarded request never carries two parents.
pub fn inject_context_into_headers(cx: &Context, headers: &mut HeaderMap) {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(cx, &mut HeaderInjector(headers));
    });
}

/// The current span's W3C trace context as `(traceparent, tracestate)` strings, for protocols that
/// carry it outside HTTP headers (MCP's `_meta`, SEP-414). `None` when there is no sampled
/// OpenTelemetry span context.
pub fn current_trace_context() -> Option<(String, Option<String>)> {
    let mut headers = HeaderMap::new();
    inject_context_into_headers(&tracing::Span::current().context(), &mut headers);
    let parent = headers.get("traceparent")?.to_str().ok()?.to_owned();
    let state = headers
        .get("tracestate")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    Some((parent, state))
}

/// Reads the caller's trace context from incoming request headers. The result carries a remote
/// span context when `traceparent` is present and valid, and is empty otherwise.
pub fn extract_context(headers: &HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    })
}

/// [`extract_context`] for a tonic request's metadata (`request.metadata()`), for handlers that
/// see the request after the HTTP layer.
pub fn extract_context_from_metadata(metadata: &MetadataMap) -> Context {
    extract_context(metadata.as_ref())
}

/// A tonic client interceptor that injects the current span's trace context into every request:
/// `CatalogServiceClient::with_interceptor(channel, TraceContextInterceptor)`. It opens no span
/// of its own; wrap the channel with [`crate::GrpcClientTraceLayer`] for a client span per call.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceContextInterceptor;

impl tonic::service::Interceptor for TraceContextInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        inject_context(request.metadata_mut());
        Ok(request)
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // The W3C propagator only emits lowercase token names and visible-ASCII values; anything
        // that would not be a valid header is dropped rather than sent malformed.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn remote_context() -> Context {
        let span_context = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("toolplane", "a1")]).unwrap(),
        );
        Context::new().with_remote_span_context(span_context)
    }

    #[test]
    fn injects_traceparent_and_tracestate() {
        install_propagator();
        let mut metadata = MetadataMap::new();
        inject_context_into_headers(&remote_context(), metadata.as_mut());
        assert_eq!(
            metadata.get("traceparent").unwrap().to_str().unwrap(),
            TRACEPARENT
        );
        assert_eq!(
            metadata.get("tracestate").unwrap().to_str().unwrap(),
            "toolplane=a1"
        );
    }

    #[test]
    fn injection_replaces_a_forwarded_traceparent() {
        install_propagator();
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            HeaderValue::from_static("00-11111111111111111111111111111111-2222222222222222-01"),
        );
        inject_context_into_headers(&remote_context(), &mut headers);
        let values: Vec<_> = headers.get_all("traceparent").iter().collect();
        assert_eq!(values, [TRACEPARENT]);
    }

    #[test]
    fn extracts_the_remote_parent_from_metadata() {
        install_propagator();
        let mut metadata = MetadataMap::new();
        metadata.insert("traceparent", TRACEPARENT.parse().unwrap());
        metadata.insert("tracestate", "toolplane=a1".parse().unwrap());

        let cx = extract_context_from_metadata(&metadata);
        let span = cx.span();
        let span_context = span.span_context();
        assert!(span_context.is_valid());
        assert!(span_context.is_remote());
        assert!(span_context.is_sampled());
        assert_eq!(
            span_context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            span_context.span_id(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert_eq!(span_context.trace_state().get("toolplane"), Some("a1"));
    }

    #[test]
    fn a_round_trip_through_metadata_keeps_the_context() {
        install_propagator();
        let mut metadata = MetadataMap::new();
        inject_context_into_headers(&remote_context(), metadata.as_mut());
        let extracted = extract_context_from_metadata(&metadata);
        assert_eq!(
            extracted.span().span_context(),
            remote_context().span().span_context()
        );
    }

    #[test]
    fn missing_or_malformed_traceparent_yields_no_parent() {
        install_propagator();
        let empty = extract_context(&HeaderMap::new());
        assert!(!empty.span().span_context().is_valid());

        let mut headers = HeaderMap::new();
        headers.insert("traceparent", HeaderValue::from_static("00-not-a-trace-01"));
        let malformed = extract_context(&headers);
        assert!(!malformed.span().span_context().is_valid());
    }

    #[test]
    fn nothing_is_injected_without_a_span_context() {
        install_propagator();
        let mut metadata = MetadataMap::new();
        // No OpenTelemetry layer is installed on this thread, so the current span has no context.
        inject_context(&mut metadata);
        assert!(metadata.is_empty());
    }
}
