//! Connections to MCP servers: starting or reaching a server, the MCP handshake
//! through rmcp, liveness, and closing (which stops and reaps a stdio child).
//!
//! A [`Connection`] is one initialized rmcp client session. It knows when it has died (`dead`),
//! and, for stdio, why (a protocol [`Violation`], the process's exit status and last stderr
//! lines), so that the executor can tell a caller what happened to an in-flight call. This module
//! never decides whether a call may be sent; the executor does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientCacheConfig, ClientHandler, RoleClient, ServiceExt as _};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use toolplane_core::egress::EgressPolicy;

use crate::children::ProcessSettings;
use crate::error::{MCP_CONNECTION_FAILED, MCP_EGRESS_DENIED, ProxyError};
use crate::http_listing::ListingClient;
use crate::raw_listing::RawListing;
use crate::registration::{Limits, Registration, TransportSpec};
use crate::stdio::{
    ChildWatch, StdioSpec, StdioTransport, Violation, ViolationCell, read_violation,
};

/// The proxy's side of an MCP session: it identifies itself, passes the server's
/// `notifications/tools/list_changed` on to whoever rediscovers its tools, and answers nothing
/// else (no sampling, no roots, no elicitation).
#[derive(Debug, Clone)]
pub struct ProxyClient {
    info: ClientConfig,
    list_changed: Option<Arc<Notify>>,
}

impl ProxyClient {
    pub fn new() -> ProxyClient {
        ProxyClient {
            list_changed: None,
            info: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("toolplane-mcp-proxy", env!("CARGO_PKG_VERSION")),
            )
            // The newest version the public servers of this era speak; a server that knows only
            // an older one answers with it and the session uses that.
            .with_protocol_version(ProtocolVersion::V_2025_11_25),
        }
    }
}

impl ProxyClient {
    /// A client that wakes `list_changed` when the server says its tool list changed.
    pub fn notifying(list_changed: Arc<Notify>) -> ProxyClient {
        ProxyClient {
            list_changed: Some(list_changed),
            ..ProxyClient::new()
        }
    }
}

impl Default for ProxyClient {
    fn default() -> Self {
        ProxyClient::new()
    }
}

impl ClientHandler for ProxyClient {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(notify) = &self.list_changed {
            // A stored permit: a change announced while a discovery runs triggers another one.
            notify.notify_one();
        }
    }
}

/// What a connection reports back to its registration's supervisor: the server's
/// `notifications/tools/list_changed`, and the listing fields rmcp drops.
#[derive(Debug, Clone, Default)]
pub struct ConnectionHooks {
    pub list_changed: Arc<Notify>,
    pub raw_listing: RawListing,
}

/// Which transport a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    Stdio,
    StreamableHttp,
}

/// One initialized session with an MCP server.
#[derive(Debug)]
pub struct Connection {
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ProxyClient>>>,
    pub peer: Peer<RoleClient>,
    pub kind: TransportKind,
    /// Cancelled when the session ends for any reason.
    pub dead: CancellationToken,
    pub violation: ViolationCell,
    pub child: Option<ChildWatch>,
    /// The server's name and version from the handshake.
    pub server_info: String,
    /// Which connection of its registration this is (1, 2, … in connect order); discovery
    /// remembers the one it listed, so a new one is listed again.
    pub seq: u64,
    /// The listing fields rmcp drops, as this connection's transport saw them.
    pub raw_listing: RawListing,
}

impl Connection {
    pub fn is_alive(&self) -> bool {
        !self.dead.is_cancelled() && !self.peer.is_transport_closed()
    }

    pub fn violation(&self) -> Option<Violation> {
        read_violation(&self.violation)
    }

