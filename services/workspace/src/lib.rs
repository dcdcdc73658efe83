//! toolplane-workspace: the workspace service — every durable byte of a run.
//!
//! It owns run workspaces (roots, manifests with the run lease epoch, `persist/` projection and
//! promotion), per-invocation read-state, the workspace / chat / skill / world-info tools served
//! through `toolplane.v1.ToolExecutor/Execute`, create-only audit objects, the group-committed
//! journal log, chats and skills, all behind `toolplane.v1.WorkspaceService`. See
//! `docs/workspace.md` for the layout, the durability rules and the error codes.
//!
//! Module map: [`engine`] (the data directory and the operations the RPCs call), [`tree`] (run
//! file trees on the injectable `Fs` layer), [`wal`] (the journal log and audit commit point),
//! [`storelog`] (the journal and audit objects on a shared store, and the `Log` choosing one),
//! [`runs`] (manifests, epochs, invocation views, read-state), [`read_state`] (the read-state
//! rules, pure), [`paths`] (model path rules), [`tools`]
//! (the agent-facing tools), [`chat`], [`skills`], [`persist`], [`service`] (gRPC), [`convert`]
//! (proto ↔ engine), [`config`], [`error`] (codes), [`limits`].
//!
//! This crate must never decide which tools an agent may call (the runtime does) or execute
//! runtime-control tools (`workspace.commit` / `workspace.finish` go through the runtime, which
//! calls `CommitRunMessage` and `PromotePersist`).

pub mod chat;
pub mod config;
pub mod convert;
pub mod engine;
pub mod error;
pub mod limits;
pub mod paths;
pub mod persist;
pub mod read_state;
pub mod runs;
pub mod service;
pub mod skills;
pub mod storelog;
pub mod tools;
pub mod tree;
pub mod wal;

use std::sync::Arc;

pub use engine::{EngineOptions, Workspace};
pub use error::{CODES, WsError};
pub use service::WorkspaceGrpc;

use tokio::net::TcpListener;
use tonic::service::Routes;
use toolplane_auth::TokenStore;
use toolplane_proto::v1::{
    tool_executor_server::ToolExecutorServer, workspace_service_server::WorkspaceServiceServer,
};
use toolplane_serve::admin_audit::AdminAuditGrpc;
use toolplane_serve::{MessageLimits, ServeOptions, Services, Serving};

/// Largest gRPC message accepted or sent (a 32 MiB audit object plus framing).
pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

/// The service's gRPC services: WorkspaceService, ToolExecutor, whose requests (a tool call)
/// are decoded up to the largest arguments it takes (`limits.max_arguments_bytes`) plus 1 MiB of
/// context, and AdminAuditService.
pub fn services(ws: Arc<Workspace>) -> Services {
    services_naming(ws, None)
}

/// [`services`], naming token callers in the admin audit after their token in `tokens`.
pub fn services_naming(ws: Arc<Workspace>, tokens: Option<TokenStore>) -> Services {
    let execute = MessageLimits {
        decoding: Some(
            ws.limits()
                .max_arguments_bytes
                .saturating_add(1024 * 1024)
                .min(MAX_MESSAGE_BYTES),
        ),
        encoding: None,
    };
    let audit = service::audit::admin_audit(&ws, tokens);
    let grpc = WorkspaceGrpc::new(ws).with_audit(Some(audit.clone()));
    Services::new()
        .add_service(WorkspaceServiceServer::new(grpc.clone()))
        .add_service_with_limits(ToolExecutorServer::new(grpc), execute)
        .add_service(AdminAuditGrpc::new(audit).server())
}

/// Serves the workspace on `listener` and its `/metrics` on `metrics` through the one start
/// every service shares, behind `auth`; once in-flight requests finished, the stop closes the
/// journal writer (after the jobs already queued).
pub async fn start_on(
    listener: TcpListener,
    ws: Arc<Workspace>,
    metrics: TcpListener,
    auth: toolplane_auth::Authenticator,
) -> Result<Serving, WsError> {
    start_on_with_tls(listener, ws, metrics, auth, None).await
}

/// [`start_on`], with both ports over `tls` when given (docs/auth.md, "mTLS between services").
pub async fn start_on_with_tls(
    listener: TcpListener,
    ws: Arc<Workspace>,
    metrics: TcpListener,
    auth: toolplane_auth::Authenticator,
    tls: Option<toolplane_serve::tls::ServerTls>,
) -> Result<Serving, WsError> {
    let registry = Arc::clone(&ws.metrics().registry);
    let closing = Arc::clone(&ws);
    let tokens = auth.tokens().cloned();
    let options = ServeOptions::new("workspace")
        .max_message_bytes(MAX_MESSAGE_BYTES)
        .auth(auth)
        .tls(tls)
        .metrics(metrics, registry)
        .on_shutdown(move || async move { closing.shutdown() });
    toolplane_serve::serve(listener, services_naming(ws, tokens), options)
        .await
        .map_err(|e| WsError::io(e.to_string()))
}

/// The routes [`start_on`] serves — WorkspaceService, ToolExecutor, gRPC health (reporting both
/// serving) and reflection — for tests and benchmarks that run their own server.
pub async fn routes(ws: Arc<Workspace>) -> Result<Routes, WsError> {
    let limits = MessageLimits {
        decoding: Some(MAX_MESSAGE_BYTES),
        encoding: Some(MAX_MESSAGE_BYTES),
    };
    Ok(services(ws).into_routes(limits).await.0)
}
