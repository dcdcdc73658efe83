//! A host changes the tool choice per turn over gRPC (`ExecuteToolCallsRequest.next_tool_choice`),
//! and a turn without calls keeps the same turn current.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;

async fn execute(
    h: &mut Harness,
    inv: &str,
    turn: &str,
    calls: Value,
    choice: Option<pb::ToolChoice>,
) -> Result<pb::ExecuteToolCallsResponse, tonic::Status> {
    h.runtime
        .execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: inv.into(),
            turn_id: turn.into(),
            provider_format: OPENAI as i32,
            calls_json: calls.to_string(),
            next_tool_choice: choice,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

fn choice(mode: pb::ToolChoiceMode, tool_id: &str) -> Option<pb::ToolChoice> {
    Some(pb::ToolChoice {
        mode: mode as i32,
        tool_id: tool_id.into(),
    })
}

fn dice(id: &str) -> Value {
    openai_calls(&[(id, "dice_roll", json!({"notation": "d6"}))])
}

fn choice_json(turn: &pb::ToolTurn) -> Value {
    serde_json::from_str(turn.tool_choice_json.as_deref().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_sets_each_next_turns_tool_choice_and_empty_turns_keep_the_turn() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let run = h.create_run("writer", false).await;
    let inv = h.open(&run, OPENAI).await;
    let id = inv.invocation_id.clone();
    let first = inv.first_turn.unwrap().turn_id;

    // Invalid next choices run nothing: a tool outside the snapshot, a malformed id.
    for bad in ["builtin:agent.handoff", "not a tool id"] {
        let status = execute(
            &mut h,
            &id,
            &first,
            dice("c0"),
            choice(pb::ToolChoiceMode::Specific, bad),
        )
        .await
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().starts_with("runtime.invalid_request"),
            "{}",
            status.message()
        );
    }
    assert!(
        types(&h.journal(&run).await)
            .iter()
            .all(|t| !t.starts_with("tool_call")),
        "nothing ran"
    );

    // auto → none.
    let r = execute(
        &mut h,
        &id,
        &first,
        dice("c1"),
        choice(pb::ToolChoiceMode::None, ""),
    )
    .await
    .unwrap();
    let next = r.next_turn.unwrap();
    assert_eq!(next.round, 2);
    assert_eq!(
        next.choice.as_ref().unwrap().mode,
        pb::ToolChoiceMode::None as i32
    );
    assert_eq!(choice_json(&next), json!("none"));

    // A text answer under `none` keeps turn 2 current; the host now asks for the dice.
    let r = execute(
        &mut h,
        &id,
        &next.turn_id,
        json!({"role": "assistant", "content": "Thinking."}),
        choice(pb::ToolChoiceMode::Specific, "builtin:dice.roll"),
    )
    .await
    .unwrap();
    assert_eq!(r.state, pb::InvocationState::Open as i32);
    let same = r.next_turn.unwrap();
    assert_eq!(
        (same.turn_id.as_str(), same.round),
        (next.turn_id.as_str(), 2)
    );
    assert_eq!(
        choice_json(&same),
        json!({"type": "function", "function": {"name": "dice_roll"}})
    );
    let journal = h.journal(&run).await;
    assert!(types(&journal).contains(&"turn_without_calls".to_owned()));
    let changes: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "tool_choice_changed")
        .map(payload)
        .collect();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(
        changes[1]["contract"]["choice"],
        json!({"mode": "specific", "toolId": "builtin:dice.roll"})
    );

    // A call of another tool breaks the specific choice.
    let status = execute(
        &mut h,
        &id,
        &same.turn_id,
        openai_calls(&[("c2", "workspace_list_files", json!({}))]),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        status.message().starts_with("model.tool_choice_violated"),
        "{}",
        status.message()
    );
}
