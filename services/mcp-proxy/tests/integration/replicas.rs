//! Two `toolplane-mcp-proxy` processes over one PostgreSQL store are replicas: a server registered
//! through one is listed by the other on its very next request and executed there through that
//! replica's own stdio child; a server deregistered through one stops being served by the other
//! (docs/deploy.md, "Scaling out"). Run epochs are shared too: an epoch one replica saw fences the
//! run's older epochs on the other (docs/mcp-proxy.md, "Fencing"). The PostgreSQL server is the store tests' own harness
//! (`pg_server`), started by this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../../libs/toolplane-store/tests/pg_server/mod.rs"]
mod pg_server;

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::process::{ProxyProcess, servers_of};
use common::*;
use tonic::transport::Channel;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::tool_executor_client::ToolExecutorClient;

/// Starts the binary with a `[store]` of kind `postgres` on `table`, its own data directory
/// (for its tokens) and logs under `dir/<name>`.
async fn replica(
    dir: &Path,
    name: &str,
    socket_dir: &Path,
    table: &str,
) -> (ProxyProcess, Channel) {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).unwrap();
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let config = home.join("mcp-proxy.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{listen}\"\ndata_dir = \"{}\"\n\
             [store]\nkind = \"postgres\"\n\
             connection = \"host={} port=5432 user=postgres dbname=postgres\"\n\
             table = \"{table}\"\n",
            home.join("data").display(),
            socket_dir.display()
        ),
    )
    .unwrap();
    let mut proxy = ProxyProcess::start(
        &[
            ("TOOLPLANE_MCP_PROXY_LISTEN", listen),
            (
                "TOOLPLANE_MCP_PROXY_CONFIG",
                config.to_string_lossy().into_owned(),
            ),
        ],
        &home,
    );
    let channel = proxy.connect().await;
    (proxy, channel)
}

async fn listed(admin: &mut McpProxyServiceClient<Channel>) -> Vec<String> {
    admin
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap()
        .into_inner()
        .servers
        .into_iter()
        .map(|s| s.server_id)
        .collect()
}

fn echo(server: &pb::McpServer, text: &str) -> pb::ExecuteRequest {
    echo_at(server, 0, text)
}

/// An `echo` call of run `r1` at `epoch`.
fn echo_at(server: &pb::McpServer, epoch: u64, text: &str) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        context: Some(pb::ToolContext {
            run_id: "r1".into(),
            epoch,
            ..Default::default()
        }),
        invocation: Some(pb::ToolInvocation {
            call_id: "call_1".into(),
            tool_id: tool_id(server, "echo"),
            arguments_json: format!(r#"{{"text":"{text}"}}"#),
            provider_metadata_json: None,
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_registered_through_one_replica_is_served_by_the_other() {
    let pg = pg_server::server().await;
    let dir = tempfile::tempdir().unwrap();
    let (a, channel_a) = replica(dir.path(), "a", &pg.dir, "mcp_proxy_replicas").await;
    let (b, channel_b) = replica(dir.path(), "b", &pg.dir, "mcp_proxy_replicas").await;
    let mut admin_a = McpProxyServiceClient::new(channel_a.clone());
    let mut admin_b = McpProxyServiceClient::new(channel_b.clone());
    // B answers once before the registration, so what follows must reach a running replica.
    assert!(listed(&mut admin_b).await.is_empty());

    let server = admin_a
        .upsert_server(fixture("fx", &[]))
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    assert_eq!(
        listed(&mut admin_b).await,
        [server.server_id.as_str()],
        "B lists A's server"
    );
    let answer = ToolExecutorClient::new(channel_b.clone())
        .execute(echo(&server, "through b"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        result(&answer).content,
        "through b",
        "{:?}; B's stderr:\n{}",
        result(&answer),
        b.stderr()
    );
    assert_eq!(servers_of(b.pid()).len(), 1, "B runs its own stdio child");
    assert_eq!(servers_of(a.pid()).len(), 1, "A keeps its own stdio child");

    admin_b
        .deregister_server(pb::DeregisterServerRequest {
            server_id: server.server_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(listed(&mut admin_a).await.is_empty(), "A drops B's removal");
    let answer = ToolExecutorClient::new(channel_a)
        .execute(echo(&server, "through a"))
        .await
        .unwrap()
        .into_inner();
    assert!(result(&answer).is_error, "A still served a removed server");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !servers_of(a.pid()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "A's stdio child outlived the removal"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_seen_by_one_replica_fences_older_ones_on_the_other() {
    let pg = pg_server::server().await;
    let dir = tempfile::tempdir().unwrap();
    let (a, channel_a) = replica(dir.path(), "a", &pg.dir, "mcp_proxy_fencing").await;
    let (b, channel_b) = replica(dir.path(), "b", &pg.dir, "mcp_proxy_fencing").await;
    let server = McpProxyServiceClient::new(channel_a.clone())
        .upsert_server(fixture("fx", &[]))
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    let mut exec_a = ToolExecutorClient::new(channel_a);
    let mut exec_b = ToolExecutorClient::new(channel_b);
    // B sees epoch 2 first, so its own memory holds an epoch that A's raise then outdates.
    let answer = exec_b.execute(echo_at(&server, 2, "b at 2")).await.unwrap();
    assert_eq!(
        result(answer.get_ref()).content,
        "b at 2",
        "B's stderr:\n{}",
        b.stderr()
    );
    let answer = exec_a.execute(echo_at(&server, 3, "a at 3")).await.unwrap();
    assert_eq!(
        result(answer.get_ref()).content,
        "a at 3",
        "A's stderr:\n{}",
        a.stderr()
    );

    for epoch in [2, 1] {
        let refused = exec_b
            .execute(echo_at(&server, epoch, "stale through b"))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            toolplane_proto::status::error_code(&refused).as_deref(),
            Some("mcp.stale_epoch"),
            "{}",
            refused.message()
        );
        assert!(
            refused.message().contains("newest epoch 3"),
            "{}",
            refused.message()
        );
    }
    let answer = exec_b.execute(echo_at(&server, 4, "b at 4")).await.unwrap();
    assert_eq!(result(answer.get_ref()).content, "b at 4");
    assert_eq!(
        toolplane_proto::status::error_code(
            &exec_a
                .execute(echo_at(&server, 3, "a at 3 again"))
                .await
                .unwrap_err()
        )
        .as_deref(),
        Some("mcp.stale_epoch"),
        "A read B's raise"
    );
}
