//! One span per gRPC call, on both ends of the wire, as tower layers over `http` requests.
//!
//! [`GrpcServerTraceLayer`] goes on a tonic server (`Server::builder().layer(...)`): each request
//! gets a server span named `{package.Service}/{Method}` with `rpc.system = "grpc"`,
//! `rpc.service`, `rpc.method`, whose parent is the caller's span taken from the
//! `traceparent`/`tracestate` metadata. [`GrpcClientTraceLayer`] goes around a client channel: each
//! call gets a client span, child of the caller's current span, whose context is injected into
//! the request. On both ends the span lives until the response body ends, so a streaming call is
//! measured for as long as it streams, and records `rpc.grpc.status_code` from the response
//! headers (trailers-only responses) or trailers.
//!
//! These layers know paths and headers, never protobuf messages and never the domain: tool and
//! run attributes belong to spans the services open inside the handler, which nest under these.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use opentelemetry::trace::TraceContextExt;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::propagation::{extract_context, inject_context_into_headers};

/// Which end of the call a span describes; it decides which status codes count as errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

impl Side {
    /// OpenTelemetry's gRPC conventions: a client's call failed on any non-OK status; a server
    /// failed only on codes that mean the server broke, not that the caller asked wrongly.
    fn is_error(self, code: tonic::Code) -> bool {
        use tonic::Code;
        match self {
            Side::Client => code != Code::Ok,
            Side::Server => matches!(
                code,
                Code::Unknown
                    | Code::DeadlineExceeded
                    | Code::Unimplemented
                    | Code::Internal
                    | Code::Unavailable
                    | Code::DataLoss
            ),
        }
    }
}

/// Splits a gRPC path `/{package.Service}/{Method}` into service and method.
fn grpc_method(path: &str) -> Option<(&str, &str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    if service.is_empty() || method.is_empty() || method.contains('/') {
        return None;
    }
    Some((service, method))
}

/// The server span for one request, parented on the caller's context when it sent one.
fn server_span(path: &str, headers: &HeaderMap) -> Span {
    let span = tracing::info_span!(
        "grpc_server",
        otel.name = path.strip_prefix('/').unwrap_or(path),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = Empty,
        rpc.method = Empty,
        rpc.grpc.status_code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    record_method(&span, path);
    let parent = extract_context(headers);
    if parent.span().span_context().is_valid() {
        // Fails only when no OpenTelemetry layer is installed (plain logs): then there is no
        // trace to join and nothing to do.
        let _ = span.set_parent(parent);
    }
    span
}

/// The client span for one call, child of the caller's current span.
fn client_span(path: &str) -> Span {
    let span = tracing::info_span!(
        "grpc_client",
        otel.name = path.strip_prefix('/').unwrap_or(path),
        otel.kind = "client",
        rpc.system = "grpc",
        rpc.service = Empty,
        rpc.method = Empty,
        rpc.grpc.status_code = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
    );
    record_method(&span, path);
    span
}

fn record_method(span: &Span, path: &str) {
    if let Some((service, method)) = grpc_method(path) {
        span.record("rpc.service", service);
        span.record("rpc.method", method);
    }
}

/// Records the call's gRPC status if `headers` (response headers or trailers) carry one; returns
/// whether they did.
fn record_grpc_status(span: &Span, side: Side, headers: &HeaderMap) -> bool {
    let Some(status) = tonic::Status::from_header_map(headers) else {
        return false;
    };
    let code = status.code();
    span.record("rpc.grpc.status_code", i32::from(code));
    if side.is_error(code) {
        span.record("otel.status_code", "error");
        let message = status.message();
        let description = if message.is_empty() {
            code.description()
        } else {
            message
        };
        span.record("otel.status_description", description);
    }
    true
}

fn record_failure(span: &Span, description: &str) {
    span.record("otel.status_code", "error");
    span.record("otel.status_description", description);
}

/// Tower layer for a tonic server: a server span per request, parented on the caller's trace
/// context. `Server::builder().layer(GrpcServerTraceLayer).add_service(...)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcServerTraceLayer;

impl<S> Layer<S> for GrpcServerTraceLayer {
    type Service = GrpcServerTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcServerTrace { inner }
    }
}

