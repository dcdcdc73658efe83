//! Shared helpers of the workspace service's integration tests: a service on a real loopback
//! socket over a temp data directory, clients, and short-hands for tool calls.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::{path::Path, sync::Arc};

use tonic::transport::Channel;
use toolplane_proto::v1::{
    self as pb, tool_executor_client::ToolExecutorClient,
    workspace_service_client::WorkspaceServiceClient,
};
use toolplane_store::{FsStore, StoreOptions};
use toolplane_testkit::{ServerHandle, spawn_routes};
use toolplane_workspace::{
    Workspace,
    limits::Limits,
    tree::{NoHooks, TreeHooks},
};

pub struct Service {
    pub dir: tempfile::TempDir,
    pub ws: Arc<Workspace>,
    pub server: ServerHandle,
    pub storage: WorkspaceServiceClient<Channel>,
    pub tools: ToolExecutorClient<Channel>,
}

pub async fn start() -> Service {
    start_with(Arc::new(NoHooks), Limits::default()).await
}

pub async fn start_with(hooks: Arc<dyn TreeHooks>, limits: Limits) -> Service {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    let store = FsStore::open(data.join("store"), StoreOptions::default())
        .await
        .unwrap();
    let ws = Arc::new(
        Workspace::open_on_disk(data, Arc::new(store), limits, hooks)
            .await
            .unwrap(),
    );
    let server = spawn_routes(toolplane_workspace::routes(Arc::clone(&ws)).await.unwrap())
        .await
        .unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.addr()))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    Service {
        dir,
        ws,
        server,
        storage: WorkspaceServiceClient::new(channel.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20),
        tools: ToolExecutorClient::new(channel),
    }
}

impl Service {
    pub fn data(&self) -> std::path::PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    pub fn run_dir(&self, cell: &str, run: &str) -> std::path::PathBuf {
        self.data().join("tree").join(cell).join(run)
    }

    /// Creates a run (cell, run, chat) and opens invocation `inv` on it.
    pub async fn run(&mut self, cell: &str, run: &str, chat: &str, inv: &str) {
        self.create_run(cell, run, chat).await;
        self.open(cell, run, inv, None).await;
    }

    pub async fn create_run(
        &mut self,
        cell: &str,
        run: &str,
        chat: &str,
    ) -> pb::RunWorkspaceManifest {
        self.storage
            .create_run_workspace(pb::CreateRunWorkspaceRequest {
                manifest: Some(pb::RunWorkspaceManifest {
                    cell_id: cell.into(),
                    run_id: run.into(),
                    chat: Some(pb::ChatBinding {
                        chat_id: chat.into(),
                        message_id: None,
                    }),
                    ..Default::default()
                }),
                epoch: 1,
            })
            .await
            .unwrap()
            .into_inner()
            .manifest
            .unwrap()
    }

    pub async fn open(
        &mut self,
        cell: &str,
        run: &str,
        inv: &str,
        skills: Option<pb::SkillAccess>,
    ) {
        self.storage
            .open_invocation_workspace(pb::OpenInvocationWorkspaceRequest {
                run_id: run.into(),
                invocation_id: inv.into(),
                roots: None,
                epoch: 1,
                cell_id: cell.into(),
                skills,
            })
            .await
            .unwrap();
    }

    /// Calls a tool; a gRPC status comes back as `Err`.
    pub async fn call(
        &mut self,
        cell: &str,
        run: &str,
        inv: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<pb::ToolResult, tonic::Status> {
        call_with(&mut self.tools, cell, run, inv, tool, args).await
    }

    /// Calls a tool that must succeed; returns its content.
    pub async fn ok(
        &mut self,
        run: &str,
        inv: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> String {
        let r = self
            .call("default", run, inv, tool, args.clone())
            .await
            .unwrap();
        assert!(
            !r.is_error,
            "{tool} {args} failed: {:?} {}",
            r.error_code, r.content
        );
        r.content
    }

    /// Calls a tool that must fail recoverably; returns its error code.
    pub async fn err(
        &mut self,
        run: &str,
        inv: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> String {
        let r = self
            .call("default", run, inv, tool, args.clone())
            .await
            .unwrap();
        assert!(
            r.is_error,
            "{tool} {args} should fail but returned {}",
            r.content
        );
        assert_eq!(r.error_class, pb::ErrorClass::Recoverable as i32);
        r.error_code.unwrap()
    }
}

/// The workspace's routes over `ws` on a loopback port, and a tool client connected to them
/// (the server stops when its handle is dropped).
pub async fn serve_tools(ws: Arc<Workspace>) -> (ServerHandle, ToolExecutorClient<Channel>) {
    let server = spawn_routes(toolplane_workspace::routes(ws).await.unwrap())
        .await
        .unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (server, ToolExecutorClient::new(channel))
}

pub async fn call_with(
    client: &mut ToolExecutorClient<Channel>,
    cell: &str,
    run: &str,
    inv: &str,
    tool: &str,
    args: serde_json::Value,
) -> Result<pb::ToolResult, tonic::Status> {
    let call_id = format!("call_{}", rand_id());
    let r = client
        .execute(pb::ExecuteRequest {
            context: Some(pb::ToolContext {
                cell_id: cell.into(),
                run_id: run.into(),
                invocation_id: inv.into(),
                epoch: 1,
                ..Default::default()
            }),
            invocation: Some(pb::ToolInvocation {
                call_id: call_id.clone(),
                tool_id: format!("builtin:{tool}"),
                arguments_json: args.to_string(),
                provider_metadata_json: None,
            }),
            timeout_ms: None,
            trace: false,
        })
        .await?
        .into_inner();
    let result = r.result.unwrap();
    assert_eq!(result.call_id, call_id);
    assert_eq!(result.tool_id, format!("builtin:{tool}"));
    Ok(result)
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

pub fn structured(r: &pb::ToolResult) -> serde_json::Value {
    serde_json::from_str(r.structured_json.as_deref().unwrap()).unwrap()
}

pub fn write(dir: &Path, rel: &str, bytes: &[u8]) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}
