//! The MCP source against the real mcp-proxy and a public MCP server
//! (`@modelcontextprotocol/server-everything` from npm, over stdio): its tools reach `ListTools`
//! and `GET /tools`; a profile names them by server name before the registration exists; pausing
//! the server takes them out of the default listing and shows them unusable with the reason;
//! removing the server removes them. Everything over real sockets.
//!
//! Needs the npm package: `TOOLPLANE_SERVER_EVERYTHING` (path of its `dist/index.js`) or
//! `cd tests/mcp-servers && npm ci`; the test fails with that message when it is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tonic::transport::Channel;
use toolplane_catalog::{CatalogConfig, RunningCatalog};
use toolplane_mcp_proxy::{McpProxy, ProxySettings, STORE_NAMESPACE};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_store::{FsStore, Store, StoreExt as _, StoreOptions};
use toolplane_testkit::ServerHandle;

struct Plane {
    proxy: McpProxy,
    proxy_server: ServerHandle,
    admin: McpProxyServiceClient<Channel>,
    catalog: RunningCatalog,
    client: CatalogServiceClient<Channel>,
}

/// An mcp-proxy and a catalog pulling from it, over one store directory, each in its namespace.
async fn plane(dir: &std::path::Path, refresh_interval_ms: u64) -> Plane {
    let store: Arc<dyn Store> =
        Arc::new(FsStore::open(dir, StoreOptions::default()).await.unwrap());
    let proxy = McpProxy::open(
        store.namespace(STORE_NAMESPACE).unwrap(),
        ProxySettings::default(),
    )
    .await
    .unwrap();
    let routes = toolplane_mcp_proxy::routes(proxy.clone()).await.unwrap();
    let proxy_server = toolplane_testkit::spawn_routes(routes).await.unwrap();
    let admin = McpProxyServiceClient::new(
        Channel::from_shared(proxy_server.url())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let config = CatalogConfig {
        mcp_proxy_url: Some(proxy_server.url()),
        mcp_timeout_ms: 10_000,
        refresh_interval_ms,
        ..CatalogConfig::ephemeral()
    };
    let catalog = toolplane_catalog::start_with_store(config, store)
        .await
        .unwrap();
    let client = catalog_client(&catalog).await;
    Plane {
        proxy,
        proxy_server,
        admin,
        catalog,
        client,
    }
}

impl Plane {
    async fn stop(self) {
        self.catalog.shutdown().await.unwrap();
        self.proxy_server.shutdown().await.unwrap();
        self.proxy.shutdown().await;
    }

    async fn refresh(&mut self) -> pb::SourceStatus {
        let r = self
            .client
            .refresh_sources(pb::RefreshSourcesRequest::default())
            .await
            .unwrap()
            .into_inner();
        r.sources
            .into_iter()
            .find(|s| s.source == pb::ToolSource::Mcp as i32)
            .unwrap()
    }

    async fn mcp_tools(&mut self, include_unusable: bool) -> Vec<pb::ToolListing> {
        list_all(
            &mut self.client,
            pb::ListToolsRequest {
                sources: vec![pb::ToolSource::Mcp as i32],
                include_unusable,
                ..Default::default()
            },
        )
        .await
        .0
    }

    async fn set_state(&mut self, server_id: &str, state: pb::McpServerState) {
        self.admin
            .set_server_state(pb::SetServerStateRequest {
                cell_id: String::new(),
                server_id: server_id.into(),
                state: state.into(),
            })
            .await
            .unwrap();
    }
}

fn everything() -> pb::UpsertServerRequest {
    let entry =
        toolplane_testkit::mcp_fixture::server_everything_entry().unwrap_or_else(|e| panic!("{e}"));
    pb::UpsertServerRequest {
        display_name: "everything".into(),
        transport: Some(pb::McpTransport {
            kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                command: "node".into(),
                args: vec![entry.to_string_lossy().into_owned(), "stdio".into()],
                ..Default::default()
            })),
        }),
        default_permission: pb::McpToolPermission::Allow.into(),
        ..Default::default()
    }
}

