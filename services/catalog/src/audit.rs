//! The catalog's admin audit (docs/auth.md, "Admin audit"): which of its RPCs change something
//! an admin owns — external tool hosts, profiles, platform and user policies, tokens — and the
//! record each successful change leaves in the catalog's store. Handlers take the caller with
//! [`caller_of`] before the request is consumed, make the change, then call
//! [`CatalogAudit::record`]; a refused or failed change records nothing.

use tonic::Request;
use toolplane_auth::{AdminAuditLog, AdminChange, AdminKind, Caller};

use crate::cell::DEFAULT_CELL;

/// The service name the catalog's records carry; they are kept in the catalog's own namespace.
pub const AUDIT_SERVICE: &str = "catalog";

/// Who sent a request: the layer's caller, or a default-cell admin where no layer runs.
pub fn caller_of<T>(request: &Request<T>) -> Caller {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::auth_off(DEFAULT_CELL))
}

/// The catalog's admin audit, or none (tests and embedders that keep no record).
#[derive(Debug, Clone, Default)]
pub struct CatalogAudit(Option<AdminAuditLog>);

impl CatalogAudit {
    pub fn new(log: AdminAuditLog) -> CatalogAudit {
        CatalogAudit(Some(log))
    }

    /// Records a change `caller` made to an object of `kind` in `cell`.
    pub async fn record(
        &self,
        caller: &Caller,
        kind: AdminKind,
        rpc: &str,
        cell: &str,
        object_id: &str,
        summary: String,
    ) {
        if let Some(log) = &self.0 {
            let change = AdminChange::new(kind, rpc, cell, object_id).summary(summary);
            log.record(caller, change).await;
        }
    }
}