    /// Why a dead session died, in words: the protocol violation, or the process's exit status
    /// and its last stderr line.
    pub fn death_reason(&self) -> String {
        if let Some(v) = self.violation() {
            return match v {
                Violation::Malformed(why) => why,
                Violation::Oversized(n) => {
                    format!("the server sent a {n}-byte message, over the cap")
                }
            };
        }
        if let Some(child) = &self.child {
            let exit = child.exit.borrow().clone();
            let last = child
                .stderr
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .back()
                .cloned();
            return match (exit, last) {
                (Some(exit), Some(line)) => {
                    format!("the server process {exit}; its last stderr line: {line}")
                }
                (Some(exit), None) => format!("the server process {exit}"),
                (None, _) => "the connection to the server closed".to_owned(),
            };
        }
        "the connection to the server closed".to_owned()
    }

    /// Closes the session: for stdio, stdin is closed, the process gets a grace period to exit and
    /// is then killed and reaped.
    pub async fn close(&self) {
        self.dead.cancel();
        if let Some(mut service) = self.service.lock().await.take() {
            let _ = service.close_with_timeout(Duration::from_secs(10)).await;
        }
        if let Some(child) = &self.child {
            let mut exit = child.exit.clone();
            let _ =
                tokio::time::timeout(Duration::from_secs(10), exit.wait_for(Option::is_some)).await;
        }
    }
}

/// Wraps a transport so its end is observable: `dead` is cancelled when it stops delivering
/// messages or is closed.
#[derive(Debug)]
struct Watched<T> {
    inner: T,
    dead: CancellationToken,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::model::ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::model::ServerJsonRpcMessage> {
        let msg = self.inner.receive().await;
        if msg.is_none() {
            self.dead.cancel();
        }
        msg
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.dead.cancel();
        self.inner.close().await
    }
}

/// The line or message cap of a transport for a registration: room for a response four times the
/// response limit (so an over-limit response is still read, measured and refused cleanly), at
/// least 1 MiB, at most 256 MiB.
pub fn transport_cap(limits: &Limits) -> usize {
    let cap = limits
        .max_response_bytes
        .saturating_mul(4)
        .clamp(1 << 20, 256 << 20);
    usize::try_from(cap).unwrap_or(usize::MAX)
}

fn failed(reg: &Registration, why: impl std::fmt::Display) -> ProxyError {
    ProxyError::new(
        MCP_CONNECTION_FAILED,
        format!("server `{}` ({}): {why}", reg.display_name, reg.server_id),
    )
}

