//! MCP tools through the whole plane: a public MCP server (`@modelcontextprotocol/server-everything`)
//! and the project's fixture server registered in the mcp-proxy, seen by the catalog, bound in a
//! snapshot, called through the runtime, with large results turned into readable views and the
//! mcp-proxy's rechecks applied to an invocation whose server was paused after it opened.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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

/// Starts a runtime-driven run of `profile` on the scripted provider replaying `script`.
async fn start_scripted(
    h: &mut Harness,
    profile: &str,
    script: &Value,
    message: &str,
    mode: pb::RunMode,
    chat: &str,
) -> String {
    h.start_run(pb::RunSpec {
        profile_id: profile.into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::Scripted as i32,
            script_json: Some(script.to_string()),
            ..Default::default()
        }),
        initial_user_message: message.into(),
        mode: mode as i32,
        chat: Some(pb::ChatBinding {
            chat_id: chat.into(),
            message_id: None,
        }),
        ..Default::default()
    })
    .await
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

/// The runtime-driven counterpart: a scripted model lists, writes, reads, patches, searches, calls
/// a tool of `server-everything`, writes `persist/`, commits and finishes; then the journal (through
/// `WatchRun`), the audit files, the chat message and the promoted `persist/` are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_uses_every_kind_of_tool_and_promotes_persist() {
    let mut h = harness().await;
    let everything = toolplane_testkit::mcp_fixture::server_everything_entry().unwrap();
    register(
        &mut h,
        "everything",
        stdio("node", &[&everything.to_string_lossy(), "stdio"]),
    )
    .await;
    refresh_catalog(&h).await;
    h.put_profile(writer_profile()).await;
    let call = |name: &str, args: Value| json!({"function": {"name": name, "arguments": args}});
    let script = json!({"turns": [
        {"tool_calls": [call("workspace_list_files", json!({}))]},
        {"tool_calls": [call("workspace_write_file", json!({"path": "output/main.md", "content": "# Answer\necho said: ?\n"})), call("workspace_write_file", json!({"path": "persist/memory.md", "content": "remember the echo\n"}))]},
        {"tool_calls": [call("workspace_read_file", json!({"path": "output/main.md"})), call("mcp__everything__echo", json!({"message": "ping"}))]},
        {"tool_calls": [call("workspace_apply_patch", json!({"path": "output/main.md", "old_string": "echo said: ?", "new_string": "echo said: ping"})), call("workspace_search_files", json!({"query": "ping"}))]},
        // A terminal tool that is not last in its turn is refused, the rest of the turn runs.
        {"tool_calls": [call("workspace_finish", json!({})), call("workspace_commit", json!({}))]},
        {"tool_calls": [call("workspace_finish", json!({"summary": "answered"}))]}
    ]});
    let run = start_scripted(
        &mut h,
        "writer",
        &script,
        "Ask the echo tool and write down the answer.",
        pb::RunMode::Foreground,
        "chat-scripted",
    )
    .await;
    // Follow the run as it happens.
    let mut stream = h
        .runtime
        .watch_run(pb::WatchRunRequest {
            run_id: run.clone(),
            from_seq: 1,
            history_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(item) =
        tokio::time::timeout(std::time::Duration::from_secs(30), stream.message())
            .await
            .unwrap()
            .unwrap()
    {
        let e = item.event.unwrap();
        let end = matches!(
            e.r#type.as_str(),
            "run_completed" | "run_failed" | "run_partial_success"
        );
        seen.push(e);
        if end {
            break;
        }
    }
    assert_eq!(
        seen.last().unwrap().r#type,
        "run_completed",
        "{:?}",
        types(&seen)
    );
    assert!(seen.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    // The status turns terminal right after the journal records the end.
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.status, pb::RunStatus::Completed as i32);

    let calls: Vec<Value> = seen
        .iter()
        .filter(|e| e.r#type == "tool_call_completed" || e.r#type == "tool_call_failed")
        .map(payload)
        .collect();
    let echo = calls
        .iter()
        .find(|c| c["alias"] == "mcp__everything__echo")
        .unwrap();
    assert_eq!(echo["isError"], false);
    let result: Value = serde_json::from_slice(
        &h.object(&run, echo["resultPath"].as_str().unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(
        result["result"]["content"]
            .as_str()
            .unwrap()
            .contains("ping")
    );
    assert!(
        result["raw"].is_object(),
        "the full MCP result is kept for audit"
    );
    let refused = calls
        .iter()
        .find(|c| c["errorCode"] == "agent.tool_after_finish")
        .unwrap();
    assert_eq!(refused["alias"], "workspace_finish");
    assert_eq!(
        h.chat("chat-scripted").await.last().unwrap().content,
        "# Answer\necho said: ping\n"
    );
    assert!(types(&seen).contains(&"persistent_changes_committed".to_owned()));
    let promoted = seen
        .iter()
        .find(|e| e.r#type == "persistent_changes_committed")
        .map(payload)
        .unwrap();
    assert!(
        promoted["changedPaths"].to_string().contains("memory.md"),
        "{promoted}"
    );
    // The next run of the chat sees what this one persisted.
    let next = h
        .runtime
        .create_run(pb::CreateRunRequest {
            chat: Some(pb::ChatBinding {
                chat_id: "chat-scripted".into(),
                message_id: None,
            }),
            profile_id: "writer".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_eq!(
        h.object(&next.run_id, "persist/memory.md").await.unwrap(),
        b"remember the echo\n"
    );
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_host_that_is_down_gives_a_recoverable_result() {
    let mut h = harness().await;
    h.put_profile(json!({"id": "ext-user", "tools": {"allow": ["builtin:dice.roll"]}}))
        .await;
    // A per-run tool whose host does not listen.
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let run = h
        .runtime
        .create_run(pb::CreateRunRequest {
            profile_id: "ext-user".into(),
            mode: pb::RunMode::Background as i32,
            tools: vec![pb::RunToolHost {
                host_id: "crm".into(),
                endpoint: Some(pb::ExecutorEndpoint {
                    url: format!("http://127.0.0.1:{port}"),
                    ..Default::default()
                }),
                tools: vec![pb::ToolRegistration {
                    descriptor: Some(pb::ToolDescriptor {
                        id: "ext/crm:lookup".into(),
                        description: "Look a customer up.".into(),
                        input_schema_json: "{\"type\":\"object\"}".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;
    let inv = h.open(&run, OPENAI).await;
    let r = h
        .execute(
            &inv.invocation_id,
            &inv.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[("k1", "ext__crm__lookup", json!({"id": 7}))]),
        )
        .await
        .unwrap();
    assert!(r.results[0].is_error);
    assert_eq!(
        r.results[0].error_code.as_deref(),
        Some("tool.executor_unavailable")
    );
    assert_eq!(
        r.state,
        pb::InvocationState::Open as i32,
        "the model can go on"
    );
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_stops_its_mcp_call_and_journals_it_before_the_run_ends() {
    let mut h = harness().await;
    let cancel_log = tempfile::NamedTempFile::new().unwrap();
    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let mut transport = stdio(&fixture.to_string_lossy(), &[]);
    if let Some(pb::mcp_transport::Kind::Stdio(s)) = transport.kind.as_mut() {
        s.env.insert(
            toolplane_testkit::mcp_fixture::env::CANCEL_LOG.into(),
            cancel_log.path().to_string_lossy().into_owned(),
        );
    }
    register(&mut h, "fixture", transport).await;
    refresh_catalog(&h).await;
    h.put_profile(
        json!({"id": "slow", "tools": {"allow": ["builtin:workspace.*", "mcp:fixture/slow"]}}),
    )
    .await;
    // A call that would take 20 s, then a finish that must never run.
    let call = |name: &str, args: Value| json!({"function": {"name": name, "arguments": args}});
    let script = json!({"turns": [
        {"tool_calls": [call("mcp__fixture__slow", json!({"ms": 20000})), call("workspace_finish", json!({}))]}
    ]});
    let run = start_scripted(
        &mut h,
        "slow",
        &script,
        "Wait for the slow tool.",
        pb::RunMode::Background,
        "chat-cancel",
    )
    .await;
    // The model has answered: the slow call is being made.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !types(&h.journal(&run).await).contains(&"model_completed".to_owned()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the model never answered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let began = std::time::Instant::now();
    let cancelled = h.cancel(&run, "user pressed stop").await;
    assert_eq!(cancelled.status, pb::RunStatus::Cancelled as i32);
    assert!(
        began.elapsed() < std::time::Duration::from_secs(5),
        "the cancel waited for the tool: {:?}",
        began.elapsed()
    );

    // Both calls are in the journal, before the run's end: the slow one cancelled (it was sent,
    // so its outcome is unknown), the finish after it never sent.
    let journal = h.journal(&run).await;
    let kinds = types(&journal);
    let failed: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_failed")
        .map(payload)
        .collect();
    assert_eq!(failed.len(), 2, "{kinds:?}");
    assert_eq!(failed[0]["errorCode"], "tool.cancelled");
    assert_eq!(failed[0]["outcome"], "unknown");
    assert_eq!(failed[1]["errorCode"], "tool.cancelled");
    assert_eq!(failed[1]["outcome"], "not_sent");
    let last_call = kinds.iter().rposition(|k| k == "tool_call_failed").unwrap();
    let end = kinds.iter().position(|k| k == "run_cancelled").unwrap();
    assert!(last_call < end, "{kinds:?}");
    assert!(!kinds.contains(&"run_completed".to_owned()), "{kinds:?}");
    // Its audit objects are stored.
    let result_path = failed[0]["resultPath"].as_str().unwrap();
    let result: Value =
        serde_json::from_slice(&h.object(&run, result_path).await.unwrap()).unwrap();
    assert_eq!(result["result"]["errorCode"], "tool.cancelled");

    // The MCP server was told to stop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(cancel_log.path())
        .unwrap_or_default()
        .contains("cancelled slow")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never saw the cancel"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_host_driven_run_answers_its_call_in_flight_and_refuses_new_ones() {
    let mut h = harness().await;
    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    register(&mut h, "fixture", stdio(&fixture.to_string_lossy(), &[])).await;
    refresh_catalog(&h).await;
    h.put_profile(
        json!({"id": "slow", "tools": {"allow": ["builtin:workspace.*", "mcp:fixture/slow"]}}),
    )
    .await;
    let run = h.create_run("slow", false).await;
    let inv = h.open(&run, OPENAI).await;
    let id = inv.invocation_id.clone();
    let turn = inv.first_turn.unwrap().turn_id;

    // The host's turn: a 20 s call, then a finish that must not run.
    let mut host = h.runtime.clone();
    let calls = openai_calls(&[
        ("c1", "mcp__fixture__slow", json!({"ms": 20000})),
        ("c2", "workspace_finish", json!({})),
    ]);
    let (in_flight_id, in_flight_turn) = (id.clone(), turn.clone());
    let in_flight = tokio::spawn(async move {
        host.execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: in_flight_id,
            turn_id: in_flight_turn,
            provider_format: OPENAI as i32,
            calls_json: calls.to_string(),
            ..Default::default()
        })
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let began = std::time::Instant::now();
    let cancelled = h.cancel(&run, "host stopped").await;
    assert_eq!(cancelled.status, pb::RunStatus::Cancelled as i32);
    assert!(began.elapsed() < std::time::Duration::from_secs(5));

    // The host's request is answered: the slow call cancelled, the finish not sent.
    let answered = in_flight.await.unwrap().unwrap().into_inner();
    let codes: Vec<&str> = answered
        .results
        .iter()
        .map(|r| r.error_code.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(codes, ["tool.cancelled", "tool.cancelled"], "{answered:?}");
    // A new turn on the cancelled run is refused.
    let again = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[("c3", "workspace_list_files", json!({}))]),
        )
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");
    let kinds = types(&h.journal(&run).await);
    assert!(!kinds.contains(&"run_completed".to_owned()), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "tool_call_failed").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_cancelled"),
        "{kinds:?}"
    );
    h.plane.shutdown().await;
}
