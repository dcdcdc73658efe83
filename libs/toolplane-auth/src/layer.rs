//! The tower layer every service mounts, on its tonic server and on its HTTP server. Owns how a
//! decision of [`Authenticator::authorize_with`] (with the connection's [`TransportCaller`], when
//! the server put one into the request's extensions) travels: the [`Caller`] into the request's
//! extensions, or a refusal as a gRPC trailers-only response (`grpc-status` 16 or 7, with the
//! error details of [`AuthError::to_status`]) or an HTTP
//! 401 / 403 with a JSON body `{"code", "message"}`. Must never echo the credential.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header::CONTENT_TYPE};
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::error::Refusal;
use crate::{AuthError, Authenticator, TransportCaller};

/// Tower layer: `Server::builder().layer(AuthLayer::new(auth))` on tonic,
/// `Router::layer(AuthLayer::new(auth))` on axum.
#[derive(Clone, Debug)]
pub struct AuthLayer {
    auth: Arc<Authenticator>,
}

impl AuthLayer {
    pub fn new(auth: Authenticator) -> AuthLayer {
        AuthLayer {
            auth: Arc::new(auth),
        }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            auth: Arc::clone(&self.auth),
        }
    }
}

/// The service [`AuthLayer`] produces.
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    inner: S,
    auth: Arc<Authenticator>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for AuthService<S>
where
    S: Service<http::Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = Response<AuthBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        // The clone takes the place of the service that was polled ready, which serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = Arc::clone(&self.auth);
        Box::pin(async move {
            let transport = request
                .extensions()
                .get::<TransportCaller>()
                .and_then(|t| t.0.clone());
            let decision = auth
                .authorize_with(request.uri().path(), request.headers(), transport.as_ref())
                .await;
            match decision {
                Ok(caller) => {
                    if let Some(caller) = caller {
                        request.extensions_mut().insert(caller);
                    }
                    let response = inner.call(request).await?;
                    Ok(response.map(|body| AuthBody::Inner { body }))
                }
                Err(error) => {
                    let path = request.uri().path();
                    if error.refusal() == Refusal::Internal {
                        tracing::warn!(path, %error, "credential could not be checked");
                    } else {
                        tracing::debug!(path, code = error.code(), "request refused");
                    }
                    Ok(refusal(&request, &error))
                }
            }
        })
    }
}

/// True for a gRPC request (`content-type: application/grpc…`).
fn is_grpc<B>(request: &http::Request<B>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

/// The answer to a refused request, in the request's own protocol.
fn refusal<B, ResBody>(
    request: &http::Request<B>,
    error: &AuthError,
) -> Response<AuthBody<ResBody>> {
    let kind = error.refusal();
    // A failure of the plane (the token store) stays in the log: its text may name stored keys.
    let message = match kind {
        Refusal::Internal => format!("{}: the credential could not be checked", error.code()),
        _ => error.to_string(),
    };
    if is_grpc(request) {
        let mut response = Response::new(AuthBody::Refusal { data: None });
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        let status = error.to_status();
        if status.add_header(headers).is_err() {
            headers.insert("grpc-status", HeaderValue::from_static("13"));
        }
        return response;
    }
    let status = match kind {
        Refusal::Unauthenticated => StatusCode::UNAUTHORIZED,
        Refusal::PermissionDenied => StatusCode::FORBIDDEN,
        Refusal::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = serde_json::json!({ "code": error.code(), "message": message }).to_string();
    let mut response = Response::new(AuthBody::Refusal {
        data: Some(Bytes::from(body)),
    });
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if kind == Refusal::Unauthenticated {
        headers.insert("www-authenticate", HeaderValue::from_static("Bearer"));
    }
    response
}

pin_project! {
    /// The inner service's body, or a refusal's (empty for gRPC, JSON for HTTP).
    #[project = AuthBodyProj]
    pub enum AuthBody<B> {
        Inner { #[pin] body: B },
        Refusal { data: Option<Bytes> },
    }
}

impl<B> std::fmt::Debug for AuthBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthBody::Inner { .. } => f.write_str("AuthBody::Inner"),
            AuthBody::Refusal { .. } => f.write_str("AuthBody::Refusal"),
        }
    }
}

impl<B> http_body::Body for AuthBody<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            AuthBodyProj::Inner { body } => body.poll_frame(cx),
            AuthBodyProj::Refusal { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AuthBody::Inner { body } => body.is_end_stream(),
            AuthBody::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AuthBody::Inner { body } => body.size_hint(),
            AuthBody::Refusal { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_refusal_carries_the_code_as_error_info() {
        let request = http::Request::builder()
            .header(CONTENT_TYPE, "application/grpc")
            .body(())
            .unwrap_or_default();
        let error = AuthError::PermissionDenied {
            role: crate::Role::Reader,
            required: crate::Role::Admin,
        };
        let response: Response<AuthBody<()>> = refusal(&request, &error);
        let status = tonic::Status::from_header_map(response.headers());
        let Some(status) = status else {
            panic!("no grpc-status in {:?}", response.headers());
        };
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(
            status.message().starts_with("auth.permission_denied: role"),
            "{}",
            status.message()
        );
        let info = toolplane_proto::status::error_code(&status);
        assert_eq!(info.as_deref(), Some("auth.permission_denied"));
        assert!(!status.details().is_empty());
    }
}
