//! A caller's span must become the parent of the server's span, carried only by `traceparent`
//! metadata: first through a metadata map handed from the client interceptor to the server layer
//! by hand, then over a real gRPC call (tonic-health's `Check`) on 127.0.0.1:0.

use std::convert::Infallible;
use std::future::{Ready, poll_fn, ready};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;
use http_body::{Body, Frame};
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceContextExt};
use opentelemetry_sdk::trace::SpanData;
use tonic::service::Interceptor;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::testing::{SpanCapture, attribute};
use crate::{GrpcClientTraceLayer, GrpcServerTraceLayer, TraceContextInterceptor};

const LIST_TOOLS: &str = "/toolplane.v1.CatalogService/ListTools";

/// A gRPC handler stand-in: remembers the span context it ran in and answers with the given
/// status in its trailers.
#[derive(Clone)]
struct Handler {
    ran_in: Arc<Mutex<Option<SpanContext>>>,
    grpc_status: &'static str,
}

impl Handler {
    fn answering(grpc_status: &'static str) -> Self {
        Self {
            ran_in: Arc::default(),
            grpc_status,
        }
    }
}

impl Service<http::Request<()>> for Handler {
    type Response = http::Response<TrailersBody>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<()>) -> Self::Future {
        let current = tracing::Span::current().context();
        *self.ran_in.lock().unwrap() = Some(current.span().span_context().clone());
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", self.grpc_status.parse().unwrap());
        ready(Ok(http::Response::new(TrailersBody(Some(trailers)))))
    }
}

/// A response body that is nothing but trailers, as a gRPC answer's end is.
struct TrailersBody(Option<HeaderMap>);

impl Body for TrailersBody {
    type Data = &'static [u8];
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Poll::Ready(self.0.take().map(|trailers| Ok(Frame::trailers(trailers))))
    }
}

async fn drain<B: Body + Unpin>(mut body: B) {
    while poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))
        .await
        .is_some()
    {}
}

/// Calls `handler` through the server layer as if `metadata` had arrived on the wire, reads the
/// whole response, and returns the server span.
async fn serve(
    capture: &SpanCapture,
    handler: Handler,
    metadata: tonic::metadata::MetadataMap,
) -> SpanData {
    let mut request = http::Request::builder().uri(LIST_TOOLS).body(()).unwrap();
    *request.headers_mut() = metadata.into_headers();
    let mut service = GrpcServerTraceLayer.layer(handler);
    let response = service.call(request).await.unwrap();
    drain(response.into_body()).await;
    capture
        .span_named("toolplane.v1.CatalogService/ListTools")
        .expect("one server span")
}

#[tokio::test]
async fn client_span_is_the_server_span_parent_through_metadata() {
    let capture = SpanCapture::start();

    let caller = tracing::info_span!("agent_turn");
    let request = caller
        .in_scope(|| TraceContextInterceptor.call(tonic::Request::new(())))
        .unwrap();
    let caller = caller.context().span().span_context().clone();
    assert!(caller.is_valid());
    assert!(request.metadata().contains_key("traceparent"));

    let handler = Handler::answering("0");
    let server = serve(&capture, handler.clone(), request.into_parts().0).await;

    assert_eq!(server.span_context.trace_id(), caller.trace_id());
    assert_eq!(server.parent_span_id, caller.span_id());
    assert!(server.parent_span_is_remote);
    assert_eq!(server.span_kind, SpanKind::Server);
    assert_eq!(attribute(&server, "rpc.system").as_deref(), Some("grpc"));
    assert_eq!(
        attribute(&server, "rpc.service").as_deref(),
        Some("toolplane.v1.CatalogService")
    );
    assert_eq!(
        attribute(&server, "rpc.method").as_deref(),
        Some("ListTools")
    );
    assert_eq!(
        attribute(&server, "rpc.grpc.status_code").as_deref(),
        Some("0")
    );
    assert_eq!(server.status, Status::Unset);

    // The handler ran inside the server span, so its own spans nest under it.
    let ran_in = handler.ran_in.lock().unwrap().clone().unwrap();
    assert_eq!(ran_in.span_id(), server.span_context.span_id());
}

