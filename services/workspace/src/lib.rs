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
pub mod tools;
pub mod tree;
pub mod wal;

use std::sync::Arc;

pub use engine::{EngineOptions, Workspace};
pub use error::{CODES, WsError};
pub use service::WorkspaceGrpc;

use tonic::service::Routes;
use toolplane_proto::v1::{
    tool_executor_server::ToolExecutorServer, workspace_service_server::WorkspaceServiceServer,
};

/// Largest gRPC message accepted or sent (a 32 MiB audit object plus framing).
pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

/// The service's routes: WorkspaceService, ToolExecutor, gRPC health (reporting both serving) and
/// reflection.
pub async fn routes(ws: Arc<Workspace>) -> Result<Routes, WsError> {
    let grpc = WorkspaceGrpc::new(ws);
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<WorkspaceServiceServer<WorkspaceGrpc>>()
        .await;
    reporter
        .set_serving::<ToolExecutorServer<WorkspaceGrpc>>()
        .await;
    let names = [
        <WorkspaceServiceServer<WorkspaceGrpc> as tonic::server::NamedService>::NAME,
        <ToolExecutorServer<WorkspaceGrpc> as tonic::server::NamedService>::NAME,
    ];
    Ok(Routes::new(health)
        .add_service(toolplane_proto::reflection::v1(&names))
        .add_service(toolplane_proto::reflection::v1alpha(&names))
        .add_service(
            WorkspaceServiceServer::new(grpc.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .add_service(
            ToolExecutorServer::new(grpc)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        ))
}
