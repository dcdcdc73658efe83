//! Serving the proxy over gRPC: `McpProxyService` and `ToolExecutor` on one port, with gRPC
//! health and reflection and the telemetry server layer. Owns the listener and shutdown order:
//! stop accepting, finish in-flight RPCs, then close every MCP connection (stopping stdio
//! children).

use std::future::Future;

use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use toolplane_proto::v1::mcp_proxy_service_server::McpProxyServiceServer;
use toolplane_proto::v1::tool_executor_server::ToolExecutorServer;

use crate::grpc::GrpcProxy;
use crate::proxy::McpProxy;

/// Largest gRPC message accepted or sent (an `Execute` carries at most 256 KiB of arguments, a
/// response at most the response cap plus its projection).
pub const MAX_MESSAGE_BYTES: usize = 160 * 1024 * 1024;

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("mcp.serve_failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The proxy's services plus health (both reported serving) and reflection.
pub async fn routes(proxy: McpProxy) -> Result<Routes, ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<McpProxyServiceServer<GrpcProxy>>()
        .await;
    reporter
        .set_serving::<ToolExecutorServer<GrpcProxy>>()
        .await;
    let names = [
        <McpProxyServiceServer<GrpcProxy> as tonic::server::NamedService>::NAME,
        <ToolExecutorServer<GrpcProxy> as tonic::server::NamedService>::NAME,
    ];
    let grpc = GrpcProxy::new(proxy);
    Ok(Routes::new(health)
        .add_service(toolplane_proto::reflection::v1(&names))
        .add_service(toolplane_proto::reflection::v1alpha(&names))
        .add_service(
            McpProxyServiceServer::new(grpc.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(
            ToolExecutorServer::new(grpc)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        ))
}

/// Serves until `shutdown` resolves, then finishes in-flight RPCs and closes every MCP
/// connection.
pub async fn serve(
    listener: TcpListener,
    proxy: McpProxy,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let routes = routes(proxy.clone()).await?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let served = Server::builder()
        .layer(toolplane_telemetry::GrpcServerTraceLayer)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    proxy.shutdown().await;
    served?;
    Ok(())
}