#[tokio::test]
async fn without_traceparent_the_server_span_starts_a_new_trace() {
    let capture = SpanCapture::start();
    let server = serve(
        &capture,
        Handler::answering("0"),
        tonic::metadata::MetadataMap::new(),
    )
    .await;
    assert!(server.span_context.is_valid());
    assert_eq!(server.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    assert!(!server.parent_span_is_remote);
}

#[tokio::test]
async fn server_faults_mark_the_server_span_as_failed_and_caller_mistakes_do_not() {
    let capture = SpanCapture::start();
    let internal = serve(&capture, Handler::answering("13"), Default::default()).await;
    assert_eq!(
        attribute(&internal, "rpc.grpc.status_code").as_deref(),
        Some("13")
    );
    assert!(
        matches!(internal.status, Status::Error { .. }),
        "{:?}",
        internal.status
    );
    capture.reset();

    let not_found = serve(&capture, Handler::answering("5"), Default::default()).await;
    assert_eq!(
        attribute(&not_found, "rpc.grpc.status_code").as_deref(),
        Some("5")
    );
    assert_eq!(not_found.status, Status::Unset);
}

/// Waits (bounded) until a finished span of `kind` is captured: the server span ends when the
/// server drops the response body, which may be just after the client has its answer.
async fn finished_span(capture: &SpanCapture, kind: SpanKind) -> SpanData {
    for _ in 0..500 {
        if let Some(span) = capture
            .finished_spans()
            .into_iter()
            .find(|span| span.span_kind == kind)
        {
            return span;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {kind:?} span finished within 5 s");
}

/// A health server behind the server layer on 127.0.0.1:0, and a channel to it.
async fn health_server() -> (tonic::transport::Channel, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(GrpcServerTraceLayer)
            .add_service(health)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (channel, server)
}

#[tokio::test]
async fn interceptor_carries_the_caller_span_over_a_real_call() {
    let capture = SpanCapture::start();
    let (channel, server) = health_server().await;

    let caller = tracing::info_span!("agent_turn");
    let mut client = HealthClient::with_interceptor(channel, TraceContextInterceptor);
    client
        .check(HealthCheckRequest::default())
        .instrument(caller.clone())
        .await
        .unwrap();
    let caller = caller.context().span().span_context().clone();

    let server_span = finished_span(&capture, SpanKind::Server).await;
    assert_eq!(server_span.name, "grpc.health.v1.Health/Check");
    assert_eq!(server_span.span_context.trace_id(), caller.trace_id());
    assert_eq!(server_span.parent_span_id, caller.span_id());
    assert!(server_span.parent_span_is_remote);
    assert_eq!(
        attribute(&server_span, "rpc.service").as_deref(),
        Some("grpc.health.v1.Health")
    );
    assert_eq!(
        attribute(&server_span, "rpc.method").as_deref(),
        Some("Check")
    );
    // An OK answer carries its status in the trailers, read as the body ends.
    assert_eq!(
        attribute(&server_span, "rpc.grpc.status_code").as_deref(),
        Some("0")
    );
    server.abort();
}

#[tokio::test]
async fn client_layer_opens_a_client_span_that_parents_the_server_span() {
    let capture = SpanCapture::start();
    let (channel, server) = health_server().await;

    let caller = tracing::info_span!("agent_turn");
    let mut client = HealthClient::new(GrpcClientTraceLayer.layer(channel));
    let status = client
        .check(HealthCheckRequest {
            service: "toolplane.v1.NoSuchService".to_owned(),
        })
        .instrument(caller.clone())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    let caller = caller.context().span().span_context().clone();

    let client_span = finished_span(&capture, SpanKind::Client).await;
    let server_span = finished_span(&capture, SpanKind::Server).await;

    assert_eq!(client_span.name, "grpc.health.v1.Health/Check");
    assert_eq!(client_span.parent_span_id, caller.span_id());
    assert!(!client_span.parent_span_is_remote);
    assert_eq!(server_span.span_context.trace_id(), caller.trace_id());
    assert_eq!(
        server_span.parent_span_id,
        client_span.span_context.span_id()
    );
    assert!(server_span.parent_span_is_remote);

    // NOT_FOUND comes back trailers-only. The caller's request failed; the server did its job.
    assert_eq!(
        attribute(&client_span, "rpc.grpc.status_code").as_deref(),
        Some("5")
    );
    assert!(
        matches!(&client_span.status, Status::Error { description } if description == "service not registered"),
        "{:?}",
        client_span.status
    );
    assert_eq!(
        attribute(&server_span, "rpc.grpc.status_code").as_deref(),
        Some("5")
    );
    assert_eq!(server_span.status, Status::Unset);
    server.abort();
}
