//! Host-driven runs end to end over real sockets, all four services: the host calls its own model
//! and hands the runtime each turn's provider-native tool calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;
const ANTHROPIC: pb::ProviderFormat = pb::ProviderFormat::AnthropicMessages;

fn results(r: &pb::ExecuteToolCallsResponse) -> Vec<(String, bool, Option<String>)> {
    r.results
        .iter()
        .map(|x| (x.content.clone(), x.is_error, x.error_code.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_host_driven_run_lists_reads_writes_patches_searches_commits_and_finishes() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let run = h.create_run("writer", false).await;
    let inv = h.open(&run, OPENAI).await;
    let tools: Value = serde_json::from_str(&inv.tools_json).unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"workspace_write_file") && names.contains(&"dice_roll"),
        "{names:?}"
    );
    assert_eq!(tools["tool_choice"], "auto");
    let id = inv.invocation_id.clone();
    let mut turn = inv.first_turn.unwrap().turn_id;

    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "call_0",
                    "workspace_write_file",
                    json!({"path": "output/main.md", "content": "# Notes\nhello world\n"}),
                ),
                ("call_1", "workspace_list_files", json!({})),
            ]),
        )
        .await
        .unwrap();
    let out = results(&r);
    assert!(!out[0].1 && out[0].0.contains("output/main.md"), "{out:?}");
    assert!(
        out[1].0.contains("output/main.md"),
        "list shows the new file: {out:?}"
    );
    let messages: Value = serde_json::from_str(&r.result_messages_json).unwrap();
    assert_eq!(messages[0]["role"], "tool");
    assert_eq!(messages[0]["tool_call_id"], "call_0");
    assert_eq!(r.state, pb::InvocationState::Open as i32);
    turn = r.next_turn.unwrap().turn_id;

    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "call_2",
                    "workspace_read_file",
                    json!({"path": "output/main.md"}),
                ),
                (
                    "call_3",
                    "workspace_search_files",
                    json!({"query": "hello"}),
                ),
            ]),
        )
        .await
        .unwrap();
    let out = results(&r);
    assert!(out[0].0.contains("hello world"), "{out:?}");
    assert!(
        out[1].0.contains("output/main.md#L1-L2"),
        "search names the hit's lines: {out:?}"
    );
    assert!(
        r.results[1]
            .resource_refs
            .iter()
            .any(|x| x.uri.starts_with("workspace:output/main.md#L")),
        "{:?}",
        r.results[1].resource_refs
    );
    turn = r.next_turn.unwrap().turn_id;

    let r = h
        .execute(&id, &turn, OPENAI, openai_calls(&[("call_4", "workspace_apply_patch", json!({"path": "output/main.md", "old_string": "hello world", "new_string": "hello toolplane"})), ("call_5", "dice_roll", json!({"notation": "2d6+1"}))]))
        .await
        .unwrap();
    let out = results(&r);
    assert!(!out[0].1, "{out:?}");
    assert!(out[1].0.starts_with("2d6+1: ["), "{out:?}");
    turn = r.next_turn.unwrap().turn_id;

    // A foreground run cannot finish before an explicit commit (the auto-publish does not count).
    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[("call_6", "workspace_finish", json!({}))]),
        )
        .await
        .unwrap();
    assert_eq!(
        results(&r)[0].2.as_deref(),
        Some("workspace.commit_required")
    );
    assert_eq!(r.state, pb::InvocationState::Open as i32);
    turn = r.next_turn.unwrap().turn_id;

    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[("call_7", "workspace_commit", json!({}))]),
        )
        .await
        .unwrap();
    assert!(!results(&r)[0].1, "{:?}", results(&r));
    turn = r.next_turn.unwrap().turn_id;
    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[("call_8", "workspace_finish", json!({"summary": "done"}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.state, pb::InvocationState::Finished as i32);
    assert!(r.next_turn.is_none());

    let run_state = h.run(&run).await;
    assert_eq!(run_state.status, pb::RunStatus::Completed as i32);
    assert!(run_state.committed);

    // The chat message holds the patched file.
    let chat = h.chat("chat-1").await;
    assert_eq!(chat.last().unwrap().content, "# Notes\nhello toolplane\n");

    // The journal tells the whole story, in order.
    let journal = h.journal(&run).await;
    let kinds = types(&journal);
    for expected in [
        "run_created",
        "workspace_initialized",
        "agent_invocation_created",
        "context_assembled",
        "tool_call_requested",
        "tool_call_started",
        "tool_call_completed",
        "tool_result_stored",
        "workspace_file_written",
        "workspace_patch_applied",
        "chat_message_committed",
        "agent_loop_finished",
        "persistent_changes_committed",
        "run_completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "missing {expected} in {kinds:?}"
        );
    }
    assert!(
        journal.windows(2).all(|w| w[1].seq == w[0].seq + 1),
        "sequence numbers have no gaps"
    );
    let commits: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "chat_message_committed")
        .map(payload)
        .collect();
    assert_eq!(
        commits.iter().filter(|c| c["auto"] == true).count(),
        1,
        "one auto-publish: {commits:?}"
    );
    assert_eq!(
        commits.iter().filter(|c| c["auto"] == false).count(),
        1,
        "one explicit commit: {commits:?}"
    );
    let failed: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_failed")
        .map(payload)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["errorCode"], "workspace.commit_required");
    let context = journal
        .iter()
        .find(|e| e.r#type == "context_assembled")
        .map(payload)
        .unwrap();
    let snapshot_path = context["snapshotPath"].as_str().unwrap();
    let snapshot: Value =
        serde_json::from_slice(&h.object(&run, snapshot_path).await.unwrap()).unwrap();
    assert_eq!(snapshot["schemaVersion"], 1);

    // Every call's arguments and result are audited under its invocation, named by the call id's
    // digest.
    let done = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_completed")
        .map(payload)
        .find(|p| p["callId"] == "call_4")
        .unwrap();
    let args: Value = serde_json::from_slice(
        &h.object(&run, done["argsPath"].as_str().unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args["arguments"]["new_string"], "hello toolplane");
    assert!(
        done["argsPath"]
            .as_str()
            .unwrap()
            .starts_with(&format!("tool-args/{id}/call_"))
    );
    let result: Value = serde_json::from_slice(
        &h.object(&run, done["resultPath"].as_str().unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(result["result"]["callId"], "call_4");
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_host_driven_background_run_finishes_without_a_commit() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let run = h.create_run("writer", true).await;
    let inv = h.open(&run, ANTHROPIC).await;
    let tools: Value = serde_json::from_str(&inv.tools_json).unwrap();
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "workspace_write_file" && t["input_schema"]["type"] == "object")
    );
    let id = inv.invocation_id.clone();
    let turn = inv.first_turn.unwrap().turn_id;
    let r = h
        .execute(
            &id,
            &turn,
            ANTHROPIC,
            anthropic_calls(&[
                (
                    "toolu_1",
                    "workspace_write_file",
                    json!({"path": "scratch/plan.md", "content": "step 1"}),
                ),
                ("toolu_2", "dice_roll", json!({"notation": "d20"})),
            ]),
        )
        .await
        .unwrap();
    let messages: Value = serde_json::from_str(&r.result_messages_json).unwrap();
    assert_eq!(
        messages.as_array().unwrap().len(),
        1,
        "one user message of tool_result blocks"
    );
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"][0]["type"], "tool_result");
    assert_eq!(messages[0]["content"][0]["tool_use_id"], "toolu_1");
    let turn = r.next_turn.unwrap().turn_id;
    let r = h
        .execute(
            &id,
            &turn,
            ANTHROPIC,
            anthropic_calls(&[("toolu_3", "workspace_finish", json!({}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.state, pb::InvocationState::Finished as i32);
    assert_eq!(h.run(&run).await.status, pb::RunStatus::Completed as i32);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_violations_fail_the_invocation_and_bad_arguments_do_not() {
    let mut h = harness().await;
    h.put_profile(json!({"id": "tight", "tools": {"allow": ["builtin:dice.roll", "builtin:workspace.read_file"], "maxCallsPerTool": 2}})).await;

    // Bad arguments and budget exhaustion are results the model can read.
    let run = h.create_run("tight", true).await;
    let inv = h.open(&run, OPENAI).await;
    let id = inv.invocation_id.clone();
    let mut turn = inv.first_turn.unwrap().turn_id;
    let bad_json = json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "dice_roll", "arguments": "{not json"}}]});
    let r = h.execute(&id, &turn, OPENAI, bad_json).await.unwrap();
    assert_eq!(results(&r)[0].2.as_deref(), Some("tool.invalid_arguments"));
    turn = r.next_turn.unwrap().turn_id;
    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[
                ("c2", "dice_roll", json!({"notation": "d6"})),
                ("c3", "dice_roll", json!({"notation": "d6"})),
                ("c4", "dice_roll", json!({"notation": "d6"})),
            ]),
        )
        .await
        .unwrap();
    let out = results(&r);
    assert!(!out[0].1 && !out[1].1, "{out:?}");
    assert_eq!(out[2].2.as_deref(), Some("agent.tool_budget_exhausted"));
    assert!(
        r.results[2].content.contains("2"),
        "the message names the limit: {}",
        r.results[2].content
    );
    turn = r.next_turn.unwrap().turn_id;
    // A path outside the visible roots is refused by governance as a policy-denied result.
    let r = h
        .execute(
            &id,
            &turn,
            OPENAI,
            openai_calls(&[(
                "c5",
                "workspace_read_file",
                json!({"path": "input/secret.json"}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(results(&r)[0].2.as_deref(), Some("policy.denied"));
    assert!(
        r.next_turn.is_some(),
        "a denied call leaves the invocation open"
    );
    // A stale turn id is a contract violation.
    let stale = h
        .execute(
            &id,
            "nope:1",
            OPENAI,
            openai_calls(&[("c6", "dice_roll", json!({"notation": "d6"}))]),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition);
    assert!(
        stale.message().starts_with("runtime.stale_turn"),
        "{}",
        stale.message()
    );

    // Each fail-fast case fails its invocation with FAILED_PRECONDITION and the code.
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "unknown alias",
            openai_calls(&[("x1", "shell_exec", json!({}))]),
            "model.unknown_tool_alias",
        ),
        (
            "canonical name",
            openai_calls(&[("x1", "builtin:dice.roll", json!({"notation": "d6"}))]),
            "model.canonical_tool_name",
        ),
        (
            "missing call id",
            json!({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "dice_roll", "arguments": "{}"}}]}),
            "model.missing_call_id",
        ),
        (
            "duplicate call id",
            openai_calls(&[
                ("x1", "dice_roll", json!({"notation": "d6"})),
                ("x1", "dice_roll", json!({"notation": "d6"})),
            ]),
            "model.duplicate_call_id",
        ),
    ];
    for (name, calls, code) in cases {
        let run = h.create_run("tight", true).await;
        let inv = h.open(&run, OPENAI).await;
        let err = h
            .execute(
                &inv.invocation_id,
                &inv.first_turn.unwrap().turn_id,
                OPENAI,
                calls,
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::FailedPrecondition,
            "{name}: {}",
            err.message()
        );
        assert!(err.message().starts_with(code), "{name}: {}", err.message());
        let after = h.run(&run).await;
        assert_eq!(after.status, pb::RunStatus::Failed as i32, "{name}");
        assert_eq!(after.failure.unwrap().code, code, "{name}");
        // The failed invocation takes no more calls.
        let again = h
            .execute(
                &inv.invocation_id,
                "x",
                OPENAI,
                openai_calls(&[("y", "dice_roll", json!({}))]),
            )
            .await
            .unwrap_err();
        assert!(
            again.message().starts_with("runtime.invocation_not_open"),
            "{name}: {}",
            again.message()
        );
    }

    // Another invocation's alias is unknown here, and a call id reused across turns is caught
    // before any audit object is overwritten.
    h.put_profile(json!({"id": "other", "tools": {"allow": ["builtin:workspace.list_files"]}}))
        .await;
    let run = h.create_run("tight", true).await;
    let inv = h.open(&run, OPENAI).await;
    let r = h
        .execute(
            &inv.invocation_id,
            &inv.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[("same", "dice_roll", json!({"notation": "d4"}))]),
        )
        .await
        .unwrap();
    let first_result = h.object(&run, &r.calls[0].result_path).await.unwrap();
    let turn = r.next_turn.unwrap().turn_id;
    let err = h
        .execute(
            &inv.invocation_id,
            &turn,
            OPENAI,
            openai_calls(&[("same", "dice_roll", json!({"notation": "d8"}))]),
        )
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with("model.duplicate_call_id"),
        "{}",
        err.message()
    );
    assert_eq!(
        h.object(&run, &r.calls[0].result_path).await.unwrap(),
        first_result,
        "the audit object is unchanged"
    );
    let run2 = h.create_run("other", true).await;
    let inv2 = h.open(&run2, OPENAI).await;
    let err = h
        .execute(
            &inv2.invocation_id,
            &inv2.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[("z", "dice_roll", json!({"notation": "d6"}))]),
        )
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with("model.unknown_tool_alias"),
        "{}",
        err.message()
    );
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_progress_when_the_runtime_stops_is_failed_as_interrupted_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let mut h = harness_with(|c| c.data_dir = data.clone()).await;
    h.put_profile(writer_profile()).await;
    let run = h.create_run("writer", false).await;
    let inv = h.open(&run, OPENAI).await;
    let r = h
        .execute(
            &inv.invocation_id,
            &inv.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[(
                "c1",
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "draft"}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(r.state, pb::InvocationState::Open as i32);
    let before = h.journal(&run).await.len();
    h.plane.shutdown().await;

    let mut h = harness_with(|c| c.data_dir = data.clone()).await;
    let after = h.run(&run).await;
    assert_eq!(after.status, pb::RunStatus::Failed as i32);
    let failure = after.failure.unwrap();
    assert_eq!(failure.code, "runtime.interrupted");
    assert!(failure.retryable);
    let journal = h.journal(&run).await;
    assert!(
        journal.len() > before,
        "the restart is journalled after what was already there"
    );
    assert_eq!(journal.last().unwrap().r#type, "run_failed");
    assert!(journal.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    // The file the run wrote before the stop is still there.
    assert_eq!(h.object(&run, "output/main.md").await.unwrap(), b"draft");
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_reports_its_journal_end_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let mut h = harness_with(|c| c.data_dir = data.clone()).await;
    h.put_profile(writer_profile()).await;
    let run = h.create_run("writer", true).await;
    let inv = h.open(&run, OPENAI).await;
    let r = h
        .execute(
            &inv.invocation_id,
            &inv.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[("f", "workspace_finish", json!({"summary": "done"}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.state, pb::InvocationState::Finished as i32);
    let end = h.journal(&run).await.last().unwrap().seq;
    assert_eq!(h.run(&run).await.last_seq, end);
    h.plane.shutdown().await;

    let mut h = harness_with(|c| c.data_dir = data.clone()).await;
    let after = h.run(&run).await;
    assert_eq!(after.status, pb::RunStatus::Completed as i32);
    assert_eq!(after.last_seq, end, "read back from the journal");
    let listed = h
        .runtime
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(
        listed.iter().find(|r| r.run_id == run).unwrap().last_seq,
        end
    );
    h.plane.shutdown().await;
}

/// Many invocations calling at once: their journal appends share requests to the workspace
/// (`AppendJournals`) while earlier ones are in flight. Every call's records still land in its
/// own run's journal, complete and in order, and every caller gets its own results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_invocations_calling_at_once_each_keep_their_own_journal() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    const INVOCATIONS: usize = 24;
    const ROUNDS: usize = 4;
    let mut opened = Vec::new();
    for _ in 0..INVOCATIONS {
        let run = h.create_run("writer", true).await;
        let inv = h.open(&run, OPENAI).await;
        opened.push((run, inv.invocation_id, inv.first_turn.unwrap().turn_id));
    }
    let mut tasks = Vec::new();
    for (n, (run, inv, mut turn)) in opened.into_iter().enumerate() {
        let mut client = h.runtime.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let call_id = format!("call_{n}_{round}");
                let r = client
                    .execute_tool_calls(pb::ExecuteToolCallsRequest {
                        invocation_id: inv.clone(),
                        turn_id: turn.clone(),
                        provider_format: OPENAI as i32,
                        calls_json: openai_calls(&[(
                            &call_id,
                            "workspace_write_file",
                            json!({"path": format!("scratch/{round}.md"), "content": format!("{n}/{round}")}),
                        )])
                        .to_string(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert!(!r.results[0].is_error, "{:?}", r.results[0]);
                assert_eq!(r.results[0].call_id, call_id);
                turn = r.next_turn.unwrap().turn_id;
            }
            run
        }));
    }
    let mut runs = Vec::new();
    for t in tasks {
        runs.push(t.await.unwrap());
    }
    for (n, run) in runs.iter().enumerate() {
        let journal = h.journal(run).await;
        let seqs: Vec<u64> = journal.iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            (1..=journal.len() as u64).collect::<Vec<_>>(),
            "{run}: sequence numbers without a gap"
        );
        let completed: Vec<String> = journal
            .iter()
            .filter(|r| r.r#type == "tool_call_completed")
            .map(|r| payload(r)["callId"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            completed,
            (0..ROUNDS)
                .map(|round| format!("call_{n}_{round}"))
                .collect::<Vec<_>>(),
            "{run}: its own calls, in order"
        );
        let last = h.object(run, &format!("scratch/{}.md", ROUNDS - 1)).await;
        assert_eq!(
            last.as_deref(),
            Some(format!("{n}/{}", ROUNDS - 1).as_bytes()),
            "{run}"
        );
    }
}
