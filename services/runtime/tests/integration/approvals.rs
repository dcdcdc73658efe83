//! Calls held for a person (docs/approvals.md), over the runtime alone: a held call does not run
//! before its approval and runs once after it, a denial reaches the model as a recoverable
//! result, a timeout ends as configured, a second decision is refused, `ask_user` waits for its
//! answer, and host-driven turns collect their held calls — each checked by what the tool hosts
//! ran, the answers and the journal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{
    Alone, agent, alone, alone_with, calls, eventually, held_writer, host_turn, pending, scripted,
    turn, write_commit_finish, writer_run,
};
use toolplane_core::error as codes;
use toolplane_core::selector::ToolSelector;
use toolplane_runtime::config::{ApprovalRule, TimeoutOutcome};
use toolplane_runtime::lifecycle::ApprovalFilter;
use toolplane_runtime::state::{Approval, ApprovalKind, ApprovalState, Decision, RunStatus};

async fn first_pending(a: &Alone, run: &str) -> Approval {
    assert!(
        eventually(|| !pending(a, run).is_empty()).await,
        "a call of {run} is held: {:?}",
        a.mem.kinds(run)
    );
    pending(a, run).remove(0)
}

fn approve(by: &str) -> Decision {
    Decision::Approve {
        by: by.into(),
        reason: "looks fine".into(),
        remember: false,
    }
}

/// The position of the first record of `kind` for call `call_id`.
fn position(a: &Alone, run: &str, kind: &str, call_id: &str) -> Option<usize> {
    a.mem.journal(run).iter().position(|r| {
        r.kind == kind
            && serde_json::from_str::<Value>(&r.payload_json).unwrap()["callId"] == call_id
    })
}

