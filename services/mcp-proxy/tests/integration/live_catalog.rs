//! Live catalogs against servers toolplane did not write: a server on the official TypeScript
//! SDK whose tool list changes while it runs (it announces the change with
//! `notifications/tools/list_changed`) and after a restart, picked up without `RefreshServer`;
//! and `server-everything`'s `simulate-research-query`, which runs only as an MCP task, listed
//! unusable with its reason instead of usable and failing, over stdio and streamable HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::*;
use toolplane_proto::v1 as pb;

fn live_server(tools_file: &Path, start_log: &Path) -> pb::UpsertServerRequest {
    let script = toolplane_testkit::mcp_fixture::live_tools_server_script().unwrap();
    pb::UpsertServerRequest {
        display_name: "live".into(),
        transport: Some(stdio(
            "node",
            &[&script.to_string_lossy()],
            &[
                ("LIVE_TOOLS_FILE", &tools_file.to_string_lossy()),
                ("LIVE_START_LOG", &start_log.to_string_lossy()),
            ],
        )),
        default_permission: pb::McpToolPermission::Allow as i32,
        ..Default::default()
    }
}

async fn names(h: &mut Harness) -> Vec<String> {
    h.tools(true)
        .await
        .into_iter()
        .map(|t| t.status.unwrap().native_name)
        .collect()
}

