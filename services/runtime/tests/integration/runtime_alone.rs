//! The runtime alone, over its ports in memory (tests/integration/support): the turn contract, budgets, finish
//! and commit, drift recovery, delegation, handoff and cycle detection, each checked by what a
//! host or user sees — the answers, the journal, the chat message. No socket is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::json;
use support::{agent, alone, alone_with, calls, eventually, host_turn, scripted, turn, writer_run};
use toolplane_core::error as codes;
use toolplane_runtime::lifecycle::NewRun;
use toolplane_runtime::state::{InvocationStatus, RunStatus};
use toolplane_store::Store as _;

#[tokio::test]
async fn calls_for_a_stale_turn_are_refused_and_an_unknown_alias_fails_the_invocation() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("r1", "writer").await;
    let inv = &opened.invocation;

    let stale = host_turn(
        &a.rt,
        inv,
        &format!("{}:7", inv.id),
        &calls(&[("c1", "dice_roll", json!({"notation": "d6"}))]),
    )
    .await
    .unwrap_err();
    assert_eq!(stale.code(), codes::RUNTIME_STALE_TURN);

    let unknown = a
        .first_turn(&opened, &calls(&[("c1", "no_such_tool", json!({}))]))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), codes::MODEL_UNKNOWN_TOOL_ALIAS);
    assert_eq!(inv.inner.lock().await.status, InvocationStatus::Failed);
    // The invocation was the root of a host-driven run: the run fails with it.
    assert_eq!(a.rt.run("r1").unwrap().snapshot().status, RunStatus::Failed);
    assert!(a.mem.kinds("r1").contains(&"run_failed".to_owned()));
}

#[tokio::test]
async fn finishing_before_committing_is_refused_then_commit_and_finish_complete_the_run() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("r2", "writer").await;
    let inv = &opened.invocation;

    let early = a
        .first_turn(
            &opened,
            &calls(&[("c1", "workspace_finish", json!({"summary": "done"}))]),
        )
        .await
        .unwrap();
    let refusal = &early.outcome.results[0];
    assert!(refusal.is_error);
    assert_eq!(
        refusal.error_code.as_deref(),
        Some(codes::WORKSPACE_COMMIT_REQUIRED.as_str())
    );
    assert!(refusal.content.contains("workspace_commit"));
    assert_eq!(early.status, InvocationStatus::Open);

    let write = host_turn(
        &a.rt,
        inv,
        early.next_turn_id.as_deref().unwrap(),
        &calls(&[
            (
                "c2",
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "The answer is 42."}),
            ),
            ("c3", "workspace_commit", json!({})),
        ]),
    )
    .await
    .unwrap();
    assert!(write.outcome.results.iter().all(|r| !r.is_error));
    assert_eq!(a.mem.message("r2").as_deref(), Some("The answer is 42."));

    let finish = host_turn(
        &a.rt,
        inv,
        write.next_turn_id.as_deref().unwrap(),
        &calls(&[("c4", "workspace_finish", json!({"summary": "done"}))]),
    )
    .await
    .unwrap();
    assert_eq!(finish.status, InvocationStatus::Finished);
    assert_eq!(finish.next_turn_id, None);
    assert_eq!(
        a.rt.run("r2").unwrap().snapshot().status,
        RunStatus::Completed
    );
    assert_eq!(a.mem.sealed("r2"), Some(RunStatus::Completed));
    let kinds = a.mem.kinds("r2");
    assert!(kinds.contains(&"chat_message_committed".to_owned()));
    assert_eq!(kinds.last().map(String::as_str), Some("run_completed"));
    // Every call's arguments and result are audited.
    let results = a.mem.payloads("r2", "tool_result_stored");
    assert_eq!(results.len(), 4);
    for r in results {
        assert!(a.mem.object(r["path"].as_str().unwrap()).is_some());
    }
}

