//! `toolplane.v1.AdminAuditService`, the one read of the admin audit every service that makes
//! administrative changes serves over its own record (docs/auth.md, "Admin audit"). Admin-only
//! by the role table; the cell read is the caller's, never the request's.

use tonic::{Request, Response, Status};
use toolplane_auth::{
    AdminAuditLog, AdminAuditQuery, AdminAuditRecord, AdminKind, AuthError, Caller, CallerKind,
};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::admin_audit_service_server::{AdminAuditService, AdminAuditServiceServer};

use crate::auth::DEFAULT_CELL;

/// The admin audit service over a service's record.
#[derive(Debug, Clone)]
pub struct AdminAuditGrpc {
    log: AdminAuditLog,
}

impl AdminAuditGrpc {
    pub fn new(log: AdminAuditLog) -> AdminAuditGrpc {
        AdminAuditGrpc { log }
    }

    /// The generated server, ready for [`crate::Services::add_service`].
    pub fn server(self) -> AdminAuditServiceServer<AdminAuditGrpc> {
        AdminAuditServiceServer::new(self)
    }
}

fn status(e: AuthError) -> Status {
    match e.code() {
        "auth.invalid_request" => Status::invalid_argument(e.to_string()),
        "auth.permission_denied" => Status::permission_denied(e.to_string()),
        _ => {
            tracing::error!(code = e.code(), error = %e, "admin audit read failed");
            Status::internal(format!("{}: the admin audit could not be read", e.code()))
        }
    }
}

fn record_pb(r: AdminAuditRecord) -> pb::AdminAuditRecord {
    let caller_kind = match r.caller_kind {
        CallerKind::Token => "token",
        CallerKind::Jwt => "jwt",
        CallerKind::AuthOff => "auth_off",
        CallerKind::Certificate => "certificate",
    };
    pb::AdminAuditRecord {
        record_id: r.id,
        at_unix_ms: r.at_unix_ms,
        service: r.service,
        cell_id: r.cell,
        who: r.who,
        principal: r.principal,
        caller_kind: caller_kind.to_owned(),
        role: r.role.as_str().to_owned(),
        kind: r.kind.as_str().to_owned(),
        rpc: r.rpc,
        object_id: r.object_id,
        summary: r.summary,
    }
}

#[tonic::async_trait]
impl AdminAuditService for AdminAuditGrpc {
    async fn list_admin_audit(
        &self,
        request: Request<pb::ListAdminAuditRequest>,
    ) -> Result<Response<pb::ListAdminAuditResponse>, Status> {
        let caller = request
            .extensions()
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(|| Caller::auth_off(DEFAULT_CELL));
        let r = request.into_inner();
        let mut cell = caller.scope(&r.cell_id).map_err(status)?;
        if cell.is_empty() {
            cell = if caller.cell.is_empty() {
                DEFAULT_CELL.to_owned()
            } else {
                caller.cell.clone()
            };
        }
        let kind = if r.kind.is_empty() {
            None
        } else {
            Some(r.kind.parse::<AdminKind>().map_err(status)?)
        };
        let query = AdminAuditQuery {
            since_unix_ms: r.since_unix_ms,
            kind,
            page_size: usize::try_from(r.page_size).unwrap_or(usize::MAX),
            page_token: r.page_token,
        };
        let page = self.log.list(&cell, &query).await.map_err(status)?;
        Ok(Response::new(pb::ListAdminAuditResponse {
            records: page.records.into_iter().map(record_pb).collect(),
            next_page_token: page.next_page_token,
        }))
    }
}
