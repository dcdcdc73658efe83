//! Host-driven turns over the runtime's in-memory ports (tests/integration/support): the host changes the tool
//! choice from one turn to the next, and a turn without calls uses up no round.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::{Value, json};
use support::{Alone, agent, alone, calls};
use toolplane_core::ToolId;
use toolplane_core::error as codes;
use toolplane_core::turn::ToolChoice;
use toolplane_model::ProviderFormat;
use toolplane_runtime::error::RuntimeError;
use toolplane_runtime::pipeline::{HostCalls, HostTurn};
use toolplane_runtime::state::{Invocation, InvocationStatus};

/// A text-only assistant answer: no tool calls.
fn text() -> Value {
    json!({"role": "assistant", "content": "Let me think about it."})
}

fn dice(id: &str) -> Value {
    calls(&[(id, "dice_roll", json!({"notation": "d6"}))])
}

async fn host_turn(
    a: &Alone,
    inv: &std::sync::Arc<Invocation>,
    turn: &str,
    assistant: &Value,
    next_choice: Option<ToolChoice>,
) -> Result<HostTurn, RuntimeError> {
    a.rt.execute_host_calls(
        inv,
        HostCalls {
            turn,
            format: ProviderFormat::OpenAiChat,
            calls: assistant,
            epoch: None,
            model_response: None,
            next_choice,
            cell: None,
        },
    )
    .await
}

fn specific(id: &str) -> ToolChoice {
    ToolChoice::Specific(ToolId::parse(id).unwrap())
}

#[tokio::test]
async fn each_next_turn_follows_the_tool_choice_the_host_sets() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("c1", "writer").await;
    let inv = &opened.invocation;
    assert_eq!(opened.tools_json["tool_choice"], json!("auto"));

    // auto → none: the next turn allows no calls, and its request fields say so.
    let t = host_turn(
        &a,
        inv,
        &opened.turn_id,
        &dice("c1"),
        Some(ToolChoice::None),
    )
    .await
    .unwrap();
    assert_eq!(t.status, InvocationStatus::Open);
    let next = t.next_turn_id.clone().unwrap();
    assert_eq!(choice_of(&t), json!("none"));
    assert_eq!(*inv.inner.lock().await.turn.choice(), ToolChoice::None);

    // none → specific: the model answered with text, as `none` wants; the next turn names a tool.
    let t = host_turn(&a, inv, &next, &text(), Some(specific("builtin:dice.roll")))
        .await
        .unwrap();
    let next = t.next_turn_id.clone().unwrap();
    assert_eq!(
        choice_of(&t),
        json!({"type": "function", "function": {"name": "dice_roll"}})
    );
    assert_eq!(
        *inv.inner.lock().await.turn.choice(),
        specific("builtin:dice.roll")
    );

    // The named tool runs; without a new choice the next turn keeps it.
    let t = host_turn(&a, inv, &next, &dice("c2"), None).await.unwrap();
    assert!(!t.outcome.results[0].is_error);
    assert_eq!(choice_of(&t)["function"]["name"], json!("dice_roll"));

    // The journal shows each change with the contract of the turn it opens.
    let changed = a.mem.payloads("c1", "tool_choice_changed");
    assert_eq!(changed.len(), 2);
    assert_eq!(changed[0]["choice"], json!({"mode": "none"}));
    assert_eq!(changed[0]["round"], json!(2));
    assert_eq!(changed[0]["contract"]["choice"], json!({"mode": "none"}));
    assert_eq!(
        changed[1]["contract"]["choice"],
        json!({"mode": "specific", "toolId": "builtin:dice.roll"})
    );
}

