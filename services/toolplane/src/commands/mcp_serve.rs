//! `toolplane mcp serve --stdio --profile P [--run R] [--url URL]`: a stdio MCP server for clients
//! that start their servers as processes (desktop assistants, IDEs), bridged to a running plane's
//! MCP face (`/mcp` on the runtime's HTTP port, docs/mcp-server.md). It connects once, as one
//! session — one invocation — with the credential of the environment (`TOOLPLANE_TOKEN`, else the
//! local admin token for a plane on loopback), then forwards `tools/list`, `tools/call` and
//! `resources/read` unchanged, errors included. Requests are forwarded as they arrive, each on its
//! own task (rmcp's server side), so a slow call does not stop the bridge reading: a `ping` is
//! answered and a `notifications/cancelled` is forwarded to the plane while calls run. When the
//! stdio client goes away the HTTP session is deleted, which ends the invocation.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientCacheConfig, ErrorData as McpError, RoleClient, RoleServer, ServerHandler};
use rmcp::{ClientHandler, ServiceExt as _};

use crate::cli::McpServeArgs;
use crate::client::Endpoints;
use crate::error::CliError;

/// The bridge's side of the HTTP session: a client that identifies itself, nothing more.
#[derive(Debug, Clone)]
struct Upstream;

impl ClientHandler for Upstream {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolplane-mcp-serve", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// The stdio server: every request forwarded to the plane's session.
struct Bridge {
    plane: Arc<RunningService<RoleClient, Upstream>>,
    info: ServerConfig,
}

fn forwarded(e: ServiceError) -> McpError {
    match e {
        ServiceError::McpError(e) => e,
        other => McpError::internal_error(format!("the plane's MCP session failed: {other}"), None),
    }
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.plane
            .peer()
            .list_tools(request)
            .await
            .map_err(forwarded)
    }

    /// A call, cancelled upstream when the stdio client cancels it: rmcp's server side cancels
    /// the request's token on `notifications/cancelled` (and answers nothing for it), and dropping
    /// the upstream request sends the plane `notifications/cancelled` for it.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let peer = self.plane.peer();
        tokio::select! {
            answer = peer.call_tool_once(request) => answer.map_err(forwarded),
            () = context.ct.cancelled() => Err(McpError::internal_error("the client cancelled the call", None)),
        }
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.plane
            .peer()
            .read_resource_once(request)
            .await
            .map_err(forwarded)
    }
}

/// The `/mcp` URL of the session: `--url` (default: the runtime's HTTP port on loopback) with the
/// profile and run as its query.
fn session_url(args: &McpServeArgs) -> String {
    let base = args.url.trim_end_matches('?');
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut url = format!("{base}{sep}profile={}", encode(&args.profile));
    if let Some(run) = &args.run {
        url.push_str(&format!("&run={}", encode(run)));
    }
    url
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs the bridge until the stdio client closes stdin.
pub async fn run(args: McpServeArgs, eps: &Endpoints) -> Result<(), CliError> {
    if !args.stdio {
        return Err(CliError::InvalidInput(
            "`toolplane mcp serve` serves over stdio only: pass --stdio".into(),
        ));
    }
    let url = session_url(&args);
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    if let Some(token) = eps.credential.for_url(&args.url) {
        config = config.auth_header(token);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    let plane = Upstream
        .serve(transport)
        .await
        .map_err(|e| CliError::InvalidInput(format!("cannot open an MCP session at {url}: {e}")))?;
    plane
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    // The stdio client sees the plane's capabilities, identity and instructions.
    let mut info = ServerConfig::new(ServerCapabilities::default());
    if let Some(peer) = plane.peer_info() {
        info.capabilities = peer.capabilities.clone();
        if let Some(server) = &peer.server_info {
            info.server_info = server.clone();
        }
        info.instructions = peer.instructions.clone();
    }
    let plane = Arc::new(plane);
    let bridge = Bridge {
        plane: Arc::clone(&plane),
        info,
    };
    let served = bridge
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::InvalidInput(format!("the stdio client's handshake failed: {e}")))?;
    let ended = served.waiting().await;
    if let Ok(plane) = Arc::try_unwrap(plane) {
        // Deletes the HTTP session, which ends the invocation.
        let _ = plane.cancel().await;
    }
    ended
        .map(|_| ())
        .map_err(|e| CliError::InvalidInput(format!("the stdio session failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_url_carries_the_profile_and_run() {
        let args = McpServeArgs {
            stdio: true,
            profile: "coder x".into(),
            run: Some("r-1".into()),
            url: "http://127.0.0.1:7411/mcp".into(),
        };
        assert_eq!(
            session_url(&args),
            "http://127.0.0.1:7411/mcp?profile=coder%20x&run=r-1"
        );
    }
}