/// The service [`GrpcServerTraceLayer`] produces.
#[derive(Clone, Debug)]
pub struct GrpcServerTrace<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for GrpcServerTrace<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<GrpcTraceBody<ResBody>>;
    type Error = S::Error;
    type Future = GrpcTraceFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let span = server_span(request.uri().path(), request.headers());
        let response = span.in_scope(|| self.inner.call(request));
        GrpcTraceFuture::new(response, span, Side::Server)
    }
}

/// Tower layer for a tonic client channel: a client span per call, its trace context injected as
/// `traceparent`/`tracestate`. `CatalogServiceClient::new(GrpcClientTraceLayer.layer(channel))`.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcClientTraceLayer;

impl<S> Layer<S> for GrpcClientTraceLayer {
    type Service = GrpcClientTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcClientTrace { inner }
    }
}

/// The service [`GrpcClientTraceLayer`] produces.
#[derive(Clone, Debug)]
pub struct GrpcClientTrace<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for GrpcClientTrace<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<GrpcTraceBody<ResBody>>;
    type Error = S::Error;
    type Future = GrpcTraceFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        let span = client_span(request.uri().path());
        inject_context_into_headers(&span.context(), request.headers_mut());
        let response = span.in_scope(|| self.inner.call(request));
        GrpcTraceFuture::new(response, span, Side::Client)
    }
}

pin_project! {
    /// The response future of [`GrpcServerTrace`] and [`GrpcClientTrace`]: polls the inner future
    /// inside the call's span and hands the span on to the response body.
    #[derive(Debug)]
    pub struct GrpcTraceFuture<F> {
        #[pin]
        inner: F,
        span: Span,
        side: Side,
    }
}

impl<F> GrpcTraceFuture<F> {
    fn new(inner: F, span: Span, side: Side) -> Self {
        Self { inner, span, side }
    }
}

impl<F, ResBody, E> Future for GrpcTraceFuture<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
{
    type Output = Result<http::Response<GrpcTraceBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let result = ready!(this.inner.poll(cx));
        Poll::Ready(match result {
            Ok(response) => {
                let mut status_seen = record_grpc_status(this.span, *this.side, response.headers());
                if !status_seen && !response.status().is_success() {
                    // Not a gRPC answer at all (a proxy's 502, a 404 for an unknown path).
                    record_failure(this.span, "non-grpc http response");
                    status_seen = true;
                }
                Ok(response.map(|inner| GrpcTraceBody {
                    inner,
                    span: this.span.clone(),
                    side: *this.side,
                    status_seen,
                }))
            }
            Err(error) => {
                record_failure(this.span, "transport error");
                Err(error)
            }
        })
    }
}

pin_project! {
    /// A response body that keeps the call's span open until the body ends and records the gRPC
    /// status from its trailers.
    #[derive(Debug)]
    pub struct GrpcTraceBody<B> {
        #[pin]
        inner: B,
        span: Span,
        side: Side,
        status_seen: bool,
    }
}

impl<B: Body> Body for GrpcTraceBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let _entered = this.span.enter();
        let frame = ready!(this.inner.poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref()
                    && !*this.status_seen
                {
                    *this.status_seen = record_grpc_status(this.span, *this.side, trailers);
                }
            }
            Some(Err(_)) => record_failure(this.span, "response body failed"),
            None => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_paths_split_into_service_and_method() {
        assert_eq!(
            grpc_method("/toolplane.v1.CatalogService/ListTools"),
            Some(("toolplane.v1.CatalogService", "ListTools"))
        );
        assert_eq!(
            grpc_method("/grpc.health.v1.Health/Check"),
            Some(("grpc.health.v1.Health", "Check"))
        );
        for path in ["", "/", "/Svc", "/Svc/", "//Method", "/a/b/c", "Svc/Method"] {
            assert_eq!(grpc_method(path), None, "{path:?}");
        }
    }

    #[test]
    fn servers_fail_only_on_their_own_faults() {
        use tonic::Code;
        for code in [
            Code::Ok,
            Code::InvalidArgument,
            Code::NotFound,
            Code::PermissionDenied,
        ] {
            assert!(!Side::Server.is_error(code), "{code:?}");
        }
        for code in [
            Code::Internal,
            Code::Unavailable,
            Code::Unknown,
            Code::DataLoss,
        ] {
            assert!(Side::Server.is_error(code), "{code:?}");
        }
        assert!(!Side::Client.is_error(Code::Ok));
        assert!(Side::Client.is_error(Code::NotFound));
    }
}