#[tokio::test]
async fn a_call_that_breaks_the_new_choice_fails_the_invocation() {
    for (run, choice, call) in [
        ("v1", ToolChoice::None, dice("c2")),
        (
            "v2",
            specific("builtin:dice.roll"),
            calls(&[("c2", "workspace_read_file", json!({"path": "output/a.md"}))]),
        ),
    ] {
        let a = alone().await;
        a.mem.put_profile(agent("writer", json!({})));
        let opened = a.host_run(run, "writer").await;
        let inv = &opened.invocation;
        let t = host_turn(&a, inv, &opened.turn_id, &dice("c1"), Some(choice))
            .await
            .unwrap();
        let err = host_turn(&a, inv, &t.next_turn_id.unwrap(), &call, None)
            .await
            .unwrap_err();
        assert_eq!(err.code(), codes::MODEL_TOOL_CHOICE_VIOLATED, "{run}");
        assert_eq!(inv.inner.lock().await.status, InvocationStatus::Failed);
    }
}

#[tokio::test]
async fn an_invalid_next_choice_is_refused_and_nothing_runs() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "brief",
        json!({"tools": {"allow": ["builtin:dice.roll"], "maxRounds": 8}}),
    ));
    let opened = a.host_run("i1", "brief").await;
    let inv = &opened.invocation;
    let err = host_turn(
        &a,
        inv,
        &opened.turn_id,
        &dice("c1"),
        Some(specific("builtin:workspace.finish")),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), codes::RUNTIME_INVALID_REQUEST);
    assert!(
        a.mem
            .kinds("i1")
            .iter()
            .all(|k| !k.starts_with("tool_call"))
    );
    // The turn is still current and still takes its calls.
    let inner = inv.inner.lock().await;
    assert_eq!(inner.status, InvocationStatus::Open);
    assert_eq!(inner.round, 1);
    assert_eq!(*inner.turn.choice(), ToolChoice::Auto);
    drop(inner);
    let t = host_turn(&a, inv, &opened.turn_id, &dice("c1"), None)
        .await
        .unwrap();
    assert!(!t.outcome.results[0].is_error);
}

#[tokio::test]
async fn turns_without_calls_use_up_no_round() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "brief",
        json!({"tools": {"allow": ["builtin:dice.roll"], "maxRounds": 2}}),
    ));
    let opened = a.host_run("e1", "brief").await;
    let inv = &opened.invocation;
    for _ in 0..3 {
        let t = host_turn(&a, inv, &opened.turn_id, &text(), None)
            .await
            .unwrap();
        assert_eq!(t.status, InvocationStatus::Open);
        assert_eq!(t.next_turn_id.as_deref(), Some(opened.turn_id.as_str()));
        assert_eq!(t.result_messages, json!([]));
    }
    assert_eq!(a.mem.payloads("e1", "turn_without_calls").len(), 3);

    // Both rounds are still there for calls.
    let t = host_turn(&a, inv, &opened.turn_id, &dice("c1"), None)
        .await
        .unwrap();
    assert_eq!(t.status, InvocationStatus::Open);
    assert!(!t.outcome.results[0].is_error);
    let t = host_turn(&a, inv, &t.next_turn_id.unwrap(), &dice("c2"), None)
        .await
        .unwrap();
    assert!(!t.outcome.results[0].is_error);
    assert_eq!(
        t.failure.unwrap().code,
        codes::AGENT_MAX_TOOL_ROUNDS_EXCEEDED.as_str()
    );
}

#[tokio::test]
async fn a_turn_without_calls_under_a_required_choice_still_fails() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("q1", "writer").await;
    let inv = &opened.invocation;
    let t = host_turn(
        &a,
        inv,
        &opened.turn_id,
        &text(),
        Some(ToolChoice::Required),
    )
    .await
    .unwrap();
    assert_eq!(choice_of(&t), json!("required"));
    let err = host_turn(&a, inv, &t.next_turn_id.unwrap(), &text(), None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), codes::MODEL_TOOL_CALL_REQUIRED);
    assert_eq!(inv.inner.lock().await.status, InvocationStatus::Failed);
}

/// The next turn's tool choice the answer names (the provider's `tool_choice` field).
fn choice_of(t: &HostTurn) -> Value {
    serde_json::from_str(t.next_choice.as_deref().unwrap()).unwrap()
}
