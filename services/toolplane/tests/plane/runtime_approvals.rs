//! Approvals over the wire: an MCP tool with permission ASK on the project's fixture server,
//! held by a host-driven `ExecuteToolCalls`, listed with its card by `ListApprovals`, approved
//! by `DecideApproval` (a second decision refused with its code), and collected with
//! `CollectToolResults` — the fixture's answer reaching the host, the call journalled once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_tool_is_held_listed_approved_once_and_collected_over_grpc() {
    let mut h = harness().await;
    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    h.mcp
        .upsert_server(pb::UpsertServerRequest {
            display_name: "fixture".into(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                    command: fixture.to_string_lossy().into_owned(),
                    ..Default::default()
                })),
            }),
            default_permission: pb::McpToolPermission::Ask as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    toolplane_proto::v1::catalog_service_client::CatalogServiceClient::new(
        channel(&h.plane.catalog_url()).await,
    )
    .refresh_sources(pb::RefreshSourcesRequest {
        cell_id: String::new(),
    })
    .await
    .unwrap();
    h.put_profile(
        json!({"id": "asker", "tools": {"allow": ["mcp:fixture/echo", "builtin:dice.roll"]}}),
    )
    .await;
    let run = h.create_run("asker", true).await;
    let inv = h.open(&run, OPENAI).await;
    let turn = inv.first_turn.clone().unwrap().turn_id;
    let first = h
        .execute(
            &inv.invocation_id,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "c1",
                    "mcp__fixture__echo",
                    json!({"text": "hello from a held call"}),
                ),
                ("c2", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 1, "{first:?}");
    assert_eq!(first.awaiting[0].call_id, "c1");
    assert_eq!(first.results.len(), 1, "the dice call ran at once");
    assert_eq!(first.result_messages_json, "[]");
    assert!(first.next_turn.is_none());
    let journal = h.journal(&run).await;
    let started = |j: &[pb::JournalEvent]| {
        j.iter()
            .filter(|e| e.r#type == "tool_call_started" && payload(e)["callId"] == "c1")
            .count()
    };
    assert_eq!(started(&journal), 0, "not sent before approval");

    let listed = h
        .runtime
        .list_approvals(pb::ListApprovalsRequest {
            run_id: run.clone(),
            state: pb::ApprovalState::Pending as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .approvals;
    assert_eq!(listed.len(), 1);
    let card = listed[0].card.clone().unwrap();
    assert_eq!(card.rule, "MCP permission ask");
    assert_eq!(card.tool_source, "mcp:fixture");
    let args: Value = serde_json::from_str(&card.arguments_summary_json).unwrap();
    assert_eq!(args["text"], "hello from a held call");

    let id = listed[0].approval_id.clone();
    let approved = h
        .runtime
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: id.clone(),
            approve: true,
            reason: "fine".into(),
            remember_for_run: false,
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    let twice = h
        .runtime
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: id,
            approve: false,
            reason: "late".into(),
            remember_for_run: false,
        })
        .await
        .unwrap_err();
    assert_eq!(twice.code(), tonic::Code::FailedPrecondition);
    assert!(
        twice.message().starts_with("runtime.approval_decided: "),
        "{}",
        twice.message()
    );

    let done = h
        .runtime
        .collect_tool_results(pb::CollectToolResultsRequest {
            invocation_id: inv.invocation_id.clone(),
            turn_id: turn,
            wait_ms: 5_000,
            epoch: None,
        })
        .await
        .unwrap()
        .into_inner()
        .response
        .unwrap();
    assert!(done.awaiting.is_empty());
    assert!(done.next_turn.is_some());
    let messages: Vec<Value> = serde_json::from_str(&done.result_messages_json).unwrap();
    assert_eq!(messages.len(), 2, "every call of the turn");
    assert_eq!(messages[0]["tool_call_id"], "c1");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("hello from a held call"),
        "{messages:?}"
    );
    let journal = h.journal(&run).await;
    assert_eq!(started(&journal), 1, "run exactly once");
    let kinds = types(&journal);
    for kind in ["tool_call_awaiting_approval", "tool_call_approved"] {
        assert!(kinds.contains(&kind.to_owned()), "{kinds:?}");
    }
}

