//! Shared set-up of the end-to-end tests: the whole plane on free loopback ports, gRPC clients,
//! and readers for what a user checks afterwards (journal, audit files, chat).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tonic::transport::Channel;
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_proto::v1::workspace_service_client::WorkspaceServiceClient;

pub struct Harness {
    pub plane: Plane,
    pub dir: tempfile::TempDir,
    pub runtime: RuntimeServiceClient<Channel>,
    pub profiles: ProfileServiceClient<Channel>,
    pub workspace: WorkspaceServiceClient<Channel>,
    pub mcp: McpProxyServiceClient<Channel>,
}

pub async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

pub async fn harness() -> Harness {
    harness_with(|_| {}).await
}

pub async fn harness_with(tweak: impl FnOnce(&mut PlaneConfig)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = PlaneConfig::ephemeral(dir.path().to_path_buf());
    cfg.runtime.model_retry_backoff = std::time::Duration::from_millis(20);
    tweak(&mut cfg);
    let plane = Plane::up(cfg).await.unwrap();
    Harness {
        runtime: RuntimeServiceClient::new(channel(&plane.runtime_url()).await),
        profiles: ProfileServiceClient::new(channel(&plane.catalog_url()).await),
        workspace: WorkspaceServiceClient::new(channel(&plane.workspace_url()).await)
            .max_decoding_message_size(64 << 20),
        mcp: McpProxyServiceClient::new(channel(&plane.mcp_proxy_url()).await),
        plane,
        dir,
    }
}

impl Harness {
    pub async fn put_profile(&mut self, profile: Value) {
        let id = profile["id"].as_str().unwrap().to_owned();
        self.profiles
            .put_profile(pb::PutProfileRequest {
                cell_id: String::new(),
                profile_id: id,
                profile_json: profile.to_string(),
                expected_version: None,
                validate_only: false,
                request_id: String::new(),
            })
            .await
            .unwrap();
    }

    pub async fn create_run(&mut self, profile: &str, background: bool) -> String {
        let run = self
            .runtime
            .create_run(pb::CreateRunRequest {
                chat: Some(pb::ChatBinding {
                    chat_id: "chat-1".into(),
                    message_id: None,
                }),
                mode: if background {
                    pb::RunMode::Background as i32
                } else {
                    pb::RunMode::Foreground as i32
                },
                profile_id: profile.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap();
        run.run_id
    }

    /// Starts a runtime-driven run; returns its id.
    pub async fn start_run(&mut self, spec: pb::RunSpec) -> String {
        self.runtime
            .start_run(pb::StartRunRequest {
                spec: Some(spec),
                request_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap()
            .run_id
    }

    pub async fn open(
        &mut self,
        run: &str,
        format: pb::ProviderFormat,
    ) -> pb::OpenInvocationResponse {
        self.runtime
            .open_invocation(pb::OpenInvocationRequest {
                run_id: run.into(),
                provider_format: format as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn execute(
        &mut self,
        inv: &str,
        turn: &str,
        format: pb::ProviderFormat,
        calls: Value,
    ) -> Result<pb::ExecuteToolCallsResponse, tonic::Status> {
        self.runtime
            .execute_tool_calls(pb::ExecuteToolCallsRequest {
                invocation_id: inv.into(),
                turn_id: turn.into(),
                provider_format: format as i32,
                calls_json: calls.to_string(),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
    }

    pub async fn run(&mut self, run: &str) -> pb::Run {
        self.runtime
            .get_run(pb::GetRunRequest { run_id: run.into() })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap()
    }

    /// Cancels the run and returns it as `CancelRun` answers.
    pub async fn cancel(&mut self, run: &str, reason: &str) -> pb::Run {
        self.runtime
            .cancel_run(pb::CancelRunRequest {
                run_id: run.into(),
                reason: reason.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap()
    }

    /// Waits until the run reaches a terminal status (runtime-driven runs).
    pub async fn wait_terminal(&mut self, run: &str) -> pb::Run {
        for _ in 0..600 {
            let r = self.run(run).await;
            let s = pb::RunStatus::try_from(r.status).unwrap();
            if matches!(
                s,
                pb::RunStatus::Completed
                    | pb::RunStatus::Failed
                    | pb::RunStatus::PartialSuccess
                    | pb::RunStatus::Cancelled
            ) {
                return r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("run {run} did not finish");
    }

    pub async fn journal(&mut self, run: &str) -> Vec<pb::JournalEvent> {
        self.workspace
            .read_journal(pb::ReadJournalRequest {
                run_id: run.into(),
                from_seq: 1,
                page_size: 5000,
                cell_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .records
    }

    pub async fn object(&mut self, run: &str, path: &str) -> Option<Vec<u8>> {
        self.workspace
            .get_object(pb::GetObjectRequest {
                run_id: run.into(),
                path: path.into(),
                cell_id: String::new(),
            })
            .await
            .ok()
            .map(|r| r.into_inner().content)
    }

    pub async fn chat(&mut self, chat: &str) -> Vec<pb::ChatMessage> {
        self.workspace
            .list_chat_messages(pb::ListChatMessagesRequest {
                cell_id: String::new(),
                chat_id: chat.into(),
                page_size: 100,
                page_token: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .messages
    }
}

/// Registers the Rust MCP fixture over stdio with every tool allowed, refreshes the catalog, and
/// returns the server id.
pub async fn register_fixture(h: &mut Harness) -> String {
    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let server = h
        .mcp
        .upsert_server(pb::UpsertServerRequest {
            display_name: "fixture".into(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                    command: fixture.to_string_lossy().into_owned(),
                    ..Default::default()
                })),
            }),
            default_permission: pb::McpToolPermission::Allow as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap()
        .server_id;
    toolplane_proto::v1::catalog_service_client::CatalogServiceClient::new(
        channel(&h.plane.catalog_url()).await,
    )
    .refresh_sources(pb::RefreshSourcesRequest {
        cell_id: String::new(),
    })
    .await
    .unwrap();
    server
}

pub fn types(journal: &[pb::JournalEvent]) -> Vec<String> {
    journal.iter().map(|e| e.r#type.clone()).collect()
}

pub fn payload(e: &pb::JournalEvent) -> Value {
    serde_json::from_str(&e.payload_json).unwrap()
}

/// An OpenAI Chat Completions assistant message calling tools `(id, alias, arguments)`.
pub fn openai_calls(calls: &[(&str, &str, Value)]) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": calls.iter().map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect::<Vec<_>>()})
}

/// An Anthropic assistant message calling tools `(id, name, input)`.
pub fn anthropic_calls(calls: &[(&str, &str, Value)]) -> Value {
    json!({"role": "assistant", "content": calls.iter().map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})).collect::<Vec<_>>()})
}

pub fn writer_profile() -> Value {
    json!({
        "id": "writer",
        "description": "Writes answers into the workspace and commits them.",
        "tools": {
            "allow": ["builtin:workspace.*", "builtin:dice.roll", "mcp:everything/*"],
            "maxCallsPerInvocation": 40,
            "maxRounds": 12
        }
    })
}
