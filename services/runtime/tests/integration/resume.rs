//! Runtime-driven runs across a restart of the runtime (docs/runtime.md and docs/approvals.md,
//! "Restarts"), over the runtime alone: a run whose loop waits for a person — a held call or an
//! `ask_user` question — still waits after the restart, and the decision made afterwards lets the
//! loop go on: the held call runs exactly once (or never, when denied), the model gets the result
//! and the run completes. Checked by what the tool hosts ran, the approvals and the journal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::{Value, json};
use support::{
    Alone, agent, alone, eventually, held_writer, pending, scripted, turn, write_commit_finish,
    writer_run,
};
use toolplane_runtime::lifecycle::ApprovalFilter;
use toolplane_runtime::state::{Approval, ApprovalKind, ApprovalState, Decision, RunStatus};

fn writes(a: &Alone) -> usize {
    a.mem
        .executed()
        .iter()
        .filter(|t| t.ends_with("write_file"))
        .count()
}

/// The position of the first journal record of `kind` in `run` (at or after `from`).
fn position_after(a: &Alone, run: &str, kind: &str, from: usize) -> Option<usize> {
    a.mem
        .kinds(run)
        .iter()
        .skip(from)
        .position(|k| k == kind)
        .map(|p| p + from)
}

/// Starts `run` with `script`, waits until a call of it is held, and restarts the runtime: the
/// held approval, read back by the new runtime.
async fn held_then_restarted(a: &Alone, run: &str, script: Value) -> (Approval, Alone2) {
    a.start(writer_run(run), scripted(script)).await;
    assert!(
        eventually(|| !pending(a, run).is_empty()).await,
        "a call of {run} is held: {:?}",
        a.mem.kinds(run)
    );
    let held = pending(a, run).remove(0);
    let rt = a.restart().await;
    (held, Alone2 { rt })
}

/// The restarted runtime.
struct Alone2 {
    rt: std::sync::Arc<toolplane_runtime::context::Runtime>,
}

#[tokio::test]
async fn a_runtime_driven_call_held_across_a_restart_still_waits_and_runs_once_when_approved() {
    let a = alone().await;
    held_writer(&a);
    let (held, after) = held_then_restarted(&a, "rs1", write_commit_finish()).await;
    let listed = after
        .rt
        .list_approvals(&ApprovalFilter {
            run_id: "rs1".into(),
            state: Some(ApprovalState::Pending),
            ..ApprovalFilter::default()
        })
        .await;
    assert_eq!(listed.len(), 1, "still awaiting after the restart");
    assert_eq!(listed[0].id, held.id);
    assert_eq!(
        after.rt.run("rs1").unwrap().snapshot().status,
        RunStatus::Running
    );
    let restored = a.mem.payloads("rs1", "agent_invocation_restored");
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0]["awaiting"], json!([held.id]));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(writes(&a), 0, "nothing ran before the decision");
    assert!(a.mem.file("output/main.md").is_none());

    let approve = Decision::Approve {
        by: "alice".into(),
        reason: "fine".into(),
        remember: false,
    };
    after
        .rt
        .decide_approval(&held.id, None, approve)
        .await
        .unwrap();
    assert!(
        eventually(|| a.mem.sealed("rs1") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("rs1")
    );
    assert_eq!(writes(&a), 1, "run exactly once");
    assert_eq!(
        a.mem.file("output/main.md").as_deref(),
        Some("The answer is 42.")
    );
    // After the restart: approved, started, completed, then the model asked again with the
    // result (the next round's request) and the run finished.
    let kinds = a.mem.kinds("rs1");
    let restored_at = position_after(&a, "rs1", "agent_invocation_restored", 0).unwrap();
    let order = [
        "tool_call_approved",
        "tool_call_started",
        "tool_call_completed",
        "model_request_created",
        "run_completed",
    ];
    let mut at = restored_at;
    for kind in order {
        at = position_after(&a, "rs1", kind, at).unwrap_or_else(|| panic!("{kind}: {kinds:?}"));
    }
    let requests = a.mem.payloads("rs1", "model_request_created");
    assert_eq!(
        requests
            .iter()
            .map(|r| r["round"].clone())
            .collect::<Vec<_>>(),
        vec![json!(1), json!(2), json!(3)],
        "each round asked once: nothing was replayed"
    );
}

