//! Defence in depth against a handler that panics: [`CatchPanicLayer`] wraps every gRPC service
//! and HTTP route [`crate::serve`] runs, so a panic — while the handler runs or while its response
//! body streams — becomes an answer, a log line and a metric instead of a dropped connection.
//!
//! - gRPC: a panic before the response is a trailers-only response with `grpc-status: 13`
//!   (INTERNAL) and the message [`PANIC_MESSAGE`]; a panic while a response streams ends the stream
//!   with those trailers. The connection and its other calls carry on.
//! - HTTP: a panic before the response is a `500` with the same message; one while the body
//!   streams ends the body.
//! - Each panic is logged at error level with the service, the request path and the panic's
//!   message, and counts in `toolplane_handler_panics_total` (label `rpc`: the gRPC path, or
//!   `http` for every HTTP route, whose paths a caller chooses).
//!
//! The panic's message never reaches the caller (it may name host paths or internal state). This
//! module knows paths and headers, never a service's messages.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::FutureExt as _;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use toolplane_telemetry::metrics::{Counter, Registry};
use tower_layer::Layer;
use tower_service::Service;

/// What a caller is told when a handler panicked: a stable code, no detail of the failure.
pub const PANIC_MESSAGE: &str = "serve.handler_panicked: the server failed while answering";
/// The counter of panics caught, in the registry the server was given.
pub const PANICS_METRIC: &str = "toolplane_handler_panics_total";

/// Which protocol the wrapped service speaks: it decides how a panic is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Grpc,
    Http,
}

/// The tower layer; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct CatchPanicLayer {
    service: &'static str,
    protocol: Protocol,
    panics: Counter,
}

impl CatchPanicLayer {
    pub(crate) fn new(service: &'static str, protocol: Protocol, registry: &Registry) -> Self {
        let panics = registry.counter(
            PANICS_METRIC,
            "Handler panics turned into INTERNAL (gRPC) or 500 (HTTP), by gRPC path.",
            &["rpc"],
        );
        CatchPanicLayer {
            service,
            protocol,
            panics,
        }
    }

    /// Logs and counts one panic of the handler answering `path`.
    fn report(&self, path: &str, payload: &(dyn Any + Send)) {
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic without a message");
        tracing::error!(
            service = self.service,
            rpc = path,
            panic = message,
            "a handler panicked; answered as an internal error"
        );
        let label = match self.protocol {
            Protocol::Grpc => path,
            Protocol::Http => "http",
        };
        self.panics.inc(&[label]);
    }
}

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CatchPanic {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`CatchPanicLayer`] produces.
#[derive(Clone, Debug)]
pub(crate) struct CatchPanic<S> {
    inner: S,
    layer: CatchPanicLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for CatchPanic<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = http::Response<PanicBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let layer = self.layer.clone();
        let inner = &mut self.inner;
        let future = match catch_unwind(AssertUnwindSafe(|| inner.call(request))) {
            Ok(future) => future,
            Err(payload) => {
                layer.report(&path, payload.as_ref());
                let answer = panic_response(layer.protocol);
                return Box::pin(async move { Ok(answer) });
            }
        };
        Box::pin(async move {
            match AssertUnwindSafe(future).catch_unwind().await {
                Ok(answer) => Ok(answer?.map(|body| PanicBody::streaming(body, layer, path))),
                Err(payload) => {
                    layer.report(&path, payload.as_ref());
                    Ok(panic_response(layer.protocol))
                }
            }
        })
    }
}

/// The status of a call whose handler panicked: [`PANIC_MESSAGE`], with its code as the error
/// details' reason (`toolplane_proto::status`).
fn panic_status() -> tonic::Status {
    toolplane_proto::status::status(
        tonic::Code::Internal,
        "serve.handler_panicked",
        PANIC_MESSAGE,
        toolplane_proto::status::Details::new(),
    )
}

/// The answer to a request whose handler panicked before it answered.
fn panic_response<B>(protocol: Protocol) -> http::Response<PanicBody<B>> {
    match protocol {
        Protocol::Grpc => panic_status().into_http(),
        Protocol::Http => {
            let mut answer = http::Response::new(PanicBody::last(Frame::data(Bytes::from_static(
                PANIC_MESSAGE.as_bytes(),
            ))));
            *answer.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            answer.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            answer
        }
    }
}

/// The trailers that end a gRPC response whose body panicked while streaming.
fn internal_trailers() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    if panic_status().add_header(&mut trailers).is_err() {
        trailers.insert("grpc-status", HeaderValue::from_static("13"));
    }
    trailers
}

pin_project! {
    /// A response body that turns a panic while it streams into its end (gRPC: INTERNAL
    /// trailers), or a replacement answer's one frame.
    pub(crate) struct PanicBody<B> {
        #[pin]
        inner: Option<B>,
        last: Option<Frame<Bytes>>,
        watch: Option<(CatchPanicLayer, String)>,
    }
}

impl<B> Default for PanicBody<B> {
    fn default() -> Self {
        PanicBody {
            inner: None,
            last: None,
            watch: None,
        }
    }
}

impl<B> PanicBody<B> {
    fn streaming(body: B, layer: CatchPanicLayer, path: String) -> Self {
        PanicBody {
            inner: Some(body),
            last: None,
            watch: Some((layer, path)),
        }
    }

    fn last(frame: Frame<Bytes>) -> Self {
        PanicBody {
            inner: None,
            last: Some(frame),
            watch: None,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for PanicBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut this = self.project();
        if let Some(inner) = this.inner.as_mut().as_pin_mut() {
            match catch_unwind(AssertUnwindSafe(|| inner.poll_frame(cx))) {
                Ok(polled) => return polled,
                Err(payload) => {
                    this.inner.set(None);
                    if let Some((layer, path)) = this.watch.take() {
                        layer.report(&path, payload.as_ref());
                        if layer.protocol == Protocol::Grpc {
                            *this.last = Some(Frame::trailers(internal_trailers()));
                        }
                    }
                }
            }
        }
        Poll::Ready(this.last.take().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.last.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.inner, &self.last) {
            (Some(inner), _) => inner.size_hint(),
            (None, Some(frame)) => frame.data_ref().map_or_else(
                || SizeHint::with_exact(0),
                |d| SizeHint::with_exact(d.len() as u64),
            ),
            (None, None) => SizeHint::with_exact(0),
        }
    }
}