#[tokio::test]
async fn a_finishing_tool_must_be_the_last_call_of_its_turn() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("r3", "writer").await;
    let turn = a
        .first_turn(
            &opened,
            &calls(&[
                ("c1", "workspace_finish", json!({"summary": "early"})),
                ("c2", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(
        turn.outcome.results[0].error_code.as_deref(),
        Some(codes::AGENT_TOOL_AFTER_FINISH.as_str())
    );
    assert!(!turn.outcome.results[1].is_error, "the dice still roll");
    assert_eq!(turn.status, InvocationStatus::Open);
}

#[tokio::test]
async fn an_invocation_that_uses_all_its_rounds_fails_with_the_round_budget() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "brief",
        json!({"tools": {"allow": ["builtin:dice.roll"], "maxRounds": 2}}),
    ));
    let opened = a.host_run("r4", "brief").await;
    let inv = &opened.invocation;
    let mut turn_id = opened.turn_id.clone();
    let mut last = None;
    for i in 0..2 {
        let t = host_turn(
            &a.rt,
            inv,
            &turn_id,
            &calls(&[(&format!("c{i}"), "dice_roll", json!({"notation": "d6"}))]),
        )
        .await
        .unwrap();
        if let Some(next) = &t.next_turn_id {
            turn_id = next.clone();
        }
        last = Some(t);
    }
    let last = last.unwrap();
    assert_eq!(last.status, InvocationStatus::Failed);
    assert_eq!(
        last.failure.unwrap().code,
        codes::AGENT_MAX_TOOL_ROUNDS_EXCEEDED.as_str()
    );
}

#[tokio::test]
async fn the_same_write_repeated_is_warned_about_then_stops_the_invocation() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "looper",
        json!({"tools": {"allow": ["builtin:workspace.*"], "maxRounds": 40}}),
    ));
    let opened = a.host_run("r5", "looper").await;
    let inv = &opened.invocation;
    let mut turn_id = opened.turn_id.clone();
    let write = json!({"path": "output/x.md", "content": "same"});
    let mut warned = false;
    for i in 0..20 {
        let t = host_turn(
            &a.rt,
            inv,
            &turn_id,
            &calls(&[(&format!("c{i}"), "workspace_write_file", write.clone())]),
        )
        .await
        .unwrap();
        warned |= t.outcome.results[0].content.contains("times in a row");
        match t.next_turn_id {
            Some(next) => turn_id = next,
            None => {
                assert!(warned, "a warning comes before the stop");
                assert_eq!(t.status, InvocationStatus::Failed);
                assert_eq!(
                    t.outcome.results[0].error_code.as_deref(),
                    Some(codes::AGENT_CYCLE_DETECTED.as_str())
                );
                let verdicts: Vec<String> = a
                    .mem
                    .payloads("r5", "cycle_detected")
                    .iter()
                    .map(|p| p["verdict"].as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(verdicts.last().map(String::as_str), Some("stop"));
                assert!(verdicts.contains(&"warn".to_owned()));
                return;
            }
        }
    }
    panic!("twenty identical writes never stopped the invocation");
}

