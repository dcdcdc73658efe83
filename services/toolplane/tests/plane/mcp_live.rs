//! A live MCP catalog through the whole plane: a server on the official TypeScript SDK adds a
//! tool while a run uses it and announces it with `notifications/tools/list_changed`. Without
//! any refresh by an operator, the mcp-proxy rediscovers it, the catalog pulls it, and a new
//! invocation is offered the tool with a snapshot naming the newer catalog version; the
//! invocation that was already open keeps its frozen snapshot and cannot call the new tool, and
//! its run's journal tells it so once (`mcp_catalog_changed`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;

fn names(inv: &pb::OpenInvocationResponse) -> Vec<String> {
    let tools: Value = serde_json::from_str(&inv.tools_json).unwrap();
    tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The catalog version of `server` that the run's first snapshot was compiled from, as its
/// journal's `context_assembled` event records it.
async fn journalled_version(h: &mut Harness, run: &str, server: &str) -> u64 {
    let journal = h.journal(run).await;
    let assembled = journal
        .iter()
        .find(|e| e.r#type == "context_assembled")
        .expect("context_assembled is journalled");
    let payload = payload(assembled);
    payload["snapshot"]["mcpCatalogs"][server]
        .as_u64()
        .unwrap_or_else(|| panic!("no catalog version for {server} in {payload}"))
}

/// Registers the live-tools server (starting with `alpha`) and a profile `live-user` allowed all
/// its tools; the catalog lists them. The temporary directory holds the server's tool file.
async fn live_server(h: &mut Harness) -> (pb::McpServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tools_file = dir.path().join("tools.txt");
    std::fs::write(&tools_file, "alpha\n").unwrap();
    let script = toolplane_testkit::mcp_fixture::live_tools_server_script().unwrap();
    let server = h
        .mcp
        .upsert_server(pb::UpsertServerRequest {
            display_name: "live".into(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                    command: "node".into(),
                    args: vec![script.to_string_lossy().into_owned()],
                    env: [(
                        "LIVE_TOOLS_FILE".to_owned(),
                        tools_file.to_string_lossy().into_owned(),
                    )]
                    .into(),
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
        .unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    let mut catalog = CatalogServiceClient::new(channel(&h.plane.catalog_url()).await);
    catalog
        .refresh_sources(pb::RefreshSourcesRequest {
            cell_id: String::new(),
        })
        .await
        .unwrap();
    h.put_profile(json!({"id": "live-user", "tools": {"allow": ["mcp:live"]}}))
        .await;
    (server, dir)
}

/// Waits until the catalog lists `tool_id` (the proxy follows the server, the catalog follows the
/// proxy within its refresh interval; nobody refreshes anything).
async fn until_listed(h: &Harness, tool_id: &str) {
    let mut catalog = CatalogServiceClient::new(channel(&h.plane.catalog_url()).await);
    for _ in 0..150 {
        let tools = catalog
            .list_tools(pb::ListToolsRequest {
                query: tool_id.rsplit(':').next().unwrap_or(tool_id).into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .tools;
        if tools
            .iter()
            .any(|t| t.descriptor.as_ref().is_some_and(|d| d.id == tool_id))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the catalog never listed {tool_id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_added_mid_run_reaches_new_invocations_only() {
    let mut h = harness().await;
    let (server, _dir) = live_server(&mut h).await;

    // The first run's invocation freezes the list as it is: no gamma.
    let first_run = h.create_run("live-user", true).await;
    let first = h.open(&first_run, OPENAI).await;
    assert!(
        names(&first).contains(&"mcp__live__alpha".to_owned()),
        "{:?}",
        names(&first)
    );
    assert!(!names(&first).contains(&"mcp__live__gamma".to_owned()));
    let before = journalled_version(&mut h, &first_run, &server.server_id).await;

    // The server adds a tool mid-run and announces it.
    let r = h
        .execute(
            &first.invocation_id,
            &first.first_turn.clone().unwrap().turn_id,
            OPENAI,
            openai_calls(&[("c1", "mcp__live__add_tool", json!({"name": "gamma"}))]),
        )
        .await
        .unwrap();
    assert!(!r.results[0].is_error, "{:?}", r.results[0]);
    let turn = r.next_turn.unwrap().turn_id;

    // No RefreshServer, no RefreshSources: the proxy follows the server, the catalog follows the
    // proxy within its refresh interval.
    let gamma_id = format!("mcp/{}:gamma", server.server_id);
    until_listed(&h, &gamma_id).await;

    // A new invocation is offered the tool, and its snapshot names the newer catalog version.
    let second_run = h.create_run("live-user", true).await;
    let second = h.open(&second_run, OPENAI).await;
    assert!(
        names(&second).contains(&"mcp__live__gamma".to_owned()),
        "{:?}",
        names(&second)
    );
    let after = journalled_version(&mut h, &second_run, &server.server_id).await;
    assert!(after > before, "catalog version {after} after {before}");
    let r = h
        .execute(
            &second.invocation_id,
            &second.first_turn.clone().unwrap().turn_id,
            OPENAI,
            openai_calls(&[("c2", "mcp__live__gamma", json!({}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.results[0].content, "gamma: ok", "{:?}", r.results[0]);

    // The invocation opened before keeps its frozen snapshot: the new tool is not in it.
    let refused = h
        .execute(
            &first.invocation_id,
            &turn,
            OPENAI,
            openai_calls(&[("c3", "mcp__live__gamma", json!({}))]),
        )
        .await;
    let why = match refused {
        Err(status) => status.message().to_owned(),
        Ok(r) => {
            assert!(r.results.iter().all(|x| x.is_error), "{r:?}");
            r.results.iter().map(|x| format!("{x:?}")).collect()
        }
    };
    assert!(why.contains("unknown_tool_alias"), "{why}");
}

/// The `mcp_catalog_changed` records of a run's journal, as JSON payloads.
async fn catalog_changes(h: &mut Harness, run: &str) -> Vec<Value> {
    h.journal(run)
        .await
        .iter()
        .filter(|e| e.r#type == "mcp_catalog_changed")
        .map(payload)
        .collect()
}

/// The running invocation is told, once, in its run's journal, that the server's list changed:
/// old and new versions, the tool added, and that it keeps its snapshot while the next
/// invocation gets the new list. It keeps calling the tools it has. A second change is told once
/// more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_invocation_is_told_once_that_its_server_changed() {
    let mut h = harness().await;
    let (server, _dir) = live_server(&mut h).await;
    let run = h.create_run("live-user", true).await;
    let inv = h.open(&run, OPENAI).await;
    let before = journalled_version(&mut h, &run, &server.server_id).await;

    let r = h
        .execute(
            &inv.invocation_id,
            &inv.first_turn.clone().unwrap().turn_id,
            OPENAI,
            openai_calls(&[("c1", "mcp__live__add_tool", json!({"name": "gamma"}))]),
        )
        .await
        .unwrap();
    assert!(!r.results[0].is_error, "{:?}", r.results[0]);
    let mut turn = r.next_turn.unwrap().turn_id;
    let gamma_id = format!("mcp/{}:gamma", server.server_id);
    until_listed(&h, &gamma_id).await;

    // The next two turns run on the frozen snapshot; the first of them notices the change.
    for call in ["c2", "c3"] {
        let r = h
            .execute(
                &inv.invocation_id,
                &turn,
                OPENAI,
                openai_calls(&[(call, "mcp__live__alpha", json!({}))]),
            )
            .await
            .unwrap();
        assert_eq!(r.results[0].content, "alpha: ok", "{:?}", r.results[0]);
        turn = r.next_turn.unwrap().turn_id;
    }

    let changes = catalog_changes(&mut h, &run).await;
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = &changes[0];
    assert_eq!(change["invocationId"], inv.invocation_id.as_str());
    assert_eq!(change["serverId"], server.server_id.as_str());
    assert_eq!(change["serverName"], "live");
    assert_eq!(change["snapshotVersion"], before);
    assert_eq!(change["previousVersion"], before);
    assert!(change["version"].as_u64().unwrap() > before, "{change}");
    assert_eq!(change["added"], json!([gamma_id]));
    assert_eq!(change["removed"], json!([]));
    let detail = change["detail"].as_str().unwrap();
    assert!(detail.contains("keeps its snapshot"), "{detail}");

    // A later change is told again, from the version told before; what the profile gains is
    // still counted from the snapshot.
    let r = h
        .execute(
            &inv.invocation_id,
            &turn,
            OPENAI,
            openai_calls(&[("c4", "mcp__live__add_tool", json!({"name": "delta"}))]),
        )
        .await
        .unwrap();
    assert!(!r.results[0].is_error, "{:?}", r.results[0]);
    turn = r.next_turn.unwrap().turn_id;
    let delta_id = format!("mcp/{}:delta", server.server_id);
    until_listed(&h, &delta_id).await;
    let r = h
        .execute(
            &inv.invocation_id,
            &turn,
            OPENAI,
            openai_calls(&[("c5", "mcp__live__alpha", json!({}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.results[0].content, "alpha: ok", "{:?}", r.results[0]);
    let changes = catalog_changes(&mut h, &run).await;
    assert_eq!(changes.len(), 2, "{changes:?}");
    let later = &changes[1];
    assert_eq!(later["snapshotVersion"], before);
    assert_eq!(later["previousVersion"], change["version"]);
    assert!(
        later["version"].as_u64() > change["version"].as_u64(),
        "{later}"
    );
    let mut added: Vec<String> = later["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    added.sort();
    let mut expected = vec![delta_id, gamma_id];
    expected.sort();
    assert_eq!(added, expected);
}
