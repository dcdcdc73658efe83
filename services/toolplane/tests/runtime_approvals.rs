//! Approvals over the wire: an MCP tool with permission ASK on the project's fixture server,
//! held by a host-driven `ExecuteToolCalls`, listed with its card by `ListApprovals`, approved
//! by `DecideApproval` (a second decision refused with its code), and collected with
//! `CollectToolResults` — the fixture's answer reaching the host, the call journalled once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
