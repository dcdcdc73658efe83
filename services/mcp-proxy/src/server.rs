//! Serving the proxy over gRPC: `McpProxyService`, `ToolExecutor` and `AdminAuditService` on one
//! port, through the one
//! start every service shares (`toolplane_serve`: health, reflection, the telemetry layer, its
//! `/metrics` port). Owns the proxy's shutdown order: stop accepting, finish in-flight RPCs, then
//! close every MCP connection (stopping stdio children).

use std::future::Future;

use tokio::net::TcpListener;
use tonic::service::Routes;
use toolplane_auth::TokenStore;
use toolplane_proto::v1::mcp_proxy_service_server::McpProxyServiceServer;
use toolplane_proto::v1::tool_executor_server::ToolExecutorServer;
use toolplane_serve::admin_audit::AdminAuditGrpc;
use toolplane_serve::{MessageLimits, ServeOptions, Services, Serving};

use crate::grpc::GrpcProxy;
use crate::proxy::McpProxy;

/// Largest gRPC response sent (a call's result at most four times the largest response cap, with
/// its projection); also the request limit of a service without one of its own.
pub const MAX_MESSAGE_BYTES: usize = 160 * 1024 * 1024;
/// Largest `ToolExecutor` request decoded: an `Execute` sends an MCP server at most 256 KiB of
/// arguments; room for a runtime's 1 MiB arguments refused as a result, and their context.
pub const MAX_EXECUTE_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Largest `McpProxyService` request decoded: a registration with its 20,000 tool permissions.
pub const MAX_ADMIN_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("mcp.serve_failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("mcp.serve_failed: {0}")]
    Serve(#[from] toolplane_serve::ServeError),
}

/// The proxy's gRPC services: McpProxyService, ToolExecutor and AdminAuditService.
pub fn services(proxy: McpProxy) -> Services {
    services_naming(proxy, None)
}

/// [`services`], naming token callers in the admin audit after their token in `tokens`.
pub fn services_naming(proxy: McpProxy, tokens: Option<TokenStore>) -> Services {
    let audit = crate::audit::admin_audit(&proxy, tokens);
    let grpc = GrpcProxy::new(proxy).with_audit(Some(audit.clone()));
    let decoding = |bytes| MessageLimits {
        decoding: Some(bytes),
        encoding: None,
    };
    Services::new()
        .add_service_with_limits(
            McpProxyServiceServer::new(grpc.clone()),
            decoding(MAX_ADMIN_REQUEST_BYTES),
        )
        .add_service_with_limits(
            ToolExecutorServer::new(grpc),
            decoding(MAX_EXECUTE_REQUEST_BYTES),
        )
        .add_service(AdminAuditGrpc::new(audit).server())
}

/// The proxy's services plus health (both reported serving) and reflection, for tests and
/// benchmarks that run their own server.
pub async fn routes(proxy: McpProxy) -> Result<Routes, ServeError> {
    let limits = MessageLimits {
        decoding: Some(MAX_MESSAGE_BYTES),
        encoding: Some(MAX_MESSAGE_BYTES),
    };
    Ok(services(proxy).into_routes(limits).await.0)
}

/// Serves the proxy on `listener` (and its `/metrics` on `metrics`, when given) behind `auth`;
/// the stop finishes in-flight RPCs, then closes every MCP connection.
pub async fn start_on(
    listener: TcpListener,
    proxy: McpProxy,
    metrics: Option<TcpListener>,
    auth: toolplane_auth::Authenticator,
) -> Result<Serving, ServeError> {
    start_on_with_tls(listener, proxy, metrics, auth, None).await
}

/// [`start_on`], with both ports over `tls` when given (docs/auth.md, "mTLS between services").
pub async fn start_on_with_tls(
    listener: TcpListener,
    proxy: McpProxy,
    metrics: Option<TcpListener>,
    auth: toolplane_auth::Authenticator,
    tls: Option<toolplane_serve::tls::ServerTls>,
) -> Result<Serving, ServeError> {
    let closing = proxy.clone();
    let tokens = auth.tokens().cloned();
    let mut options = ServeOptions::new("mcp-proxy")
        .max_message_bytes(MAX_MESSAGE_BYTES)
        .auth(auth)
        .tls(tls)
        .on_shutdown(move || async move { closing.shutdown().await });
    if let Some(metrics) = metrics {
        options = options.metrics(metrics, proxy.metrics());
    }
    let services = services_naming(proxy, tokens);
    Ok(toolplane_serve::serve(listener, services, options).await?)
}

/// Serves, with authentication off, until `shutdown` resolves, then finishes in-flight RPCs and
/// closes every MCP connection.
pub async fn serve(
    listener: TcpListener,
    proxy: McpProxy,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let auth = toolplane_auth::Authenticator::off(toolplane_serve::auth::DEFAULT_CELL);
    Ok(start_on(listener, proxy, None, auth)
        .await?
        .until(shutdown)
        .await?)
}