/// Registers the fixture MCP server with permission ASK (every call held), its calls appended to
/// `call_log`, and refreshes the catalog; a profile `asker` may call its `echo`.
async fn ask_fixture(h: &mut Harness, call_log: &std::path::Path) {
    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let mut stdio = pb::McpStdioTransport {
        command: fixture.to_string_lossy().into_owned(),
        ..Default::default()
    };
    stdio.env.insert(
        toolplane_testkit::mcp_fixture::env::CALL_LOG.into(),
        call_log.to_string_lossy().into_owned(),
    );
    h.mcp
        .upsert_server(pb::UpsertServerRequest {
            display_name: "fixture".into(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(stdio)),
            }),
            default_permission: pb::McpToolPermission::Ask as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    toolplane_proto::v1::catalog_service_client::CatalogServiceClient::new(
        channel(&h.plane.catalog_url()).await,
    )
    .refresh_sources(pb::RefreshSourcesRequest {
        cell_id: String::new(),
    })
    .await
    .unwrap();
    h.put_profile(
        json!({"id": "asker", "tools": {"allow": ["mcp:fixture/echo", "builtin:dice.roll"]}}),
    )
    .await;
}

/// The `echo` calls the fixture received.
fn echo_calls(call_log: &std::path::Path) -> usize {
    std::fs::read_to_string(call_log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("called echo "))
        .count()
}

/// A host-driven run whose turn holds `c1` (fixture echo) next to a dice call that ran at once;
/// returns the run, the invocation and the held turn's id.
async fn hold_an_echo(h: &mut Harness) -> (String, String, String) {
    let run = h.create_run("asker", true).await;
    let inv = h.open(&run, OPENAI).await;
    let turn = inv.first_turn.clone().unwrap().turn_id;
    let first = h
        .execute(
            &inv.invocation_id,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "c1",
                    "mcp__fixture__echo",
                    json!({"text": "held across a restart"}),
                ),
                ("c2", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 1, "{first:?}");
    (run, inv.invocation_id, turn)
}