fn find<'a>(tools: &'a [pb::ToolListing], native: &str) -> Option<&'a pb::ToolListing> {
    tools
        .iter()
        .find(|t| t.mcp.as_ref().is_some_and(|m| m.native_name == native))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_mcp_server_reaches_the_listings_and_leaves_them_when_paused() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path(), 60_000).await;
    let mut profiles = profile_client(&p.catalog).await;

    // A profile names the server's tool before the server is registered: accepted, with a warning.
    let put = profiles
        .put_profile(pb::PutProfileRequest {
            profile_json: json!({"id": "echoer", "tools": {"allow": ["mcp:everything/echo", "builtin:workspace.read_file"]}}).to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.warnings[0].code, "profile.selector_matches_nothing");
    assert_eq!(put.warnings[0].subject, "mcp:everything/echo");

    let up = p
        .admin
        .upsert_server(everything())
        .await
        .unwrap()
        .into_inner();
    let server = up.server.unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    let status = p.refresh().await;
    assert!(status.available, "{:?}", status.diagnostics);
    assert!(status.usable_tool_count >= 5, "{status:?}");

    // gRPC: the server's tools with their registration facts.
    let tools = p.mcp_tools(false).await;
    let echo = find(&tools, "echo").expect("echo is listed");
    // `simulate-research-query` runs only as an MCP task: listed unusable, with the reason.
    let every = p.mcp_tools(true).await;
    let research = find(&every, "simulate-research-query").expect("listed as unusable");
    assert!(!research.usable);
    assert_eq!(research.diagnostics[0].code, "mcp.task_required");
    assert!(find(&tools, "simulate-research-query").is_none());
    let echo_id = format!("mcp/{}:echo", server.server_id);
    let d = echo.descriptor.as_ref().unwrap();
    assert_eq!(d.id, echo_id);
    assert!(echo.usable);
    let schema: Value = serde_json::from_str(&d.input_schema_json).unwrap();
    assert_eq!(schema["type"], "object");
    let mcp = echo.mcp.as_ref().unwrap();
    assert_eq!(mcp.server_display_name, "everything");
    assert_eq!(mcp.server_state, pb::McpServerState::Active as i32);
    assert_eq!(mcp.permission, pb::McpToolPermission::Allow as i32);

    // HTTP: the same tools, schemas as JSON.
    let (status, _, body) = http_get(&p.catalog, "/tools?source=mcp").await;
    assert_eq!(status, 200);
    let listed: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(listed.len(), tools.len());
    let http_echo = listed.iter().find(|l| l["id"] == echo_id.as_str()).unwrap();
    assert_eq!(http_echo["inputSchema"]["type"], "object");
    assert_eq!(http_echo["mcp"]["serverDisplayName"], "everything");
    assert_eq!(http_echo["usable"], true);

    // The profile's selector now finds the tool by the server's name.
    let view = |p: &str| pb::ListToolsRequest {
        profile_id: p.into(),
        ..Default::default()
    };
    let (seen, first) = list_all(&mut p.client, view("echoer")).await;
    assert_eq!(
        ids(&seen),
        [echo_id.as_str(), "builtin:workspace.read_file"]
    );
    assert!(first.omitted.is_empty(), "{:?}", first.omitted);

    // Paused: out of the default listing, still listed as unusable with the reason.
    p.set_state(&server.server_id, pb::McpServerState::Paused)
        .await;
    p.refresh().await;
    assert!(p.mcp_tools(false).await.is_empty());
    let all = p.mcp_tools(true).await;
    assert_eq!(all.len(), every.len());
    let paused_echo = find(&all, "echo").unwrap();
    assert!(!paused_echo.usable);
    assert_eq!(paused_echo.diagnostics[0].code, "mcp.server_paused");
    assert_eq!(
        paused_echo.mcp.as_ref().unwrap().server_state,
        pb::McpServerState::Paused as i32
    );
    let (_, _, body) = http_get(&p.catalog, "/tools?source=mcp").await;
    assert_eq!(body, "[]");
    let (_, _, body) = http_get(&p.catalog, "/tools?source=mcp&include_unusable=true").await;
    let listed: Vec<Value> = serde_json::from_str(&body).unwrap();
    let http_echo = listed.iter().find(|l| l["id"] == echo_id.as_str()).unwrap();
    assert_eq!(http_echo["usable"], false);
    assert_eq!(http_echo["diagnostics"][0]["code"], "mcp.server_paused");
    let (seen, first) = list_all(&mut p.client, view("echoer")).await;
    assert_eq!(ids(&seen), ["builtin:workspace.read_file"]);
    let omitted = &first.omitted[0];
    assert_eq!(omitted.tool_id, echo_id);
    assert_eq!(omitted.selector, "mcp:everything/echo");
    assert_eq!(
        omitted.diagnostic.as_ref().unwrap().code,
        "mcp.server_paused"
    );

    // Active again, one tool on ASK: usable, and the listing says ASK runs like ALLOW.
    p.set_state(&server.server_id, pb::McpServerState::Active)
        .await;
    p.admin
        .set_tool_permission(pb::SetToolPermissionRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
            native_name: "get-sum".into(),
            permission: pb::McpToolPermission::Ask.into(),
        })
        .await
        .unwrap();
    p.refresh().await;
    let tools = p.mcp_tools(false).await;
    let sum = find(&tools, "get-sum").unwrap();
    assert!(sum.usable);
    assert_eq!(sum.diagnostics[0].code, "mcp.permission_ask");

    // Removed: gone from every listing.
    p.admin
        .deregister_server(pb::DeregisterServerRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
        })
        .await
        .unwrap();
    p.refresh().await;
    assert!(p.mcp_tools(true).await.is_empty());
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_refresh_follows_the_proxy_without_being_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plane(dir.path(), 200).await;
    let server = p
        .admin
        .upsert_server(everything())
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    let mut seen = false;
    for _ in 0..100 {
        if find(&p.mcp_tools(false).await, "echo").is_some() {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen,
        "the registered server's tools appear within the refresh interval"
    );
    p.set_state(&server.server_id, pb::McpServerState::Paused)
        .await;
    let mut gone = false;
    for _ in 0..100 {
        if p.mcp_tools(false).await.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the paused server's tools leave the default listing");
    p.stop().await;
}
