//! The plane as an MCP server: `/mcp` on the runtime's HTTP port, streamable HTTP with rmcp's
//! server side (docs/mcp-server.md). A client connects naming a profile (`/mcp?profile=P`, or
//! `&run=R` for an existing run); one MCP session is one host-driven invocation with its frozen
//! snapshot, and every `tools/call` goes through the same pipeline as a gRPC host's
//! `ExecuteToolCalls` (turn contract, gate and budgets, governance, audit objects, journal).
//! The route sits behind the same authentication layer as every HTTP route; the session's cell is
//! the credential's.
//!
//! An edge of the runtime, like `service`: it speaks MCP's types, never protobuf, and reaches the
//! runtime only through `lifecycle` and `pipeline`.

pub mod project;
pub mod session;

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::context::Runtime;
pub use session::{McpSession, PROTOCOL};

/// The path the face is served on.
pub const PATH: &str = "/mcp";

/// The `/mcp` route over `rt`. Simple request-response calls are answered as JSON rather than
/// an event stream (the client still gets a stream when the server has more to send).
pub fn router(rt: Arc<Runtime>) -> axum::Router {
    let config = allowed_hosts(
        StreamableHttpServerConfig::default().with_json_response(true),
        &rt.cfg.mcp_allowed_hosts,
    );
    let service = StreamableHttpService::new(
        move || Ok(McpSession::new(Arc::clone(&rt))),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new().route_service(PATH, service)
}

/// The hosts the face answers: rmcp's loopback names plus the configured ones, or any with `*`.
fn allowed_hosts(
    config: StreamableHttpServerConfig,
    extra: &[String],
) -> StreamableHttpServerConfig {
    if extra.iter().any(|h| h.trim() == "*") {
        return config.disable_allowed_hosts();
    }
    let mut hosts = config.allowed_hosts.clone();
    hosts.extend(extra.iter().map(|h| h.trim().to_owned()));
    config.with_allowed_hosts(hosts)
}
