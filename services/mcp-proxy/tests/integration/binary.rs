//! The `toolplane-mcp-proxy` binary as deployments run it: configured by its environment
//! (`TOOLPLANE_MCP_PROXY_LISTEN`, `TOOLPLANE_MCP_PROXY_DATA_DIR`, `TOOLPLANE_MCP_PROXY_CONFIG`),
//! keeping registrations in its data directory across restarts, and stopping its stdio servers
//! on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::process::{ProxyProcess, is_running, servers_of};
use common::*;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::tool_executor_client::ToolExecutorClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_is_configured_by_its_environment_and_stops_its_servers() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");

    let mut proxy = ProxyProcess::start(
        &[
            ("TOOLPLANE_MCP_PROXY_LISTEN", listen.clone()),
            (
                "TOOLPLANE_MCP_PROXY_DATA_DIR",
                data.path().to_string_lossy().into_owned(),
            ),
        ],
        logs.path(),
    );
    let channel = proxy.connect().await;
    let mut admin = McpProxyServiceClient::new(channel.clone());
    let server = admin
        .upsert_server(fixture("fx", &[]))
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    let answer = ToolExecutorClient::new(channel)
        .execute(pb::ExecuteRequest {
            invocation: Some(pb::ToolInvocation {
                call_id: "call_1".into(),
                tool_id: tool_id(&server, "echo"),
                arguments_json: r#"{"text":"through the binary"}"#.into(),
                provider_metadata_json: None,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(result(&answer).content, "through the binary");

    // The registration is in the data directory named by the environment.
    let record = data
        .path()
        .join("mcp-proxy/servers/default")
        .join(&server.server_id)
        .join("registration.json");
    assert!(record.is_file(), "{} missing", record.display());

    // SIGTERM: the proxy exits cleanly and its stdio server is gone with it.
    let children = servers_of(proxy.pid());
    assert_eq!(children.len(), 1, "one stdio server expected: {children:?}");
    let status = proxy.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status}; stderr:\n{}", proxy.stderr());
    for child in children {
        assert!(
            !is_running(child),
            "stdio server {child} outlived the proxy"
        );
    }

    // Restarted from a config file named by TOOLPLANE_MCP_PROXY_CONFIG, on the same data: the
    // registration is still there.
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let config = logs.path().join("mcp-proxy.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n",
            data.path().display()
        ),
    )
    .unwrap();
    let mut proxy = ProxyProcess::start(
        &[(
            "TOOLPLANE_MCP_PROXY_CONFIG",
            config.to_string_lossy().into_owned(),
        )],
        logs.path(),
    );
    proxy.addr = format!("127.0.0.1:{port}");
    let mut admin = McpProxyServiceClient::new(proxy.connect().await);
    let listed = admin
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<_> = listed
        .servers
        .iter()
        .map(|s| s.server_id.as_str())
        .collect();
    assert_eq!(ids, [server.server_id.as_str()]);
    let status = proxy.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status}; stderr:\n{}", proxy.stderr());
}
