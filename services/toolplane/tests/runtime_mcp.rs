//! MCP tools through the whole plane: a public MCP server (`@modelcontextprotocol/server-everything`)
//! and the project's fixture server registered in the mcp-proxy, seen by the catalog, bound in a
//! snapshot, called through the runtime, with large results turned into readable views and the
//! mcp-proxy's rechecks applied to an invocation whose server was paused after it opened.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;

fn stdio(command: &str, args: &[&str]) -> pb::McpTransport {
    pb::McpTransport {
        kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
            command: command.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        })),
    }
}

async fn register(h: &mut Harness, name: &str, transport: pb::McpTransport) -> String {
    let up = h
        .mcp
        .upsert_server(pb::UpsertServerRequest {
            display_name: name.into(),
            transport: Some(transport),
            default_permission: pb::McpToolPermission::Allow as i32,
            ..Default::default()
        })
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
    server.server_id
}

async fn refresh_catalog(h: &Harness) {
    let mut catalog = CatalogServiceClient::new(channel(&h.plane.catalog_url()).await);
    catalog
        .refresh_sources(pb::RefreshSourcesRequest {
            cell_id: String::new(),
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_run_through_the_plane_with_views_for_large_results_and_rechecks() {
    let mut h = harness().await;
    let everything = toolplane_testkit::mcp_fixture::server_everything_entry().unwrap();
    register(
        &mut h,
        "everything",
        stdio("node", &[&everything.to_string_lossy(), "stdio"]),
    )
    .await;
    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let fixture_id = register(&mut h, "fixture", stdio(&fixture.to_string_lossy(), &[])).await;
    refresh_catalog(&h).await;
    h.put_profile(json!({
        "id": "mcp-user",
        "tools": {
            "allow": ["builtin:workspace.read_file", "builtin:workspace.search_files", "mcp:everything/echo", "mcp:fixture/huge", "mcp:fixture/slow"],
            "mcpResultInlineCharLimit": 1000
        }
    }))
    .await;

    let run = h.create_run("mcp-user", true).await;
    let inv = h.open(&run, OPENAI).await;
    let tools: Value = serde_json::from_str(&inv.tools_json).unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"mcp__everything__echo") && names.contains(&"mcp__fixture__huge"),
        "{names:?}"
    );
    let id = inv.invocation_id.clone();
    let turn = inv.first_turn.unwrap().turn_id;

    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "e1",
                    "mcp__everything__echo",
                    json!({"message": "hello from the plane"}),
                ),
                ("e2", "mcp__fixture__huge", json!({"bytes": 5000})),
            ]),
        )
        .await
        .unwrap();
    assert!(
        !r.results[0].is_error && r.results[0].content.contains("hello from the plane"),
        "{:?}",
        r.results[0]
    );
    // The large result: a preview, the view's path and the real alias to read it with.
    let big = &r.results[1];
    assert!(!big.is_error, "{big:?}");
    let view = r.calls[1].readable_view_path.clone();
    assert!(
        view.starts_with(&format!("tool-results/{id}/call_")) && view.ends_with(".txt"),
        "{view}"
    );
    assert!(
        big.content.contains(&view)
            && big.content.contains("workspace_read_file")
            && big.content.contains("5000"),
        "{}",
        big.content
    );
    assert!(big.content.chars().count() < 3_400, "preview only");
    let full = h.object(&run, &view).await.unwrap();
    assert_eq!(
        String::from_utf8(full).unwrap().matches('x').count(),
        5000,
        "the view keeps the whole result"
    );
    let turn = r.next_turn.unwrap().turn_id;
    // The model can read the view with its workspace tools.
    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[(
                "e3",
                "workspace_read_file",
                json!({"path": view, "line_count": 1}),
            )]),
        )
        .await
        .unwrap();
    assert!(!r.results[0].is_error, "{:?}", r.results[0]);
    let turn = r.next_turn.unwrap().turn_id;

    // Pausing the server after the snapshot was compiled: the mcp-proxy's recheck refuses the call
    // before sending, and the model gets a recoverable result.
    h.mcp
        .set_server_state(pb::SetServerStateRequest {
            server_id: fixture_id.clone(),
            state: pb::McpServerState::Paused as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[("e4", "mcp__fixture__slow", json!({"ms": 1}))]),
        )
        .await
        .unwrap();
    assert!(r.results[0].is_error, "{:?}", r.results[0]);
    assert_eq!(r.calls[0].outcome, pb::ExecutionOutcome::NotSent as i32);
    let journal = h.journal(&run).await;
    assert!(types(&journal).contains(&"tool_result_readable_view_stored".to_owned()));

    // A new invocation does not bind the paused server's tools, and says why.
    refresh_catalog(&h).await;
    let run2 = h.create_run("mcp-user", true).await;
    let inv2 = h.open(&run2, OPENAI).await;
    let omitted: Vec<(String, String)> = inv2
        .omitted
        .iter()
        .map(|o| {
            (
                o.tool_id.clone(),
                o.diagnostic.as_ref().unwrap().code.clone(),
            )
        })
        .collect();
    assert!(
        omitted
            .iter()
            .any(|(t, c)| t.ends_with(":huge") && c == "snapshot.server_paused"),
        "{omitted:?}"
    );
    let journal = h.journal(&run2).await;
    let omitted_events: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "tool_omitted")
        .map(payload)
        .collect();
    assert!(
        omitted_events
            .iter()
            .any(|e| e["reason"] == "server_paused"),
        "{omitted_events:?}"
    );
    h.plane.shutdown().await;
}