async fn pending_of(h: &mut Harness, run: &str) -> Vec<pb::Approval> {
    h.runtime
        .list_approvals(pb::ListApprovalsRequest {
            run_id: run.into(),
            state: pb::ApprovalState::Pending as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .approvals
}

async fn decide(h: &mut Harness, id: &str, approve: bool) -> pb::Approval {
    h.runtime
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: id.into(),
            approve,
            reason: "checked".into(),
            remember_for_run: false,
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap()
}

async fn collect(h: &mut Harness, inv: &str, turn: &str) -> pb::ExecuteToolCallsResponse {
    h.runtime
        .collect_tool_results(pb::CollectToolResultsRequest {
            invocation_id: inv.into(),
            turn_id: turn.into(),
            wait_ms: 5_000,
            epoch: None,
        })
        .await
        .unwrap()
        .into_inner()
        .response
        .unwrap()
}

/// Where in the journal the first record of `kind` about call `call` is.
fn position(journal: &[pb::JournalEvent], kind: &str, call: &str) -> usize {
    journal
        .iter()
        .position(|e| e.r#type == kind && payload(e)["callId"] == call)
        .unwrap_or_else(|| panic!("no {kind} for {call} in {:?}", types(journal)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_across_a_restart_stays_pending_and_runs_once_after_approval() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let call_log = data.path().join("calls.log");
    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    ask_fixture(&mut h, &call_log).await;
    let (run, inv, turn) = hold_an_echo(&mut h).await;
    let held = pending_of(&mut h, &run).await;
    assert_eq!(held.len(), 1);
    h.plane.shutdown().await;

    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    let after = h.run(&run).await;
    assert_eq!(after.status, pb::RunStatus::Running as i32, "{after:?}");
    let pending = pending_of(&mut h, &run).await;
    assert_eq!(pending.len(), 1, "still awaiting after the restart");
    assert_eq!(pending[0].approval_id, held[0].approval_id);
    assert_eq!(echo_calls(&call_log), 0, "not run before approval");
    let approved = decide(&mut h, &pending[0].approval_id, true).await;
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);

    let done = collect(&mut h, &inv, &turn).await;
    assert!(done.awaiting.is_empty());
    assert!(done.next_turn.is_some(), "the invocation goes on");
    let messages: Vec<Value> = serde_json::from_str(&done.result_messages_json).unwrap();
    assert_eq!(messages.len(), 2, "every call of the turn: {messages:?}");
    assert_eq!(messages[0]["tool_call_id"], "c1");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("held across a restart"),
        "{messages:?}"
    );
    assert_eq!(
        messages[1]["tool_call_id"], "c2",
        "the result from before the restart"
    );
    assert_eq!(echo_calls(&call_log), 1, "run exactly once");

    let journal = h.journal(&run).await;
    let awaiting = position(&journal, "tool_call_awaiting_approval", "c1");
    let approved = position(&journal, "tool_call_approved", "c1");
    let started = position(&journal, "tool_call_started", "c1");
    let completed = position(&journal, "tool_call_completed", "c1");
    let restored = journal
        .iter()
        .position(|e| e.r#type == "agent_invocation_restored")
        .expect("the restart is journalled");
    assert!(
        awaiting < restored && restored < approved && approved < started && started < completed
    );
    let kinds = types(&journal);
    assert!(!kinds.contains(&"run_failed".to_owned()), "{kinds:?}");
    assert!(journal.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    // The turn was collected: a second restart has nothing held to rebuild.
    h.plane.shutdown().await;
    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    let next = h
        .execute(
            &inv,
            &done.next_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[("c3", "dice_roll", json!({"notation": "d6"}))]),
        )
        .await;
    assert!(
        next.is_err(),
        "the invocation was not kept once its turn was collected"
    );
    assert_eq!(h.run(&run).await.status, pb::RunStatus::Failed as i32);
    assert_eq!(echo_calls(&call_log), 1);
    h.plane.shutdown().await;
}

/// A crash after an approved call was marked started but before its result was recorded leaves
/// exactly that in the store: the approval approved and started, the turn still held. After the
/// restart the call is not sent again; the model reads that it was not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_started_before_a_crash_is_not_run_again_after_the_restart() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let call_log = data.path().join("calls.log");
    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    ask_fixture(&mut h, &call_log).await;
    let (run, inv, turn) = hold_an_echo(&mut h).await;
    let id = pending_of(&mut h, &run).await[0].approval_id.clone();
    decide(&mut h, &id, true).await;
    h.plane.shutdown().await;
    // The state a crash between `started` and the result leaves.
    let stored = find_file(&data_dir.join("runtime"), &format!("{id}.json")).unwrap();
    let mut approval: Value = serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    assert_eq!(approval["state"], "approved");
    approval["started"] = json!(true);
    std::fs::write(&stored, serde_json::to_vec(&approval).unwrap()).unwrap();

    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    let done = collect(&mut h, &inv, &turn).await;
    let messages: Vec<Value> = serde_json::from_str(&done.result_messages_json).unwrap();
    assert_eq!(messages[0]["tool_call_id"], "c1");
    let text = messages[0]["content"].as_str().unwrap();
    assert!(text.contains("not run again"), "{text}");
    assert_eq!(echo_calls(&call_log), 0, "never sent twice");
    let journal = h.journal(&run).await;
    let failed = position(&journal, "tool_call_failed", "c1");
    assert_eq!(payload(&journal[failed])["outcome"], "not_sent");
    h.plane.shutdown().await;
}

fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// Nobody looks at a held call after it is held: the runtime still expires it at its deadline
/// and journals the expiry then, so a watcher sees it happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwatched_held_call_expires_at_its_deadline() {
    let data = tempfile::tempdir().unwrap();
    let call_log = data.path().join("calls.log");
    let mut h = harness_with(|c| c.runtime.approvals.timeout_seconds = 1).await;
    ask_fixture(&mut h, &call_log).await;
    let (run, inv, turn) = hold_an_echo(&mut h).await;
    let held_at = std::time::Instant::now();
    let mut expired = None;
    while held_at.elapsed() < std::time::Duration::from_secs(5) {
        let journal = h.journal(&run).await;
        if let Some(e) = journal
            .iter()
            .find(|e| e.r#type == "tool_call_denied" && payload(e)["callId"] == "c1")
        {
            let awaiting = &journal[position(&journal, "tool_call_awaiting_approval", "c1")];
            expired = Some((payload(e), e.timestamp_unix_ms - awaiting.timestamp_unix_ms));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (expired, after_ms) = expired.expect("the expiry was journalled without anyone asking");
    assert!(
        (900..1_500).contains(&after_ms),
        "journalled at the deadline, {after_ms} ms after the hold"
    );
    assert_eq!(expired["expired"], true);
    assert_eq!(expired["decidedBy"], "timeout");
    let done = collect(&mut h, &inv, &turn).await;
    let messages: Vec<Value> = serde_json::from_str(&done.result_messages_json).unwrap();
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("the call was not run"),
        "{messages:?}"
    );
    assert_eq!(echo_calls(&call_log), 0);
    h.plane.shutdown().await;
}

/// A held call whose deadline passes while the runtime is stopped expires right after the next
/// start, journalled without anyone asking; the rebuilt turn then answers it as denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passed_while_stopped_expires_right_after_the_restart() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let call_log = data.path().join("calls.log");
    let config = |c: &mut toolplane::plane::PlaneConfig| {
        c.data_dir = data_dir.clone();
        c.runtime.approvals.timeout_seconds = 3;
    };
    let mut h = harness_with(config).await;
    ask_fixture(&mut h, &call_log).await;
    let (run, inv, turn) = hold_an_echo(&mut h).await;
    let held_at = std::time::Instant::now();
    let denied = |j: &[pb::JournalEvent]| {
        j.iter()
            .any(|e| e.r#type == "tool_call_denied" && payload(e)["callId"] == "c1")
    };
    assert!(!denied(&h.journal(&run).await));
    h.plane.shutdown().await;
    tokio::time::sleep(std::time::Duration::from_millis(3_500).saturating_sub(held_at.elapsed()))
        .await;

    let mut h = harness_with(config).await;
    let mut seen = false;
    for _ in 0..30 {
        if denied(&h.journal(&run).await) {
            seen = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen, "{:?}", types(&h.journal(&run).await));
    assert_eq!(h.run(&run).await.status, pb::RunStatus::Running as i32);
    let done = collect(&mut h, &inv, &turn).await;
    let messages: Vec<Value> = serde_json::from_str(&done.result_messages_json).unwrap();
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("the call was not run"),
        "{messages:?}"
    );
    assert_eq!(echo_calls(&call_log), 0);
    h.plane.shutdown().await;
}

/// A runtime-driven run whose model called the fixture's `echo` (held) when the plane stopped:
/// after the restart on the same data directory the call is still `PENDING` and nothing was
/// sent; approved, it runs once, the model's next request carries its result, and the run
/// completes — the loop went on where it stopped, nothing before the restart asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_driven_run_held_across_a_restart_goes_on_when_approved_and_completes() {
    use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_path_buf();
    let call_log = data.path().join("calls.log");
    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    ask_fixture(&mut h, &call_log).await;
    h.put_profile(
        json!({"id": "looper", "tools": {"allow": ["mcp:fixture/echo", "builtin:workspace.*"]}}),
    )
    .await;
    let model = spawn_model_server(vec![
        ScriptedReply::tool_calls(
            1,
            &[(
                "mcp__fixture__echo",
                json!({"text": "held across a restart"}),
            )],
        ),
        ScriptedReply::tool_calls(
            2,
            &[(
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "echoed"}),
            )],
        ),
        ScriptedReply::tool_calls(3, &[("workspace_commit", json!({}))]),
        ScriptedReply::tool_calls(4, &[("workspace_finish", json!({"summary": "done"}))]),
    ])
    .await
    .unwrap();
    let run = h
        .start_run(pb::RunSpec {
            profile_id: "looper".into(),
            model: Some(pb::ModelEndpoint {
                kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
                base_url: model.base_url(),
                model: "scripted".into(),
                ..Default::default()
            }),
            initial_user_message: "Echo it, then write the answer.".into(),
            max_rounds: 8,
            ..Default::default()
        })
        .await;
    let mut held = Vec::new();
    for _ in 0..100 {
        held = pending_of(&mut h, &run).await;
        if !held.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(held.len(), 1, "{:?}", types(&h.journal(&run).await));
    h.plane.shutdown().await;

    let mut h = harness_with(|c| c.data_dir = data_dir.clone()).await;
    assert_eq!(h.run(&run).await.status, pb::RunStatus::Running as i32);
    let pending = pending_of(&mut h, &run).await;
    assert_eq!(pending.len(), 1, "still awaiting after the restart");
    assert_eq!(pending[0].approval_id, held[0].approval_id);
    assert_eq!(echo_calls(&call_log), 0, "nothing sent before the decision");
    assert_eq!(model.requests().len(), 1);
    decide(&mut h, &held[0].approval_id, true).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        types(&h.journal(&run).await)
    );
    assert_eq!(echo_calls(&call_log), 1, "run exactly once");
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "each turn asked once");
    let tool_messages: Vec<String> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(tool_messages.len(), 1, "{:?}", requests[1]);
    assert!(
        tool_messages[0].contains("held across a restart"),
        "{tool_messages:?}"
    );
    let journal = h.journal(&run).await;
    let call = payload(
        &journal[journal
            .iter()
            .position(|e| e.r#type == "tool_call_awaiting_approval")
            .unwrap()],
    )["callId"]
        .as_str()
        .unwrap()
        .to_owned();
    let awaiting = position(&journal, "tool_call_awaiting_approval", &call);
    let restored = journal
        .iter()
        .position(|e| e.r#type == "agent_invocation_restored")
        .expect("the restart is journalled");
    let approved = position(&journal, "tool_call_approved", &call);
    let started = position(&journal, "tool_call_started", &call);
    let completed = position(&journal, "tool_call_completed", &call);
    assert!(
        awaiting < restored && restored < approved && approved < started && started < completed,
        "{:?}",
        types(&journal)
    );
    assert!(!types(&journal).contains(&"run_failed".to_owned()));
    assert!(journal.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    h.plane.shutdown().await;
}
