//! The mcp-proxy's admin audit (docs/auth.md, "Admin audit"): every registration made, changed
//! or removed over gRPC (`UpsertServer`, `DeregisterServer`, `SetServerState`,
//! `SetToolPermission`) leaves a record in the proxy's own store namespace. A summary names the
//! server and its transport kind, never a command line, an environment value or a header.

use toolplane_auth::{AdminAuditLog, AdminChange, AdminKind, Caller, TokenStore};

use crate::proxy::{McpProxy, ServerView};
use crate::registration::{ServerState, TransportSpec};

/// The service name the proxy's records carry.
pub const AUDIT_SERVICE: &str = "mcp-proxy";

/// The proxy's admin audit, in its store namespace; token callers are named after their token
/// when `tokens` is given.
pub fn admin_audit(proxy: &McpProxy, tokens: Option<TokenStore>) -> AdminAuditLog {
    AdminAuditLog::new(proxy.inner.persist.store(), AUDIT_SERVICE).with_tokens(tokens)
}

/// The change an `UpsertServer` made, described without secrets.
pub fn upsert_change(view: &ServerView, created: bool) -> AdminChange {
    let reg = &view.reg;
    let transport = match reg.transport {
        TransportSpec::Stdio { .. } => "stdio",
        TransportSpec::StreamableHttp { .. } => "streamable HTTP",
    };
    let verb = if created { "registered" } else { "changed" };
    AdminChange::new(
        AdminKind::Registration,
        "UpsertServer",
        &reg.cell_id,
        &reg.server_id,
    )
    .summary(format!(
        "MCP server `{}` {verb} ({transport}, {}, generation {})",
        reg.display_name,
        state_name(reg.state),
        reg.generation
    ))
}

pub fn state_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Active => "active",
        ServerState::Paused => "paused",
    }
}

/// Records `change` when the service keeps an audit.
pub async fn record(log: Option<&AdminAuditLog>, caller: Option<&Caller>, change: AdminChange) {
    if let (Some(log), Some(caller)) = (log, caller) {
        log.record(caller, change).await;
    }
}