#[tokio::test]
async fn a_held_builtin_call_runs_once_after_approval_and_a_second_decision_is_refused() {
    let a = alone().await;
    held_writer(&a);
    a.start(writer_run("ap1"), scripted(write_commit_finish()))
        .await;
    let held = first_pending(&a, "ap1").await;
    let listed =
        a.rt.list_approvals(&ApprovalFilter {
            run_id: "ap1".into(),
            state: Some(ApprovalState::Pending),
            ..ApprovalFilter::default()
        })
        .await;
    assert_eq!(listed.len(), 1);
    assert_eq!(held.kind, ApprovalKind::ToolCall);
    assert_eq!(held.tool_id, "builtin:workspace.write_file");
    assert_eq!(held.card["rule"], "profile `builtin:workspace.write_file`");
    assert_eq!(held.card["arguments"]["path"], "output/main.md");
    assert_eq!(held.card["hints"]["readOnly"], false);
    // Held: nothing ran and the run waits.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a.mem.executed().is_empty(), "{:?}", a.mem.executed());
    assert!(a.mem.file("output/main.md").is_none());
    assert_eq!(a.mem.payloads("ap1", "tool_call_started").len(), 0);
    let awaiting = a.mem.payloads("ap1", "tool_call_awaiting_approval");
    assert_eq!(awaiting.len(), 1);
    assert_eq!(awaiting[0]["approvalId"], held.id.as_str());
    assert_eq!(awaiting[0]["card"]["toolSource"], "builtin");

    let decided =
        a.rt.decide_approval(&held.id, None, approve("alice"))
            .await
            .unwrap();
    assert_eq!(decided.state, ApprovalState::Approved);
    let again =
        a.rt.decide_approval(
            &held.id,
            None,
            Decision::Deny {
                by: "bob".into(),
                reason: "late".into(),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(again.code(), codes::RUNTIME_APPROVAL_DECIDED);

    assert!(
        eventually(|| a.mem.sealed("ap1") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("ap1")
    );
    assert_eq!(
        a.mem.file("output/main.md").as_deref(),
        Some("The answer is 42.")
    );
    let writes: Vec<String> = a
        .mem
        .executed()
        .into_iter()
        .filter(|t| t.ends_with("write_file"))
        .collect();
    assert_eq!(writes.len(), 1, "ran exactly once");
    let call = awaiting[0]["callId"].as_str().unwrap();
    let order = [
        position(&a, "ap1", "tool_call_requested", call),
        position(&a, "ap1", "tool_call_awaiting_approval", call),
        position(&a, "ap1", "tool_call_approved", call),
        position(&a, "ap1", "tool_call_started", call),
        position(&a, "ap1", "tool_call_completed", call),
    ];
    assert!(order.iter().all(Option::is_some), "{order:?}");
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    let approved = &a.mem.payloads("ap1", "tool_call_approved")[0];
    assert_eq!(approved["decidedBy"], "alice");
    assert_eq!(approved["reason"], "looks fine");
}

#[tokio::test]
async fn a_denied_call_reaches_the_model_as_a_recoverable_denial_with_the_reason() {
    let a = alone().await;
    held_writer(&a);
    a.start(writer_run("ap2"), scripted(write_commit_finish()))
        .await;
    let held = first_pending(&a, "ap2").await;
    a.rt.decide_approval(
        &held.id,
        None,
        Decision::Deny {
            by: "alice".into(),
            reason: "not that file".into(),
        },
    )
    .await
    .unwrap();
    assert!(eventually(|| !a.mem.payloads("ap2", "tool_call_failed").is_empty()).await);
    let failed = &a.mem.payloads("ap2", "tool_call_failed")[0];
    assert_eq!(failed["errorCode"], codes::POLICY_APPROVAL_DENIED.as_str());
    let result = a
        .mem
        .object(failed["resultPath"].as_str().unwrap())
        .unwrap();
    let result: Value = serde_json::from_slice(&result).unwrap();
    let content = result["result"]["content"].as_str().unwrap();
    assert!(
        content.contains("denied by alice: not that file"),
        "{content}"
    );
    assert_eq!(result["outcome"], "not_sent");
    let denied = &a.mem.payloads("ap2", "tool_call_denied")[0];
    assert_eq!(denied["decidedBy"], "alice");
    assert_eq!(denied["expired"], false);
    assert!(a.mem.file("output/main.md").is_none(), "never written");
    assert!(!a.mem.executed().iter().any(|t| t.ends_with("write_file")));
}

#[tokio::test]
async fn an_approval_nobody_decides_expires_with_the_rules_outcome() {
    let a = alone_with(|cfg| {
        cfg.approvals.rules = vec![ApprovalRule {
            tools: ToolSelector::parse("builtin:workspace.write_file").unwrap(),
            timeout_seconds: 1,
            on_timeout: TimeoutOutcome::Deny,
        }];
    })
    .await;
    held_writer(&a);
    a.start(writer_run("ap3"), scripted(write_commit_finish()))
        .await;
    let held = first_pending(&a, "ap3").await;
    assert!(held.expires_ms > held.created_ms);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(eventually(|| !a.mem.payloads("ap3", "tool_call_denied").is_empty()).await);
    let denied = &a.mem.payloads("ap3", "tool_call_denied")[0];
    assert_eq!(denied["expired"], true);
    assert_eq!(denied["decidedBy"], "timeout");
    let stored = a.rt.approvals.get(&held.id).unwrap();
    assert_eq!(stored.state, ApprovalState::Expired);
    let late =
        a.rt.decide_approval(&held.id, None, approve("alice"))
            .await
            .unwrap_err();
    assert_eq!(late.code(), codes::RUNTIME_APPROVAL_DECIDED);
    assert!(a.mem.file("output/main.md").is_none());
}

#[tokio::test]
async fn remember_for_run_approves_later_calls_of_the_same_tool() {
    let a = alone().await;
    held_writer(&a);
    let script = json!([
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/a.md", "content": "a"})
        )]),
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "b"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]);
    a.start(writer_run("ap4"), scripted(script)).await;
    let held = first_pending(&a, "ap4").await;
    let remember = Decision::Approve {
        by: "alice".into(),
        reason: String::new(),
        remember: true,
    };
    a.rt.decide_approval(&held.id, None, remember)
        .await
        .unwrap();
    assert!(
        eventually(|| a.mem.sealed("ap4") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("ap4")
    );
    assert_eq!(
        a.mem.payloads("ap4", "tool_call_awaiting_approval").len(),
        1,
        "asked once"
    );
    let approved = a.mem.payloads("ap4", "tool_call_approved");
    assert_eq!(approved.len(), 2);
    assert_eq!(approved[1]["decidedBy"], "remembered");
    assert_eq!(a.mem.file("output/main.md").as_deref(), Some("b"));
}

#[tokio::test]
async fn ask_user_waits_for_the_answer_and_the_answer_is_the_result() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "writer",
        json!({"tools": {"allow": ["builtin:workspace.*", "builtin:ask_user"], "maxRounds": 8}}),
    ));
    let script = json!([
        turn(&[(
            "ask_user",
            json!({"question": "Which colour?", "choices": ["red", "blue"]})
        )]),
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "blue"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]);
    a.start(writer_run("ap5"), scripted(script)).await;
    let q = first_pending(&a, "ap5").await;
    assert_eq!(q.kind, ApprovalKind::Question);
    assert_eq!(q.card["question"], "Which colour?");
    assert_eq!(q.card["choices"], json!(["red", "blue"]));
    let wrong =
        a.rt.decide_approval(&q.id, None, approve("alice"))
            .await
            .unwrap_err();
    assert_eq!(
        wrong.code(),
        codes::RUNTIME_INVALID_REQUEST,
        "a question is answered, not approved"
    );
    a.rt.decide_approval(
        &q.id,
        None,
        Decision::Answer {
            by: "alice".into(),
            answer: "blue, please".into(),
        },
    )
    .await
    .unwrap();
    assert!(
        eventually(|| a.mem.sealed("ap5") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("ap5")
    );
    let answered = &a.mem.payloads("ap5", "question_answered")[0];
    assert_eq!(answered["answer"], "blue, please");
    let completed = a
        .mem
        .payloads("ap5", "tool_call_completed")
        .into_iter()
        .find(|p| p["toolId"] == "builtin:ask_user")
        .unwrap();
    let result: Value = serde_json::from_slice(
        &a.mem
            .object(completed["resultPath"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(result["result"]["content"], "blue, please");
}

#[tokio::test]
async fn an_unanswered_question_times_out_as_a_recoverable_error() {
    let a = alone_with(|cfg| {
        cfg.approvals.rules = vec![ApprovalRule {
            tools: ToolSelector::parse("builtin:ask_user").unwrap(),
            timeout_seconds: 1,
            on_timeout: TimeoutOutcome::Approve,
        }];
    })
    .await;
    a.mem.put_profile(agent(
        "writer",
        json!({"tools": {"allow": ["builtin:workspace.*", "builtin:ask_user"], "maxRounds": 8}}),
    ));
    let script = json!([
        turn(&[("ask_user", json!({"question": "Which colour?"}))]),
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "red"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]);
    a.start(writer_run("ap6"), scripted(script)).await;
    first_pending(&a, "ap6").await;
    // The question's timeout is one second; `eventually` waits up to two.
    assert!(eventually(|| !a.mem.payloads("ap6", "tool_call_failed").is_empty()).await);
    let failed = &a.mem.payloads("ap6", "tool_call_failed")[0];
    assert_eq!(failed["errorCode"], codes::TOOL_QUESTION_TIMEOUT.as_str());
}

fn mcp_ask(a: &Alone) {
    let reg = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
    let d = toolplane_core::descriptor::ToolDescriptor::new(
        toolplane_core::ToolId::parse(&format!("mcp/{reg}:delete_repo")).unwrap(),
        "Delete a repository.",
        json!({"type": "object", "properties": {"name": {"type": "string"}, "token": {"type": "string"}}}),
    )
    .unwrap()
    .with_annotations(toolplane_core::descriptor::ToolAnnotations {
        destructive_hint: Some(true),
        ..Default::default()
    });
    a.mem.add_tool(
        toolplane_core::ToolOrigin::Mcp {
            registration_id: reg.into(),
            server_name: "github".into(),
            permission: toolplane_core::catalog::McpPermission::Ask,
        },
        d,
        None,
    );
}

#[tokio::test]
async fn a_host_driven_turn_answers_other_calls_at_once_and_collects_the_held_mcp_call_after_approval()
 {
    let a = alone().await;
    mcp_ask(&a);
    a.mem.put_profile(agent(
        "ops",
        json!({"tools": {"allow": ["mcp:github/*", "builtin:dice.roll"]}}),
    ));
    let opened = a.host_run("ap7", "ops").await;
    let inv = &opened.invocation;
    let first = a
        .first_turn(
            &opened,
            &calls(&[
                (
                    "c1",
                    "mcp__github__delete_repo",
                    json!({"name": "old", "token": "ghp_secret"}),
                ),
                ("c2", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 1);
    assert_eq!(first.awaiting[0].call_id, "c1");
    assert_eq!(first.outcome.results.len(), 1, "the dice call ran at once");
    assert_eq!(first.outcome.results[0].call_id, "c2");
    assert_eq!(first.result_messages, json!([]));
    assert!(first.next_turn_id.is_none());
    assert!(
        !a.mem.executed().iter().any(|t| t.ends_with("delete_repo")),
        "held: not sent"
    );
    let card = &a
        .rt
        .approvals
        .get(&first.awaiting[0].approval_id)
        .unwrap()
        .card;
    assert_eq!(card["rule"], "MCP permission ask");
    assert_eq!(card["toolSource"], "mcp:github");
    assert_eq!(card["hints"]["destructive"], true);
    assert_eq!(card["arguments"]["token"], "[hidden]");
    assert!(!card.to_string().contains("ghp_secret"));

    // New calls for the turn are refused while it is held; a collect before the decision waits.
    let again = host_turn(
        &a.rt,
        inv,
        &opened.turn_id,
        &calls(&[("c3", "dice_roll", json!({"notation": "d6"}))]),
    )
    .await
    .unwrap_err();
    assert_eq!(again.code(), codes::RUNTIME_APPROVAL_PENDING);
    let early =
        a.rt.collect_host_calls(inv, &opened.turn_id, Duration::ZERO, None)
            .await
            .unwrap();
    assert_eq!(early.awaiting.len(), 1);
    assert!(early.next_turn_id.is_none());

    a.rt.decide_approval(&first.awaiting[0].approval_id, None, approve("alice"))
        .await
        .unwrap();
    let done =
        a.rt.collect_host_calls(inv, &opened.turn_id, Duration::from_secs(5), None)
            .await
            .unwrap();
    assert!(done.awaiting.is_empty());
    let messages = done.result_messages.as_array().unwrap();
    assert_eq!(messages.len(), 2, "every call of the turn, in order");
    assert_eq!(messages[0]["tool_call_id"], "c1");
    assert_eq!(messages[1]["tool_call_id"], "c2");
    assert!(done.next_turn_id.is_some());
    let deletes = a
        .mem
        .executed()
        .into_iter()
        .filter(|t| t.ends_with("delete_repo"))
        .count();
    assert_eq!(deletes, 1, "ran exactly once");
    let twice =
        a.rt.collect_host_calls(inv, &opened.turn_id, Duration::ZERO, None)
            .await
            .unwrap_err();
    assert_eq!(twice.code(), codes::RUNTIME_INVALID_REQUEST);
    assert_eq!(
        a.mem
            .executed()
            .into_iter()
            .filter(|t| t.ends_with("delete_repo"))
            .count(),
        1
    );
}

#[tokio::test]
async fn a_platform_policy_on_an_annotation_holds_an_external_call_and_a_denial_is_its_result() {
    let a = alone().await;
    a.mem
        .set_platform_policy(json!({"approvalRequired": ["annotation:destructive"]}));
    let d = toolplane_core::descriptor::ToolDescriptor::new(
        toolplane_core::ToolId::parse("ext/crm:purge").unwrap(),
        "Purge a customer.",
        json!({"type": "object"}),
    )
    .unwrap()
    .with_annotations(toolplane_core::descriptor::ToolAnnotations {
        destructive_hint: Some(true),
        ..Default::default()
    });
    a.mem.add_tool(
        toolplane_core::ToolOrigin::External {
            host_id: "crm".into(),
            endpoint: "http://crm.test".into(),
        },
        d,
        None,
    );
    a.mem.put_profile(agent(
        "clerk",
        json!({"tools": {"allow": ["ext/crm:*", "builtin:dice.roll"]}}),
    ));
    let opened = a.host_run("ap8", "clerk").await;
    let first = a
        .first_turn(
            &opened,
            &calls(&[("c1", "ext__crm__purge", json!({"id": 7}))]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 1);
    let held = a.rt.approvals.get(&first.awaiting[0].approval_id).unwrap();
    assert_eq!(
        held.card["rule"],
        "platform policy `annotation:destructive`"
    );
    let deny = Decision::Deny {
        by: "alice".into(),
        reason: "keep the customer".into(),
    };
    a.rt.decide_approval(&held.id, None, deny).await.unwrap();
    let done =
        a.rt.collect_host_calls(
            &opened.invocation,
            &opened.turn_id,
            Duration::from_secs(1),
            None,
        )
        .await
        .unwrap();
    assert!(
        !a.mem.executed().iter().any(|t| t.ends_with("purge")),
        "never sent"
    );
    let content = done.result_messages[0]["content"].as_str().unwrap();
    assert!(content.contains("keep the customer"), "{content}");
    assert_eq!(
        done.outcome.results[0].error_code.as_deref(),
        Some(codes::POLICY_APPROVAL_DENIED.as_str())
    );
    assert_eq!(a.mem.payloads("ap8", "tool_call_denied").len(), 1);
}

#[tokio::test]
async fn after_a_restart_a_held_host_driven_call_is_still_held_and_runs_once_when_approved() {
    let a = alone().await;
    mcp_ask(&a);
    a.mem
        .put_profile(agent("ops", json!({"tools": {"allow": ["mcp:github/*"]}})));
    let opened = a.host_run("ap9", "ops").await;
    let first = a
        .first_turn(
            &opened,
            &calls(&[("c1", "mcp__github__delete_repo", json!({"name": "old"}))]),
        )
        .await
        .unwrap();
    let id = first.awaiting[0].approval_id.clone();
    let rt = a.restart().await;
    let after = rt.approvals.get(&id).expect("read back from the store");
    assert_eq!(after.state, ApprovalState::Pending, "still awaiting");
    assert_eq!(rt.run("ap9").unwrap().snapshot().status, RunStatus::Running);
    let deletes = || {
        a.mem
            .executed()
            .iter()
            .filter(|t| t.ends_with("delete_repo"))
            .count()
    };
    assert_eq!(deletes(), 0);
    rt.decide_approval(&id, None, approve("alice"))
        .await
        .unwrap();
    let inv = rt.invocation(&opened.invocation.id).expect("rebuilt");
    let done = rt
        .collect_host_calls(&inv, &opened.turn_id, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(done.awaiting.is_empty());
    assert!(done.next_turn_id.is_some());
    assert_eq!(deletes(), 1, "run once, after the approval");
    let again = rt
        .collect_host_calls(&inv, &opened.turn_id, Duration::ZERO, None)
        .await;
    assert!(again.is_err(), "the turn was collected");
    assert_eq!(deletes(), 1);
    assert_eq!(a.mem.payloads("ap9", "agent_invocation_restored").len(), 1);
}

/// A builtin, an external host's tool and an MCP tool held in one host-driven turn: after a
/// restart all three are still pending and nothing ran; approved, each runs exactly once, and the
/// turn's answer has every call's result.
#[tokio::test]
async fn every_tool_kind_held_across_a_restart_runs_once_after_approval() {
    let a = alone().await;
    mcp_ask(&a);
    let purge = toolplane_core::descriptor::ToolDescriptor::new(
        toolplane_core::ToolId::parse("ext/crm:purge").unwrap(),
        "Purge a customer.",
        json!({"type": "object"}),
    )
    .unwrap();
    a.mem.add_tool(
        toolplane_core::ToolOrigin::External {
            host_id: "crm".into(),
            endpoint: "http://crm.test".into(),
        },
        purge,
        None,
    );
    a.mem.put_profile(agent(
        "ops",
        json!({"tools": {"allow": ["builtin:workspace.*", "ext/crm:*", "mcp:github/*"], "approvalRequired": ["builtin:workspace.write_file", "ext/crm:*"]}}),
    ));
    let opened = a.host_run("ap9k", "ops").await;
    let first = a
        .first_turn(
            &opened,
            &calls(&[
                (
                    "c1",
                    "workspace_write_file",
                    json!({"path": "output/main.md", "content": "kept"}),
                ),
                ("c2", "ext__crm__purge", json!({"id": 7})),
                ("c3", "mcp__github__delete_repo", json!({"name": "old"})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 3);
    let rt = a.restart().await;
    let pending = rt
        .list_approvals(&ApprovalFilter {
            run_id: "ap9k".into(),
            state: Some(ApprovalState::Pending),
            ..ApprovalFilter::default()
        })
        .await;
    assert_eq!(pending.len(), 3, "all still awaiting");
    let ran = |tool: &str| {
        a.mem
            .executed()
            .iter()
            .filter(|t| t.ends_with(tool))
            .count()
    };
    assert_eq!(
        (ran("write_file"), ran("purge"), ran("delete_repo")),
        (0, 0, 0)
    );
    for p in &pending {
        rt.decide_approval(&p.id, None, approve("alice"))
            .await
            .unwrap();
    }
    let inv = rt.invocation(&opened.invocation.id).expect("rebuilt");
    let done = rt
        .collect_host_calls(&inv, &opened.turn_id, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert!(done.awaiting.is_empty());
    assert_eq!(done.result_messages.as_array().unwrap().len(), 3);
    assert_eq!(
        (ran("write_file"), ran("purge"), ran("delete_repo")),
        (1, 1, 1)
    );
    assert_eq!(a.mem.file("output/main.md").as_deref(), Some("kept"));
}

/// A run cancelled while a call is held keeps nothing to resume: after a restart it stays
/// cancelled, its approval lapsed, and the call never ran.
#[tokio::test]
async fn a_run_cancelled_while_a_call_is_held_is_not_resumed_after_a_restart() {
    let a = alone().await;
    mcp_ask(&a);
    a.mem
        .put_profile(agent("ops", json!({"tools": {"allow": ["mcp:github/*"]}})));
    let opened = a.host_run("ap9c", "ops").await;
    let first = a
        .first_turn(
            &opened,
            &calls(&[("c1", "mcp__github__delete_repo", json!({"name": "old"}))]),
        )
        .await
        .unwrap();
    let id = first.awaiting[0].approval_id.clone();
    let run = a.rt.run("ap9c").unwrap();
    a.rt.cancel_run(&run, "changed my mind").await.unwrap();
    let rt = a.restart().await;
    assert_eq!(
        rt.run("ap9c").unwrap().snapshot().status,
        RunStatus::Cancelled
    );
    assert!(rt.invocation(&opened.invocation.id).is_err(), "not rebuilt");
    assert_eq!(rt.approvals.get(&id).unwrap().state, ApprovalState::Expired);
    assert!(
        a.mem
            .payloads("ap9c", "agent_invocation_restored")
            .is_empty()
    );
    assert!(!a.mem.executed().iter().any(|t| t.ends_with("delete_repo")));
}

#[tokio::test]
async fn a_held_sub_agent_call_delegates_nothing_until_decided_and_a_denial_is_its_result() {
    let a = alone().await;
    let d = toolplane_core::descriptor::ToolDescriptor::new(
        toolplane_core::ToolId::parse("agent/worker:run").unwrap(),
        "Run the worker.",
        json!({"type": "object", "properties": {"brief": {"type": "string"}}}),
    )
    .unwrap();
    a.mem.add_tool(
        toolplane_core::ToolOrigin::SubAgent {
            profile_id: "worker".into(),
        },
        d,
        None,
    );
    a.mem.put_profile(agent(
        "lead",
        json!({"tools": {"allow": ["agent/worker:*"], "approvalRequired": ["agent/worker:*"]}}),
    ));
    let opened = a.host_run("ap10", "lead").await;
    let first = a
        .first_turn(
            &opened,
            &calls(&[("c1", "agent__worker__run", json!({"brief": "go"}))]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 1);
    let held = a.rt.approvals.get(&first.awaiting[0].approval_id).unwrap();
    assert_eq!(held.card["toolSource"], "agent/worker");
    assert!(
        a.mem.payloads("ap10", "agent_task_registered").is_empty(),
        "nothing delegated"
    );
    let deny = Decision::Deny {
        by: "alice".into(),
        reason: "not now".into(),
    };
    a.rt.decide_approval(&held.id, None, deny).await.unwrap();
    let done =
        a.rt.collect_host_calls(
            &opened.invocation,
            &opened.turn_id,
            Duration::from_secs(1),
            None,
        )
        .await
        .unwrap();
    assert!(
        done.result_messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("not now")
    );
    assert!(
        a.mem.payloads("ap10", "agent_task_registered").is_empty(),
        "never delegated"
    );
}