async fn server(h: &mut Harness, id: &str) -> pb::McpServer {
    h.admin
        .get_server(pb::GetServerRequest {
            cell_id: String::new(),
            server_id: id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap()
}

/// Polls the cached tool names until `want` holds, for up to 20 s.
async fn wait_for_names(h: &mut Harness, what: &str, want: impl Fn(&[String]) -> bool) {
    for _ in 0..200 {
        if want(&names(h).await) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{what}: the cached tools stayed {:?}", names(h).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_list_is_rediscovered_on_list_changed_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let tools_file = dir.path().join("tools.txt");
    let start_log = dir.path().join("starts.log");
    std::fs::write(&tools_file, "alpha\n").unwrap();
    let mut h = Harness::start(&dir.path().join("store")).await;
    let up = h.upsert(live_server(&tools_file, &start_log)).await;
    let srv = up.server.unwrap();
    assert_eq!(
        srv.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        srv.last_error
    );
    assert_eq!(names(&mut h).await, ["add_tool", "alpha"]);
    let first = server(&mut h, &srv.server_id).await.catalog_version;
    assert!(first >= 1, "a discovered catalog has a version");
    let gamma = tool_id(&srv, "gamma");
    let r = h.call(&gamma, "{}").await;
    assert_error(&r, "mcp.tool_not_found", pb::ExecutionOutcome::NotSent);

    // The server adds a tool and says so: the cache follows, with the next version.
    let r = h
        .call(&tool_id(&srv, "add_tool"), r#"{"name":"gamma"}"#)
        .await;
    assert!(!result(&r).is_error, "{}", result(&r).content);
    wait_for_names(&mut h, "after list_changed", |n| {
        n.contains(&"gamma".to_owned())
    })
    .await;
    let tools = h.tools(true).await;
    let listed = tools
        .iter()
        .find(|t| t.status.as_ref().unwrap().native_name == "gamma")
        .unwrap();
    assert!(listed.usable);
    assert_eq!(
        listed.status.as_ref().unwrap().catalog_version,
        first + 1,
        "one change, one new version"
    );
    assert_eq!(
        server(&mut h, &srv.server_id).await.catalog_version,
        first + 1
    );
    let r = h.call(&gamma, "{}").await;
    assert_eq!(result(&r).content, "gamma: ok");

    // The server restarts with another list (its process killed; the supervisor reconnects):
    // the new list is discovered without RefreshServer.
    std::fs::write(&tools_file, "alpha\ndelta\n").unwrap();
    let pid = *started_pids(&start_log).last().unwrap();
    rustix_kill(pid);
    wait_for_names(&mut h, "after the restart", |n| {
        n == ["add_tool", "alpha", "delta"]
    })
    .await;
    assert_eq!(started_pids(&start_log).len(), 2, "one restart");
    assert_eq!(
        server(&mut h, &srv.server_id).await.catalog_version,
        first + 2
    );
    let r = h.call(&tool_id(&srv, "delta"), "{}").await;
    assert_eq!(result(&r).content, "delta: ok");
    let r = h.call(&gamma, "{}").await;
    assert_error(&r, "mcp.tool_not_found", pb::ExecutionOutcome::NotSent);

    // Restarting with the same list keeps the version: only a change makes a new one.
    let pid = *started_pids(&start_log).last().unwrap();
    rustix_kill(pid);
    eventually(20, "a third start", || started_pids(&start_log).len() == 3).await;
    eventually(20, "the reconnected server", || {
        h.proxy
            .get_server("", &srv.server_id)
            .is_ok_and(|v| v.connection == toolplane_mcp_proxy::proxy::ConnStatus::Connected)
    })
    .await;
    // Give the rediscovery of the new connection time to finish, then compare.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(names(&mut h).await, ["add_tool", "alpha", "delta"]);
    assert_eq!(
        server(&mut h, &srv.server_id).await.catalog_version,
        first + 2
    );
    h.stop().await;
}

fn rustix_kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_runs_only_as_a_task_is_listed_unusable_with_its_reason() {
    let entry = toolplane_testkit::mcp_fixture::server_everything_entry().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let transport = stdio("node", &[&entry.to_string_lossy(), "stdio"], &[]);
    assert_the_task_only_tool_is_unusable(&mut h, transport).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_only_tool_of_a_streamable_http_server_is_listed_unusable_too() {
    let server = toolplane_testkit::mcp_fixture::HttpServerProcess::server_everything().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    assert_the_task_only_tool_is_unusable(&mut h, http(server.url())).await;
    h.stop().await;
}

/// Registers server-everything over `transport` and checks that `simulate-research-query`
/// (which runs only as an MCP task) is listed unusable with its reason and refused unsent, while
/// its neighbours stay usable.
async fn assert_the_task_only_tool_is_unusable(h: &mut Harness, transport: pb::McpTransport) {
    let up = h
        .upsert(pb::UpsertServerRequest {
            display_name: "everything".into(),
            transport: Some(transport),
            default_permission: pb::McpToolPermission::Allow as i32,
            ..Default::default()
        })
        .await;
    let srv = up.server.unwrap();
    assert_eq!(
        srv.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        srv.last_error
    );
    let tools = h.tools(true).await;
    let research = tools
        .iter()
        .find(|t| t.status.as_ref().unwrap().native_name == "simulate-research-query")
        .expect("simulate-research-query is cached");
    assert!(!research.usable);
    assert_eq!(research.diagnostics[0].code, "mcp.task_required");
    // Its neighbours that may run without a task stay usable.
    let echo = tools
        .iter()
        .find(|t| t.status.as_ref().unwrap().native_name == "echo")
        .unwrap();
    assert!(echo.usable, "{:?}", echo.diagnostics);
    assert!(
        !h.tools(false)
            .await
            .iter()
            .any(|t| t.status.as_ref().unwrap().native_name == "simulate-research-query"),
        "not among the usable tools"
    );

    // A call is refused before it is sent, with the reason — never sent and failing -32601.
    let r = h
        .call(
            &tool_id(&srv, "simulate-research-query"),
            r#"{"topic":"tides"}"#,
        )
        .await;
    assert_error(&r, "mcp.task_required", pb::ExecutionOutcome::NotSent);
    // The usable neighbour still answers over the same session.
    let r = h.call(&tool_id(&srv, "echo"), r#"{"message":"hi"}"#).await;
    assert_eq!(result(&r).content, "Echo: hi");
}