#[tokio::test]
async fn a_runtime_driven_question_held_across_a_restart_is_answered_and_the_answer_reaches_the_model()
 {
    let a = alone().await;
    a.mem.put_profile(agent(
        "writer",
        json!({"tools": {"allow": ["builtin:workspace.*", "builtin:ask_user"], "maxRounds": 8}}),
    ));
    let script = json!([
        turn(&[("ask_user", json!({"question": "Which colour?"}))]),
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "blue"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]);
    let (q, after) = held_then_restarted(&a, "rs2", script).await;
    assert_eq!(q.kind, ApprovalKind::Question);
    assert_eq!(
        after.rt.approvals.get(&q.id).unwrap().state,
        ApprovalState::Pending
    );
    let answer = Decision::Answer {
        by: "alice".into(),
        answer: "blue, please".into(),
    };
    after.rt.decide_approval(&q.id, None, answer).await.unwrap();
    assert!(
        eventually(|| a.mem.sealed("rs2") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("rs2")
    );
    let completed = a
        .mem
        .payloads("rs2", "tool_call_completed")
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
    assert_eq!(a.mem.payloads("rs2", "agent_invocation_restored").len(), 1);
}

#[tokio::test]
async fn a_runtime_driven_call_denied_after_a_restart_never_runs_and_the_run_goes_on() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "writer",
        json!({"tools": {"allow": ["builtin:workspace.*", "builtin:dice.roll"], "approvalRequired": ["builtin:dice.roll"], "maxRounds": 8}}),
    ));
    let mut script = vec![turn(&[("dice_roll", json!({"notation": "d6"}))])];
    script.extend(write_commit_finish().as_array().unwrap().iter().cloned());
    let (held, after) = held_then_restarted(&a, "rs3", Value::Array(script)).await;
    let deny = Decision::Deny {
        by: "bob".into(),
        reason: "no gambling".into(),
    };
    after
        .rt
        .decide_approval(&held.id, None, deny)
        .await
        .unwrap();
    // The model was told, went on with its other turns, and the run completed.
    assert!(
        eventually(|| a.mem.sealed("rs3") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("rs3")
    );
    let rolled = |kind: &str| {
        a.mem
            .payloads("rs3", kind)
            .into_iter()
            .filter(|p| p["toolId"] == "builtin:dice.roll")
            .collect::<Vec<_>>()
    };
    assert!(
        rolled("tool_call_started").is_empty(),
        "a denied call never runs"
    );
    assert!(rolled("tool_call_completed").is_empty());
    let failed = rolled("tool_call_failed");
    assert_eq!(failed.len(), 1);
    let result: Value = serde_json::from_slice(
        &a.mem
            .object(failed[0]["resultPath"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let content = result["result"]["content"].as_str().unwrap();
    assert!(content.contains("denied by bob: no gambling"), "{content}");
    assert_eq!(a.mem.payloads("rs3", "model_request_created").len(), 4);
}

/// A host-driven run that delegated a task and holds a call when the runtime stops: after the
/// restart the turn is still held, and the task — its child's loop gone — is failed as
/// interrupted with a clear reason, journalled, and answered to the parent's `agent.await`; a new
/// delegation is numbered after it.
#[tokio::test]
async fn a_task_running_at_a_restart_is_failed_as_interrupted_and_the_parent_is_told() {
    let a = alone().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("worker.json");
    // The worker thinks for a minute: it is still running when the runtime stops.
    let slow = json!([{"delayMs": 60_000, "tool_calls": [{"function": {"name": "task_return", "arguments": {"summary": "late"}}}]}]);
    std::fs::write(&script, slow.to_string()).unwrap();
    a.mem.put_profile(agent(
        "worker",
        json!({"model": {"kind": "scripted", "script": script.display().to_string()}}),
    ));
    a.mem.put_profile(agent(
        "lead",
        json!({"tools": {"allow": ["builtin:workspace.*", "builtin:agent.*", "builtin:dice.roll"], "approvalRequired": ["builtin:dice.roll"], "maxRounds": 8}}),
    ));
    let opened = a.host_run("rs4", "lead").await;
    let first = a
        .first_turn(
            &opened,
            &support::calls(&[
                (
                    "c1",
                    "agent_delegate",
                    json!({"agentId": "worker", "task": "Find the answer."}),
                ),
                ("c2", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(first.awaiting.len(), 1);
    assert!(
        eventually(|| !a.mem.payloads("rs4", "agent_task_started").is_empty()).await,
        "the task is running"
    );
    let rt = a.restart().await;
    let run = rt.run("rs4").unwrap();
    let task = run
        .agents
        .task("task-1")
        .expect("read back from the journal");
    assert_eq!(task.status, toolplane_runtime::state::TaskStatus::Failed);
    let failure = task.failure.unwrap();
    assert_eq!(failure.code, "runtime.interrupted");
    assert!(failure.message.contains("restarted"), "{}", failure.message);
    let failed = a.mem.payloads("rs4", "agent_task_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["taskId"], "task-1");
    assert_eq!(failed[0]["failure"]["code"], "runtime.interrupted");

    let approve = Decision::Approve {
        by: "alice".into(),
        reason: "fine".into(),
        remember: false,
    };
    rt.decide_approval(&first.awaiting[0].approval_id, None, approve)
        .await
        .unwrap();
    let inv = rt.invocation(&opened.invocation.id).unwrap();
    let done = rt
        .collect_host_calls(
            &inv,
            &opened.turn_id,
            std::time::Duration::from_secs(5),
            None,
        )
        .await
        .unwrap();
    let next = done.next_turn_id.unwrap();
    let awaited = support::host_turn(
        &rt,
        &inv,
        &next,
        &support::calls(&[("c3", "agent_await", json!({"taskIds": ["task-1"]}))]),
    )
    .await
    .unwrap();
    let answer = &awaited.outcome.results[0].content;
    assert!(answer.contains("restarted"), "{answer}");
    let again = support::host_turn(
        &rt,
        &inv,
        awaited.next_turn_id.as_deref().unwrap(),
        &support::calls(&[(
            "c4",
            "agent_delegate",
            json!({"agentId": "worker", "task": "Try again."}),
        )]),
    )
    .await
    .unwrap();
    assert!(
        again.outcome.results[0].content.contains("task-2"),
        "{}",
        again.outcome.results[0].content
    );
}
