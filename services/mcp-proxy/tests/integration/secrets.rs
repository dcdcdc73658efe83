//! Inline environment values and header values of registrations are write-only: every answer
//! that shows a registration names them with a redacted value, and a registration read and
//! written back keeps its secrets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use toolplane_proto::v1 as pb;

const ENV_SECRET: &str = "env-secret-4f1d9c";
const HEADER_SECRET: &str = "Bearer header-secret-7a2e";

fn assert_clean(what: &str, answer: &impl std::fmt::Debug) {
    let shown = format!("{answer:?}");
    for secret in [ENV_SECRET, HEADER_SECRET] {
        assert!(!shown.contains(secret), "{what} shows a secret: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_values_never_come_back_and_survive_a_read_modify_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let pid_file = dir.path().join("server.pid");
    let bin = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let script = format!(
        "echo $$ > '{}'; exec '{}'",
        pid_file.display(),
        bin.display()
    );
    let stdio = h
        .upsert(pb::UpsertServerRequest {
            display_name: "stdio".into(),
            transport: Some(stdio(
                "/bin/sh",
                &["-c", &script],
                &[("API_SECRET", ENV_SECRET)],
            )),
            ..Default::default()
        })
        .await;
    assert_clean("UpsertServer (stdio)", &stdio);
    let stdio = stdio.server.unwrap();
    let mut remote = http("http://127.0.0.1:9/mcp");
    if let Some(pb::mcp_transport::Kind::StreamableHttp(t)) = remote.kind.as_mut() {
        t.headers
            .insert("authorization".into(), HEADER_SECRET.to_owned());
    }
    let http_server = h
        .upsert(pb::UpsertServerRequest {
            display_name: "remote".into(),
            transport: Some(remote),
            skip_refresh: true,
            ..Default::default()
        })
        .await;
    assert_clean("UpsertServer (http)", &http_server);
    let http_server = http_server.server.unwrap();

    // The names are shown, the values are not.
    let Some(pb::mcp_transport::Kind::Stdio(t)) = stdio.transport.clone().unwrap().kind else {
        panic!("stdio transport expected")
    };
    assert_eq!(
        t.env.get("API_SECRET").map(String::as_str),
        Some("<redacted>")
    );
    let Some(pb::mcp_transport::Kind::StreamableHttp(t)) =
        http_server.transport.clone().unwrap().kind
    else {
        panic!("http transport expected")
    };
    assert_eq!(
        t.headers.get("authorization").map(String::as_str),
        Some("<redacted>")
    );

    // Every other answer that shows a registration.
    for server in [&stdio, &http_server] {
        let got = h
            .admin
            .get_server(pb::GetServerRequest {
                cell_id: String::new(),
                server_id: server.server_id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_clean("GetServer", &got);
        let paused = h
            .admin
            .set_server_state(pb::SetServerStateRequest {
                cell_id: String::new(),
                server_id: server.server_id.clone(),
                state: pb::McpServerState::Active.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_clean("SetServerState", &paused);
    }
    let listed = h
        .admin
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.servers.len(), 2);
    assert_clean("ListServers", &listed);
    let refreshed = h
        .admin
        .refresh_server(pb::RefreshServerRequest {
            cell_id: String::new(),
            server_id: stdio.server_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_clean("RefreshServer", &refreshed);
    let tools = h.tools(true).await;
    assert_clean("ListCachedTools", &tools);

    // What a Get showed, written back with a changed argument: the server restarts with its
    // real secret, not the placeholder.
    let mut transport = stdio.transport.clone().unwrap();
    if let Some(pb::mcp_transport::Kind::Stdio(t)) = transport.kind.as_mut() {
        t.args[1] = format!("{script} ");
    }
    let _ = std::fs::remove_file(&pid_file);
    let updated = h
        .upsert(pb::UpsertServerRequest {
            server_id: Some(stdio.server_id.clone()),
            display_name: "stdio".into(),
            transport: Some(transport),
            ..Default::default()
        })
        .await;
    assert_clean("UpsertServer (update)", &updated);
    let mut pid = None;
    eventually(10, "the restarted server writes its pid", || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        pid.is_some()
    })
    .await;
    let environ = std::fs::read(format!("/proc/{}/environ", pid.unwrap())).unwrap();
    let expected = format!("API_SECRET={ENV_SECRET}");
    assert!(
        environ.split(|b| *b == 0).any(|v| v == expected.as_bytes()),
        "the server lost its secret: {}",
        String::from_utf8_lossy(&environ)
    );
    h.stop().await;
}
