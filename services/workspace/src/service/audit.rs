//! The workspace's admin audit (docs/auth.md, "Admin audit"): every skill imported or deleted
//! over gRPC leaves a record in the workspace's store namespace, with who did it.

use std::sync::Arc;

use tonic::Request;
use toolplane_auth::{AdminAuditLog, AdminChange, AdminKind, Caller, TokenStore};

use super::DEFAULT_CELL;
use crate::engine::Workspace;

/// The service name the workspace's records carry.
pub const AUDIT_SERVICE: &str = "workspace";

/// The workspace's admin audit, in its store namespace; token callers are named after their
/// token when `tokens` is given.
pub fn admin_audit(ws: &Workspace, tokens: Option<TokenStore>) -> AdminAuditLog {
    AdminAuditLog::new(Arc::clone(ws.store()), AUDIT_SERVICE).with_tokens(tokens)
}

/// Who sent a request: the layer's caller, or a default-cell admin where no layer runs.
pub(super) fn caller_of<T>(request: &Request<T>) -> Caller {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::auth_off(DEFAULT_CELL))
}

/// Records a skill change when the service keeps an audit.
pub(super) async fn skill_changed(
    log: Option<&AdminAuditLog>,
    caller: &Caller,
    rpc: &str,
    cell: &str,
    name: &str,
    summary: String,
) {
    if let Some(log) = log {
        let change = AdminChange::new(AdminKind::Skill, rpc, cell, name).summary(summary);
        log.record(caller, change).await;
    }
}