/// Starts or reaches the server and runs the MCP handshake within the connect timeout. The
/// environment names are checked against `processes` again: a registration stored before its
/// variable left the allow-list does not get it.
pub async fn connect(
    reg: &Registration,
    limits: &Limits,
    processes: &ProcessSettings,
    egress: &EgressPolicy,
    hooks: &ConnectionHooks,
) -> Result<Connection, ProxyError> {
    processes.check_env(&reg.transport)?;
    let dead = CancellationToken::new();
    let violation: ViolationCell = Arc::default();
    let cap = transport_cap(limits);
    match &reg.transport {
        TransportSpec::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => {
            let spec = StdioSpec {
                command: command.clone(),
                args: args.clone(),
                env: env.clone(),
                inherit_env: inherit_env.clone(),
                cwd: cwd.clone(),
                max_line_bytes: cap,
                rlimits: processes.rlimits,
                server_id: reg.server_id.clone(),
            };
            let (transport, child) =
                StdioTransport::spawn(&spec, Arc::clone(&violation), dead.clone())
                    .map_err(|e| failed(reg, format!("cannot start `{command}`: {e}")))?;
            let transport = transport.with_raw_listing(hooks.raw_listing.clone());
            let client = ProxyClient::notifying(Arc::clone(&hooks.list_changed));
            let handshake =
                tokio::time::timeout(limits.connect_timeout, client.serve(transport)).await;
            let service = match handshake {
                Ok(Ok(service)) => service,
                Ok(Err(e)) => {
                    let stderr = child
                        .stderr
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .back()
                        .cloned();
                    let exit = child.exit.borrow().clone();
                    let mut why =
                        format!("initialization failed: {}", crate::causes::init_error(&e));
                    if let Some(exit) = exit {
                        why.push_str(&format!("; the process {exit}"));
                    }
                    if let Some(line) = stderr {
                        why.push_str(&format!("; its last stderr line: {line}"));
                    }
                    return Err(failed(reg, why));
                }
                Err(_) => {
                    return Err(failed(
                        reg,
                        format!(
                            "no answer to initialize within {} ms",
                            limits.connect_timeout.as_millis()
                        ),
                    ));
                }
            };
            let mut conn =
                finish(service, TransportKind::Stdio, dead, violation, Some(child)).await;
            conn.raw_listing = hooks.raw_listing.clone();
            Ok(conn)
        }
        TransportSpec::StreamableHttp {
            url,
            headers,
            header_env,
        } => {
            if url.starts_with("https://") && !cfg!(feature = "tls") {
                return Err(failed(
                    reg,
                    "https:// needs a proxy built with the `tls` feature",
                ));
            }
            crate::egress::check_host_of(egress, url)?;
            let mut map = HashMap::new();
            let resolved = headers
                .iter()
                .map(|(k, v)| Ok((k.clone(), v.clone())))
                .chain(header_env.iter().map(|(k, var)| {
                    std::env::var(var).map(|v| (k.clone(), v)).map_err(|_| {
                        failed(
                            reg,
                            format!("environment variable `{var}` for header `{k}` is not set"),
                        )
                    })
                }));
            for pair in resolved {
                let (k, v) = pair?;
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| failed(reg, format!("header `{k}`: {e}")))?;
                let value = http::HeaderValue::from_str(&v)
                    .map_err(|e| failed(reg, format!("header `{k}`: {e}")))?;
                map.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(map)
                .max_json_response_size(cap)
                .max_sse_event_size(cap)
                .reinit_on_expired_session(true);
            let transport = Watched {
                inner: StreamableHttpClientTransport::with_client(
                    ListingClient::new(
                        crate::egress::http_client(egress)?,
                        hooks.raw_listing.clone(),
                    ),
                    config,
                ),
                dead: dead.clone(),
            };
            let client = ProxyClient::notifying(Arc::clone(&hooks.list_changed));
            let service = tokio::time::timeout(limits.connect_timeout, client.serve(transport))
                .await
                .map_err(|_| {
                    failed(
                        reg,
                        format!(
                            "no answer to initialize within {} ms",
                            limits.connect_timeout.as_millis()
                        ),
                    )
                })?
                .map_err(|e| {
                    let why = crate::causes::init_error(&e);
                    let mut err = failed(reg, format!("initialization failed: {why}"));
                    // A refusal of the egress policy inside the client (a resolved address,
                    // a redirect) keeps its code.
                    if why.contains(MCP_EGRESS_DENIED.code) {
                        err.code = MCP_EGRESS_DENIED;
                    }
                    err
                })?;
            let mut conn = finish(
                service,
                TransportKind::StreamableHttp,
                dead,
                violation,
                None,
            )
            .await;
            conn.raw_listing = hooks.raw_listing.clone();
            Ok(conn)
        }
    }
}

async fn finish(
    service: RunningService<RoleClient, ProxyClient>,
    kind: TransportKind,
    dead: CancellationToken,
    violation: ViolationCell,
    child: Option<ChildWatch>,
) -> Connection {
    let peer = service.peer().clone();
    // Discovery must see the server's current list on every refresh, never a response cached by
    // the client; the proxy keeps its own cache.
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let server_info = peer
        .peer_info()
        .and_then(|info| info.server_info.clone())
        .map(|i| format!("{} {}", i.name, i.version))
        .unwrap_or_default();
    Connection {
        service: tokio::sync::Mutex::new(Some(service)),
        peer,
        kind,
        dead,
        violation,
        child,
        server_info,
        seq: 0,
        raw_listing: RawListing::default(),
    }
}
