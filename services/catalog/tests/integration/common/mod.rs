//! Shared helpers of the catalog's integration tests: a catalog on `127.0.0.1:0`, its clients,
//! paging through every listing, and a real external tool host (a `ToolExecutor` server).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;

use serde_json::json;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use toolplane_catalog::{CatalogConfig, RunningCatalog};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::tool_executor_server::{ToolExecutor, ToolExecutorServer};
use toolplane_testkit::ServerHandle;

pub async fn start() -> RunningCatalog {
    toolplane_catalog::start(CatalogConfig::ephemeral())
        .await
        .unwrap()
}

pub async fn start_with(config: CatalogConfig) -> RunningCatalog {
    toolplane_catalog::start(config).await.unwrap()
}

async fn channel(url: String) -> Channel {
    Channel::from_shared(url)
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

pub async fn catalog_client(c: &RunningCatalog) -> CatalogServiceClient<Channel> {
    CatalogServiceClient::new(channel(c.grpc_url()).await).max_decoding_message_size(64 << 20)
}

pub async fn profile_client(c: &RunningCatalog) -> ProfileServiceClient<Channel> {
    ProfileServiceClient::new(channel(c.grpc_url()).await)
}

/// Every listing of a request, page by page.
pub async fn list_all(
    client: &mut CatalogServiceClient<Channel>,
    mut req: pb::ListToolsRequest,
) -> (Vec<pb::ToolListing>, pb::ListToolsResponse) {
    let mut tools = Vec::new();
    let mut first = None;
    loop {
        let page = client.list_tools(req.clone()).await.unwrap().into_inner();
        tools.extend(page.tools.clone());
        let next = page.next_page_token.clone();
        if first.is_none() {
            first = Some(page);
        }
        if next.is_empty() {
            return (tools, first.unwrap());
        }
        req.page_token = next;
    }
}

pub fn ids(tools: &[pb::ToolListing]) -> Vec<String> {
    tools
        .iter()
        .map(|t| t.descriptor.as_ref().unwrap().id.clone())
        .collect()
}

/// `GET` a path of the catalog's HTTP server: status, headers and body.
pub async fn http_get(c: &RunningCatalog, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = reqwest::get(format!("{}{path}", c.http_url()))
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

/// A descriptor of an external tool.
pub fn descriptor(id: &str, description: &str, read_only: Option<bool>) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        id: id.into(),
        title: Some(format!("{id} title")),
        description: description.into(),
        input_schema_json: json!({"type": "object", "properties": {"query": {"type": "string", "description": "What to look up."}}, "required": ["query"]}).to_string(),
        output_schema_json: None,
        annotations: read_only.map(|r| pb::ToolAnnotations {
            read_only_hint: Some(r),
            ..Default::default()
        }),
    }
}

pub fn registration(id: &str) -> pb::ToolRegistration {
    pb::ToolRegistration {
        descriptor: Some(descriptor(id, &format!("Does {id}."), None)),
        category: 0,
        progress_aware: false,
    }
}

pub fn register(host: &str, url: &str, tools: &[&str]) -> pb::RegisterToolsRequest {
    pb::RegisterToolsRequest {
        cell_id: String::new(),
        host_id: host.into(),
        display_name: format!("{host} host"),
        endpoint: Some(pb::ExecutorEndpoint {
            url: url.into(),
            headers: [("authorization".to_owned(), "Bearer secret".to_owned())].into(),
            timeout_ms: 5000,
            max_concurrent_calls: 4,
        }),
        tools: tools.iter().map(|t| registration(t)).collect(),
        expected_generation: None,
    }
}

/// A real external tool host: answers every call with the arguments it got.
#[derive(Debug, Default, Clone, Copy)]
pub struct EchoHost;

#[tonic::async_trait]
impl ToolExecutor for EchoHost {
    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        let inv = request.into_inner().invocation.unwrap_or_default();
        Ok(Response::new(pb::ExecuteResponse {
            result: Some(pb::ToolResult {
                call_id: inv.call_id,
                tool_id: inv.tool_id,
                content: format!("echo: {}", inv.arguments_json),
                ..Default::default()
            }),
            outcome: pb::ExecutionOutcome::Known.into(),
            elapsed_ms: 0,
            raw_result_json: None,
            trace: vec![],
        }))
    }
}

pub async fn spawn_host() -> ServerHandle {
    let routes = tonic::service::Routes::new(ToolExecutorServer::new(EchoHost));
    toolplane_testkit::spawn_routes(routes).await.unwrap()
}

/// A loopback address nobody listens on.
pub fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}
