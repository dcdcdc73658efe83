//! The proxy against MCP servers toolplane did not write: `@modelcontextprotocol/server-everything`
//! over stdio and over streamable HTTP, and `mcp-server-time` from PyPI. Register, discover, list
//! from the cache, permit, call — all over gRPC on a real socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use toolplane_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_register_discover_permit_call() {
    let entry = toolplane_testkit::mcp_fixture::server_everything_entry().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let up = h
        .upsert(pb::UpsertServerRequest {
            display_name: "everything".into(),
            transport: Some(stdio("node", &[&entry.to_string_lossy(), "stdio"], &[])),
            ..Default::default()
        })
        .await;
    assert!(up.created);
    let server = up.server.unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    assert!(server.cached_tool_count >= 5, "{server:?}");
    assert_eq!(server.default_permission, pb::McpToolPermission::Off as i32);

    // New tools are off: nothing is usable, and listing everything says why.
    assert!(h.tools(false).await.is_empty());
    let all = h.tools(true).await;
    let echo = all
        .iter()
        .find(|t| t.status.as_ref().unwrap().native_name == "echo")
        .expect("echo is cached");
    assert!(!echo.usable);
    assert_eq!(echo.diagnostics[0].code, "mcp.permission_off");
    let descriptor = echo.descriptor.as_ref().unwrap();
    assert_eq!(descriptor.id, tool_id(&server, "echo"));
    let schema: serde_json::Value = serde_json::from_str(&descriptor.input_schema_json).unwrap();
    assert_eq!(schema["type"], "object");

    let echo_id = tool_id(&server, "echo");
    let r = h.call(&echo_id, r#"{"message":"hi"}"#).await;
    assert_error(&r, "mcp.permission_off", pb::ExecutionOutcome::NotSent);
    assert_eq!(result(&r).error_class, pb::ErrorClass::PolicyDenied as i32);

    h.set_permission(&server.server_id, "echo", pb::McpToolPermission::Allow)
        .await;
    let r = h.call(&echo_id, r#"{"message":"hello there"}"#).await;
    assert_eq!(outcome(&r), pb::ExecutionOutcome::Known);
    assert!(!result(&r).is_error, "{}", result(&r).content);
    assert_eq!(result(&r).content, "Echo: hello there");
    assert!(
        r.raw_result_json
            .as_deref()
            .unwrap()
            .contains("Echo: hello there")
    );
    assert!(!r.trace.is_empty());

    // Ask runs like allow, and the listing says so.
    h.set_permission(&server.server_id, "get-sum", pb::McpToolPermission::Ask)
        .await;
    let usable = h.tools(false).await;
    let sum = usable
        .iter()
        .find(|t| t.status.as_ref().unwrap().native_name == "get-sum")
        .unwrap();
    assert!(sum.usable);
    assert_eq!(sum.diagnostics[0].code, "mcp.permission_ask");
    let r = h
        .call(&tool_id(&server, "get-sum"), r#"{"a":2,"b":40}"#)
        .await;
    assert_eq!(result(&r).content, "The sum of 2 and 40 is 42.");

    // Paused: listed as unusable, calls not sent; active again: calls run.
    h.set_state(&server.server_id, pb::McpServerState::Paused)
        .await;
    let r = h.call(&echo_id, r#"{"message":"x"}"#).await;
    assert_error(&r, "mcp.server_paused", pb::ExecutionOutcome::NotSent);
    assert!(h.tools(false).await.is_empty());
    h.set_state(&server.server_id, pb::McpServerState::Active)
        .await;
    let r = h.call(&echo_id, r#"{"message":"back"}"#).await;
    assert_eq!(result(&r).content, "Echo: back");

    // A refresh re-discovers; nothing was added or removed.
    let refreshed = h
        .admin
        .refresh_server(pb::RefreshServerRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(refreshed.added_tool_ids.is_empty() && refreshed.removed_tool_ids.is_empty());

    let removed = h
        .admin
        .deregister_server(pb::DeregisterServerRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(removed.removed_tool_ids.contains(&echo_id));
    let r = h.call(&echo_id, r#"{"message":"x"}"#).await;
    assert_error(&r, "mcp.server_not_found", pb::ExecutionOutcome::NotSent);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    let http_server =
        toolplane_testkit::mcp_fixture::HttpServerProcess::server_everything().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let up = h
        .upsert(pb::UpsertServerRequest {
            display_name: "everything-http".into(),
            transport: Some(http(http_server.url())),
            default_permission: pb::McpToolPermission::Allow.into(),
            ..Default::default()
        })
        .await;
    let server = up.server.unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    assert!(server.cached_tool_count >= 5);
    let r = h
        .call(&tool_id(&server, "echo"), r#"{"message":"over http"}"#)
        .await;
    assert_eq!(outcome(&r), pb::ExecutionOutcome::Known);
    assert_eq!(result(&r).content, "Echo: over http");
    let r = h
        .call(&tool_id(&server, "get-sum"), r#"{"a":1,"b":2}"#)
        .await;
    assert_eq!(result(&r).content, "The sum of 1 and 2 is 3.");

    // The server goes away: a call that cannot connect was not sent, and says why in words.
    drop(http_server);
    let r = h
        .call(&tool_id(&server, "echo"), r#"{"message":"anyone?"}"#)
        .await;
    assert_error(&r, "mcp.connection_failed", pb::ExecutionOutcome::NotSent);
    let content = &result(&r).content;
    assert!(content.contains("Connection refused"), "{content}");
    assert!(!content.contains("rmcp::"), "{content}");

    // Registering a server nobody serves: connection failed, and the reason is in words.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/mcp", listener.local_addr().unwrap())
    };
    let up = h
        .upsert(pb::UpsertServerRequest {
            display_name: "nobody".into(),
            transport: Some(http(&closed)),
            ..Default::default()
        })
        .await;
    let nobody = up.server.unwrap();
    assert_eq!(nobody.connection, pb::McpConnectionStatus::Failed as i32);
    assert!(
        nobody.last_error.contains("Connection refused") && !nobody.last_error.contains("rmcp::"),
        "{}",
        nobody.last_error
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_time_from_pypi() {
    let cmd = toolplane_testkit::mcp_fixture::mcp_server_time_command().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let up = h
        .upsert(pb::UpsertServerRequest {
            display_name: "time".into(),
            transport: Some(stdio(
                &cmd.to_string_lossy(),
                &["--local-timezone", "UTC"],
                &[],
            )),
            default_permission: pb::McpToolPermission::Allow.into(),
            ..Default::default()
        })
        .await;
    let server = up.server.unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    let r = h
        .call(
            &tool_id(&server, "get_current_time"),
            r#"{"timezone":"Europe/Paris"}"#,
        )
        .await;
    assert_eq!(outcome(&r), pb::ExecutionOutcome::Known);
    let res = result(&r);
    assert!(!res.is_error, "{}", res.content);
    assert!(res.content.contains("Europe/Paris"), "{}", res.content);
    // A bad timezone is the tool's own error, reported as a known outcome.
    let r = h
        .call(
            &tool_id(&server, "get_current_time"),
            r#"{"timezone":"Mars/Olympus"}"#,
        )
        .await;
    assert_eq!(outcome(&r), pb::ExecutionOutcome::Known);
    assert!(result(&r).is_error);
    h.stop().await;
}
