//! Shared helpers: a proxy on a real loopback socket over a filesystem store, gRPC clients, and
//! registration requests for the fixture and public servers.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

pub mod process;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;
use toolplane_mcp_proxy::{McpProxy, ProxySettings, STORE_NAMESPACE};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::tool_executor_client::ToolExecutorClient;
use toolplane_store::{FsStore, Store, StoreExt as _};
use toolplane_testkit::ServerHandle;

pub struct Harness {
    pub proxy: McpProxy,
    pub admin: McpProxyServiceClient<Channel>,
    pub exec: ToolExecutorClient<Channel>,
    pub channel: Channel,
    pub server: Option<ServerHandle>,
}

impl Harness {
    pub async fn start(dir: &Path) -> Harness {
        Harness::start_with(dir, ProxySettings::default()).await
    }

    pub async fn start_with(dir: &Path, settings: ProxySettings) -> Harness {
        let store: Arc<dyn Store> = Arc::new(
            FsStore::open(dir, toolplane_store::StoreOptions::default())
                .await
                .unwrap(),
        );
        let store = store.namespace(STORE_NAMESPACE).unwrap();
        let proxy = McpProxy::open(store, settings).await.unwrap();
        let routes = toolplane_mcp_proxy::routes(proxy.clone()).await.unwrap();
        let server = toolplane_testkit::spawn_routes(routes).await.unwrap();
        let channel = Channel::from_shared(server.url())
            .unwrap()
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap();
        Harness {
            proxy,
            admin: McpProxyServiceClient::new(channel.clone())
                .max_decoding_message_size(usize::MAX),
            exec: ToolExecutorClient::new(channel.clone()).max_decoding_message_size(usize::MAX),
            channel,
            server: Some(server),
        }
    }

    /// Stops serving and closes every connection (children stopped).
    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await.unwrap();
        }
        self.proxy.shutdown().await;
    }

    pub async fn upsert(&mut self, req: pb::UpsertServerRequest) -> pb::UpsertServerResponse {
        self.admin.upsert_server(req).await.unwrap().into_inner()
    }

    pub async fn call(&mut self, tool_id: &str, args: &str) -> pb::ExecuteResponse {
        self.call_with(tool_id, args, None).await
    }

    pub async fn call_with(
        &mut self,
        tool_id: &str,
        args: &str,
        timeout_ms: Option<u64>,
    ) -> pb::ExecuteResponse {
        self.exec
            .execute(pb::ExecuteRequest {
                context: Some(pb::ToolContext::default()),
                invocation: Some(pb::ToolInvocation {
                    call_id: "call_1".into(),
                    tool_id: tool_id.into(),
                    arguments_json: args.into(),
                    provider_metadata_json: None,
                }),
                timeout_ms,
                trace: true,
            })
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn tools(&mut self, include_unusable: bool) -> Vec<pb::McpCachedTool> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .admin
                .list_cached_tools(pb::ListCachedToolsRequest {
                    include_unusable,
                    page_size: 1000,
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            out.extend(page.tools);
            if page.next_page_token.is_empty() {
                return out;
            }
            token = page.next_page_token;
        }
    }

    pub async fn set_permission(&mut self, server_id: &str, tool: &str, p: pb::McpToolPermission) {
        self.admin
            .set_tool_permission(pb::SetToolPermissionRequest {
                cell_id: String::new(),
                server_id: server_id.into(),
                native_name: tool.into(),
                permission: p.into(),
            })
            .await
            .unwrap();
    }

    pub async fn set_state(&mut self, server_id: &str, s: pb::McpServerState) {
        self.admin
            .set_server_state(pb::SetServerStateRequest {
                cell_id: String::new(),
                server_id: server_id.into(),
                state: s.into(),
            })
            .await
            .unwrap();
    }
}

pub fn stdio(command: &str, args: &[&str], env: &[(&str, &str)]) -> pb::McpTransport {
    pb::McpTransport {
        kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>(),
            inherit_env: vec![],
            cwd: String::new(),
        })),
    }
}

pub fn http(url: &str) -> pb::McpTransport {
    pb::McpTransport {
        kind: Some(pb::mcp_transport::Kind::StreamableHttp(
            pb::McpStreamableHttpTransport {
                url: url.into(),
                ..Default::default()
            },
        )),
    }
}

/// An upsert of the fixture server with `env`, all tools allowed.
pub fn fixture(name: &str, env: &[(&str, &str)]) -> pb::UpsertServerRequest {
    let bin = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    pb::UpsertServerRequest {
        display_name: name.into(),
        transport: Some(stdio(&bin.to_string_lossy(), &[], env)),
        default_permission: pb::McpToolPermission::Allow.into(),
        ..Default::default()
    }
}

pub fn tool_id(server: &pb::McpServer, native: &str) -> String {
    format!("mcp/{}:{native}", server.server_id)
}

pub fn result(r: &pb::ExecuteResponse) -> &pb::ToolResult {
    r.result.as_ref().unwrap()
}

pub fn outcome(r: &pb::ExecuteResponse) -> pb::ExecutionOutcome {
    pb::ExecutionOutcome::try_from(r.outcome).unwrap()
}

/// Asserts an error result with `code` and `outcome`.
pub fn assert_error(r: &pb::ExecuteResponse, code: &str, expected: pb::ExecutionOutcome) {
    let res = result(r);
    assert!(
        res.is_error,
        "expected {code}, got success: {}",
        res.content
    );
    assert_eq!(
        res.error_code.as_deref(),
        Some(code),
        "content: {}",
        res.content
    );
    assert_eq!(outcome(r), expected, "{code}: {}", res.content);
    assert_eq!(res.call_id, "call_1");
}

/// Waits until `f` holds (polling), or panics after `secs`.
pub async fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..secs * 20 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within {secs} s");
}

/// Whether a process exists (a zombie counts as existing: it was not reaped).
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Pids appended to a fixture start log.
pub fn started_pids(log: &Path) -> Vec<u32> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("started ")?.parse().ok())
        .collect()
}