#[tokio::test]
async fn a_handoff_passes_the_run_and_later_calls_of_the_old_owner_are_not_run() {
    let a = alone().await;
    a.mem.put_profile(agent("a", json!({})));
    a.mem.put_profile(agent("b", json!({})));
    let opened = a.host_run("r6", "a").await;
    let turn = a
        .first_turn(
            &opened,
            &calls(&[(
                "c1",
                "agent_handoff",
                json!({"agentId": "b", "brief": "Finish the report."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(turn.status, InvocationStatus::HandedOff);
    let handoff = turn.handoff.expect("the target's invocation");
    assert_eq!(handoff.brief, "Finish the report.");
    assert_eq!(handoff.target.id, "b");
    let run = a.rt.run("r6").unwrap().snapshot();
    assert_eq!(run.active_invocation_id, handoff.opened.invocation.id);

    let after = a
        .first_turn(
            &opened,
            &calls(&[("c2", "dice_roll", json!({"notation": "d6"}))]),
        )
        .await
        .unwrap();
    assert_eq!(
        after.outcome.results[0].error_code.as_deref(),
        Some(codes::AGENT_TOOL_AFTER_FINISH.as_str())
    );
    assert!(
        after.outcome.results[0]
            .content
            .contains(&handoff.opened.invocation.id)
    );
}

#[tokio::test]
async fn a_handoff_to_an_agent_that_refuses_handoffs_is_answered_not_carried_out() {
    let a = alone().await;
    a.mem.put_profile(agent("a", json!({})));
    a.mem.put_profile(agent(
        "closed",
        json!({"delegation": {"callable": true, "allowAsHandoffTarget": false}}),
    ));
    let opened = a.host_run("r7", "a").await;
    let turn = a
        .first_turn(
            &opened,
            &calls(&[(
                "c1",
                "agent_handoff",
                json!({"agentId": "closed", "brief": "Take over."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(turn.status, InvocationStatus::Open);
    assert_eq!(
        turn.outcome.results[0].error_code.as_deref(),
        Some(codes::AGENT_NOT_ALLOWED.as_str())
    );
    assert!(
        turn.outcome.results[0]
            .content
            .contains("does not accept handoffs")
    );
}

#[tokio::test]
async fn a_delegated_task_runs_on_its_own_model_and_its_result_reaches_the_parent() {
    let a = alone().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("worker.json");
    std::fs::write(
        &script,
        json!([turn(&[(
            "task_return",
            json!({"summary": "The answer is 42."})
        )])])
        .to_string(),
    )
    .unwrap();
    a.mem.put_profile(agent(
        "worker",
        json!({"model": {"kind": "scripted", "script": script.display().to_string()}}),
    ));
    a.mem.put_profile(agent("lead", json!({})));
    let opened = a.host_run("r8", "lead").await;
    let inv = &opened.invocation;

    let delegated = a
        .first_turn(
            &opened,
            &calls(&[(
                "c1",
                "agent_delegate",
                json!({"agentId": "worker", "task": "Find the answer."}),
            )]),
        )
        .await
        .unwrap();
    assert!(!delegated.outcome.results[0].is_error);
    assert!(delegated.outcome.results[0].content.contains("task-1"));

    let awaited = host_turn(
        &a.rt,
        inv,
        delegated.next_turn_id.as_deref().unwrap(),
        &calls(&[("c2", "agent_await", json!({"taskIds": ["task-1"]}))]),
    )
    .await
    .unwrap();
    let answer = &awaited.outcome.results[0];
    assert!(!answer.is_error, "{}", answer.content);
    assert!(
        answer.content.contains("The answer is 42."),
        "{}",
        answer.content
    );
    assert!(answer.content.contains("completed"));

    let run = a.rt.run("r8").unwrap();
    let task = run.agents.task("task-1").unwrap();
    assert_eq!(task.status, toolplane_runtime::state::TaskStatus::Completed);
    let result = a
        .mem
        .object(&format!("agent-results/{}.json", task.child_invocation_id))
        .expect("the child's result document");
    let result: serde_json::Value = serde_json::from_slice(&result).unwrap();
    assert_eq!(result["summary"], "The answer is 42.");
    let kinds = a.mem.kinds("r8");
    let registered = kinds
        .iter()
        .position(|k| k == "agent_task_registered")
        .unwrap();
    let started = kinds
        .iter()
        .position(|k| k == "agent_task_started")
        .unwrap();
    assert!(
        registered < started,
        "a task starts only once it is journalled"
    );
}

#[tokio::test]
async fn a_runtime_driven_run_recovers_from_a_plain_text_answer_and_finishes() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let model = scripted(json!([
        {"content": "Here is my answer: 42."},
        turn(&[("workspace_commit", json!({"path": "output/direct_output.md"}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]));
    let run = a.start(writer_run("r9"), model).await;
    assert!(
        eventually(|| run.snapshot().status.is_terminal()).await,
        "the run ends"
    );
    assert_eq!(run.snapshot().status, RunStatus::Completed);
    let kinds = a.mem.kinds("r9");
    assert!(kinds.contains(&"direct_output_captured".to_owned()));
    assert!(kinds.contains(&"drift_recovery_attempted".to_owned()));
    assert_eq!(
        a.mem.file("output/direct_output.md").as_deref(),
        Some("Here is my answer: 42.\n")
    );
    assert_eq!(
        a.mem.message("r9").as_deref(),
        Some("Here is my answer: 42.\n")
    );
}

#[tokio::test]
async fn a_cancelled_run_ends_cancelled_and_takes_no_more_calls() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("r10", "writer").await;
    let run = a.rt.run("r10").unwrap();
    a.rt.cancel_run(&run, "user stopped it").await.unwrap();
    assert_eq!(run.snapshot().status, RunStatus::Cancelled);
    assert_eq!(a.mem.sealed("r10"), Some(RunStatus::Cancelled));
    let refused = a
        .first_turn(
            &opened,
            &calls(&[("c1", "dice_roll", json!({"notation": "d6"}))]),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), codes::RUNTIME_INVOCATION_NOT_OPEN);
    assert!(a.mem.executed().is_empty());
}

#[tokio::test]
async fn a_run_left_running_by_a_stopped_runtime_is_failed_as_interrupted_on_restart() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let _opened = a.host_run("r11", "writer").await;
    let before = a.mem.journal("r11").len();

    let restarted = a.restart().await;
    let run = restarted.run("r11").unwrap().snapshot();
    assert_eq!(run.status, RunStatus::Failed);
    let failure = run.failure.unwrap();
    assert_eq!(failure.code, codes::RUNTIME_INTERRUPTED.as_str());
    assert!(failure.retryable);
    // The journal goes on where it ended and says why the run failed.
    let journal = a.mem.journal("r11");
    assert_eq!(journal[before].seq, journal[before - 1].seq + 1);
    assert_eq!(journal.last().unwrap().kind, "run_failed");
    assert_eq!(a.mem.sealed("r11"), Some(RunStatus::Failed));
}

#[tokio::test]
async fn over_a_shared_store_a_starting_runtime_leaves_unfinished_runs_alone() {
    // Another runtime sharing the store may be driving the run: failing it as interrupted would
    // end a live run.
    let a = alone_with(|cfg| {
        cfg.store = Some(toolplane_store::StoreConfig::Postgres {
            connection: "host=/nowhere".into(),
            table: "runtime".into(),
            max_connections: 1,
        });
    })
    .await;
    a.mem.put_profile(agent("writer", json!({})));
    let _opened = a.host_run("r11s", "writer").await;
    let before = a.mem.journal("r11s").len();

    let _started = a.restart().await;
    let runs = toolplane_store::Key::new("runs").unwrap();
    let keys = a.store.list(Some(&runs), None, 1000).await.unwrap().keys;
    let key = keys
        .iter()
        .find(|k| k.as_str().ends_with("/r11s.json"))
        .unwrap();
    let stored = a.store.get(key).await.unwrap().unwrap();
    let record: toolplane_runtime::state::run::RunRecord =
        serde_json::from_slice(&stored.bytes).unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(a.mem.journal("r11s").len(), before, "nothing journalled");
    assert_eq!(a.mem.sealed("r11s"), None);
}

#[tokio::test]
async fn the_first_answer_written_is_published_once_before_any_commit() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("r12", "writer").await;
    let write = |id: &str, text: &str| {
        calls(&[(
            id,
            "workspace_write_file",
            json!({"path": "output/main.md", "content": text}),
        )])
    };
    let first = a
        .first_turn(&opened, &write("c1", "Draft one."))
        .await
        .unwrap();
    assert_eq!(a.mem.message("r12").as_deref(), Some("Draft one."));
    let published = a.mem.payloads("r12", "chat_message_committed");
    assert_eq!(published.len(), 1);
    assert_eq!(published[0]["auto"], true);

    host_turn(
        &a.rt,
        &opened.invocation,
        first.next_turn_id.as_deref().unwrap(),
        &write("c2", "Draft two."),
    )
    .await
    .unwrap();
    assert_eq!(
        a.mem.message("r12").as_deref(),
        Some("Draft one."),
        "only the first draft is published without a commit"
    );
}

#[tokio::test]
async fn delegating_to_an_agent_without_a_model_is_refused_and_journalled() {
    let a = alone().await;
    a.mem.put_profile(agent("lead", json!({})));
    a.mem.put_profile(agent("idle", json!({})));
    let opened = a.host_run("r13", "lead").await;
    let turn = a
        .first_turn(
            &opened,
            &calls(&[(
                "c1",
                "agent_delegate",
                json!({"agentId": "idle", "task": "Anything."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(
        turn.outcome.results[0].error_code.as_deref(),
        Some(codes::AGENT_NO_MODEL.as_str())
    );
    let unavailable = a.mem.payloads("r13", "agent_target_unavailable");
    assert_eq!(unavailable[0]["targets"][0]["agentId"], "idle");
    assert!(
        a.rt.run("r13").unwrap().agents.is_empty(),
        "no task was registered"
    );
}

async fn start_scripted(
    a: &support::Alone,
    run_id: &str,
    retries: u32,
) -> std::sync::Arc<toolplane_runtime::state::Run> {
    let mut model = scripted(json!([
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "42"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]));
    model.max_retries = retries;
    a.start(writer_run(run_id), model).await
}

#[tokio::test]
async fn a_model_that_fails_twice_is_retried_and_the_run_completes() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    a.mem.fail_model_calls(2);
    let run = start_scripted(&a, "r14", 3).await;
    assert!(eventually(|| run.snapshot().status.is_terminal()).await);
    assert_eq!(run.snapshot().status, RunStatus::Completed);
    assert_eq!(a.mem.payloads("r14", "model_call_attempt_failed").len(), 2);
    assert_eq!(a.mem.payloads("r14", "model_call_retry_scheduled").len(), 2);
    assert_eq!(a.mem.message("r14").as_deref(), Some("42"));
}

#[tokio::test]
async fn a_model_that_keeps_failing_fails_the_run_after_its_retries() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    a.mem.fail_model_calls(100);
    let run = start_scripted(&a, "r15", 2).await;
    assert_failed_with(&run, codes::MODEL_CALL_FAILED).await;
    assert_eq!(a.mem.payloads("r15", "model_call_attempt_started").len(), 3);
}

/// Waits (at most two seconds) for `run` to end, and checks it failed with `code`.
async fn assert_failed_with(run: &toolplane_runtime::state::Run, code: codes::ErrorCode) {
    assert!(eventually(|| run.snapshot().status.is_terminal()).await);
    let record = run.snapshot();
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(record.failure.unwrap().code, code.as_str());
}

/// A tool of an external host whose input schema wants `{"query": string ≤ 20, "limit" ≥ 1}`.
fn crm_lookup() -> toolplane_core::descriptor::ToolDescriptor {
    toolplane_core::descriptor::ToolDescriptor::new(
        toolplane_core::ToolId::parse("ext/crm:lookup").unwrap(),
        "Look a customer up.",
        json!({"type": "object", "properties": {"query": {"type": "string", "maxLength": 20}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"], "additionalProperties": false}),
    )
    .unwrap()
}

#[tokio::test]
async fn arguments_that_break_an_external_tools_schema_are_answered_and_never_sent() {
    let a = alone().await;
    a.mem.add_tool(
        toolplane_core::ToolOrigin::External {
            host_id: "crm".into(),
            endpoint: "http://crm.test".into(),
        },
        crm_lookup(),
        None,
    );
    a.mem.put_profile(agent(
        "clerk",
        json!({"tools": {"allow": ["ext/crm:*", "builtin:workspace.*"]}}),
    ));
    let opened = a.host_run("rs1", "clerk").await;
    let turn = a
        .first_turn(
            &opened,
            &calls(&[
                (
                    "c1",
                    "ext__crm__lookup",
                    json!({"query": 42, "limit": 0, "secret": "x"}),
                ),
                ("c2", "ext__crm__lookup", json!({"query": "acme"})),
            ]),
        )
        .await
        .unwrap();
    let bad = &turn.outcome.results[0];
    assert!(bad.is_error);
    assert_eq!(
        bad.error_code.as_deref(),
        Some(codes::TOOL_INVALID_ARGUMENTS.as_str())
    );
    for path in ["`/query`", "`/limit`", "`(root)`"] {
        assert!(bad.content.contains(path), "{path} in {}", bad.content);
    }
    let listed = bad.structured.as_ref().unwrap();
    assert_eq!(listed["total"], 3);
    let good = &turn.outcome.results[1];
    assert!(!good.is_error, "{}", good.content);
    // Only the valid call reached the host.
    assert_eq!(a.mem.executed(), ["ext/crm:lookup"]);
}

#[tokio::test]
async fn an_mcp_result_that_breaks_its_output_schema_is_a_recoverable_error() {
    let a = alone().await;
    let reg = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
    let tool = |name: &str| {
        toolplane_core::descriptor::ToolDescriptor::new(
            toolplane_core::ToolId::parse(&format!("mcp/{reg}:{name}")).unwrap(),
            "Weather.",
            json!({"type": "object"}),
        )
        .unwrap()
        .with_output_schema(Some(json!({"type": "object", "properties": {"celsius": {"type": "number"}}, "required": ["celsius"]})))
        .unwrap()
    };
    let origin = toolplane_core::ToolOrigin::Mcp {
        registration_id: reg.into(),
        server_name: "weather".into(),
        permission: toolplane_core::catalog::McpPermission::Allow,
    };
    a.mem
        .add_tool(origin.clone(), tool("good"), Some(json!({"celsius": 21.5})));
    a.mem
        .add_tool(origin, tool("bad"), Some(json!({"fahrenheit": "hot"})));
    a.mem.put_profile(agent(
        "forecaster",
        json!({"tools": {"allow": ["mcp:weather/*"]}}),
    ));
    let opened = a.host_run("rs2", "forecaster").await;
    let turn = a
        .first_turn(
            &opened,
            &calls(&[
                ("c1", "mcp__weather__good", json!({})),
                ("c2", "mcp__weather__bad", json!({})),
            ]),
        )
        .await
        .unwrap();
    let [good, bad] = &turn.outcome.results[..] else {
        panic!("two results")
    };
    assert!(!good.is_error, "{}", good.content);
    assert_eq!(good.structured, Some(json!({"celsius": 21.5})));
    assert!(bad.is_error);
    assert_eq!(
        bad.error_code.as_deref(),
        Some(codes::TOOL_INVALID_RESULT.as_str())
    );
    assert!(bad.content.contains("celsius"), "{}", bad.content);
    assert!(
        bad.content.contains("external ok"),
        "what the server returned stays readable"
    );
}

#[tokio::test]
async fn a_cancel_does_not_wait_for_a_slow_workspace_tool() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("rs3", "writer").await;
    let (rt, inv, turn_id) = (
        a.rt.clone(),
        opened.invocation.clone(),
        opened.turn_id.clone(),
    );
    let turn = tokio::spawn(async move {
        host_turn(
            &rt,
            &inv,
            &turn_id,
            &calls(&[(
                "c1",
                "workspace_write_file",
                json!({"path": support::SLOW_PATH, "content": "x"}),
            )]),
        )
        .await
    });
    assert!(eventually(|| a.mem.executed().len() == 1).await);
    let run = a.rt.run("rs3").unwrap();
    a.rt.cancel_run(&run, "user stopped it").await.unwrap();
    // The slow tool takes a minute; the turn answers as soon as the run is cancelled.
    let answered = tokio::time::timeout(std::time::Duration::from_secs(20), turn)
        .await
        .expect("the turn answers without waiting for the tool")
        .unwrap()
        .unwrap();
    let result = &answered.outcome.results[0];
    assert_eq!(
        result.error_code.as_deref(),
        Some(codes::TOOL_CANCELLED.as_str())
    );
    assert!(eventually(|| a.mem.sealed("rs3") == Some(RunStatus::Cancelled)).await);
    // The call is journalled as failed with the cancel's code before the run ends.
    let kinds = a.mem.kinds("rs3");
    let at = |k: &str| kinds.iter().position(|x| x == k);
    assert!(at("tool_call_failed").is_some(), "{kinds:?}");
    assert!(at("tool_call_failed") < at("run_cancelled"), "{kinds:?}");
}

/// The number of tool calls of run `run` that its call budget let through: every call answered,
/// except the ones refused for the run's budget.
fn calls_let_through(a: &support::Alone, run: &str) -> usize {
    ["tool_call_completed", "tool_call_failed"]
        .iter()
        .flat_map(|k| a.mem.payloads(run, k))
        .filter(|p| p["errorCode"] != codes::AGENT_RUN_BUDGET_EXHAUSTED.as_str())
        .count()
}

#[tokio::test]
async fn a_run_whose_children_together_exceed_its_call_budget_is_stopped() {
    let a = alone().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("worker.json");
    let roll = || turn(&[("dice_roll", json!({"notation": "d6"}))]);
    let returns = turn(&[("task_return", json!({"summary": "rolled"}))]);
    std::fs::write(
        &script,
        json!([roll(), roll(), roll(), returns]).to_string(),
    )
    .unwrap();
    a.mem.put_profile(agent(
        "worker",
        json!({"model": {"kind": "scripted", "script": script.display().to_string()}}),
    ));
    // Each child alone would stay within its own invocation's 200 calls.
    a.mem
        .put_profile(agent("lead", json!({"runBudget": {"maxToolCalls": 4}})));
    let delegate = |n: &str| {
        (
            "agent_delegate",
            json!({"agentId": "worker", "task": format!("Roll three times ({n}).")}),
        )
    };
    let model = scripted(json!([
        turn(&[delegate("a"), delegate("b")]),
        turn(&[("agent_await", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]));
    let run = a
        .start(
            NewRun {
                run_id: "rb1".into(),
                profile_id: "lead".into(),
                background: true,
                initial_user_message: "Have two workers roll dice.".into(),
                ..NewRun::default()
            },
            model,
        )
        .await;
    assert_failed_with(&run, codes::AGENT_RUN_BUDGET_EXHAUSTED).await;
    // Two delegations, the children's rolls and the await together: four ran, the rest were
    // refused with the run's budget, and no finish came.
    assert_eq!(calls_let_through(&a, "rb1"), 4);
    let refused: Vec<_> = a
        .mem
        .payloads("rb1", "tool_call_failed")
        .into_iter()
        .filter(|p| p["errorCode"] == codes::AGENT_RUN_BUDGET_EXHAUSTED.as_str())
        .collect();
    assert!(!refused.is_empty());
    assert!(
        refused.iter().any(|p| p["toolId"] == "builtin:dice.roll"),
        "a child's call was refused: {refused:?}"
    );
    let stopped = a.mem.payloads("rb1", "run_budget_exhausted");
    assert!(!stopped.is_empty());
    assert_eq!(stopped[0]["maxToolCalls"], 4);
    assert!(!a.mem.kinds("rb1").contains(&"run_completed".to_owned()));
}

#[tokio::test]
async fn model_tokens_reported_by_the_provider_stop_a_runtime_driven_run() {
    let a = alone().await;
    a.mem.put_profile(agent(
        "writer",
        json!({"runBudget": {"maxModelTokens": 1000}}),
    ));
    let usage = json!({"prompt_tokens": 400, "completion_tokens": 100, "total_tokens": 500});
    let with_usage = |mut t: serde_json::Value| {
        t["usage"] = usage.clone();
        t
    };
    let model = scripted(json!([
        with_usage(turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "42"})
        )])),
        with_usage(turn(&[("dice_roll", json!({"notation": "d6"}))])),
        with_usage(turn(&[("workspace_commit", json!({}))])),
        with_usage(turn(&[("workspace_finish", json!({"summary": "done"}))])),
    ]));
    let run = a.start(writer_run("rb2"), model).await;
    assert_failed_with(&run, codes::AGENT_RUN_BUDGET_EXHAUSTED).await;
    // Two responses of 500 tokens used the budget up: no third request was made.
    assert_eq!(a.mem.payloads("rb2", "model_request_created").len(), 2);
    let completed = a.mem.payloads("rb2", "model_completed");
    assert_eq!(completed[0]["usage"]["totalTokens"], 500);
    assert_eq!(completed[1]["runTokensUsed"], 1000);
    let stopped = a.mem.payloads("rb2", "run_budget_exhausted");
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["tokensUsed"], 1000);
    assert_eq!(stopped[0]["maxModelTokens"], 1000);
    assert_eq!(
        a.mem.message("rb2").as_deref(),
        Some("42"),
        "auto-published"
    );
}

#[tokio::test]
async fn a_host_driven_call_over_the_runs_budget_is_refused_and_the_agent_can_still_finish() {
    let a = alone().await;
    // The run's creator lowers the profile's budget of 50 calls to 2.
    a.mem
        .put_profile(agent("writer", json!({"runBudget": {"maxToolCalls": 50}})));
    let run =
        a.rt.create_run(NewRun {
            run_id: "rb3".into(),
            profile_id: "writer".into(),
            visible_roots: vec!["output/".into()],
            writable_roots: vec!["output/".into()],
            driver: Some(toolplane_runtime::state::Driver::Host),
            run_budget: toolplane_core::run_budget::RunBudgetLimits {
                max_tool_calls: Some(2),
                max_model_tokens: None,
            },
            ..NewRun::default()
        })
        .await
        .unwrap();
    let opened =
        a.rt.open_invocation(
            &run,
            "",
            toolplane_core::snapshot::ExitPolicy::Root,
            toolplane_model::ProviderFormat::OpenAiChat,
            toolplane_core::turn::ToolChoice::Auto,
            toolplane_runtime::state::Driver::Host,
        )
        .await
        .unwrap();
    let write = json!({"path": "output/main.md", "content": "42"});
    let first = a
        .first_turn(
            &opened,
            &calls(&[
                ("c1", "workspace_write_file", write),
                ("c2", "dice_roll", json!({"notation": "d6"})),
                ("c3", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    let refused = &first.outcome.results[2];
    assert_eq!(
        refused.error_code.as_deref(),
        Some(codes::AGENT_RUN_BUDGET_EXHAUSTED.as_str())
    );
    assert!(refused.content.contains("all 2 of its tool calls"));
    assert_eq!(
        first.status,
        InvocationStatus::Open,
        "a refusal is recoverable"
    );
    assert_eq!(
        a.mem.payloads("rb3", "run_budget_set")[0]["maxToolCalls"],
        2
    );
    assert_eq!(a.mem.payloads("rb3", "run_budget_exhausted").len(), 1);

    // Commit and finish are not counted: the agent wraps up with what it has.
    let last = host_turn(
        &a.rt,
        &opened.invocation,
        first.next_turn_id.as_deref().unwrap(),
        &calls(&[
            ("c4", "workspace_commit", json!({})),
            ("c5", "workspace_finish", json!({"summary": "done"})),
        ]),
    )
    .await
    .unwrap();
    assert!(last.outcome.results.iter().all(|r| !r.is_error));
    assert_eq!(run.snapshot().status, RunStatus::Completed);
    assert_eq!(a.mem.message("rb3").as_deref(), Some("42"));
}
