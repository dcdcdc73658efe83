//! Agents calling agents over real sockets: delegation in the background (runtime-driven and
//! host-driven parents), `agent.await`, injected results, `task.return`, sub-agents as tools,
//! handoff chains, and every refusal path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;

/// A scripted child: its turns as OpenAI assistant messages, written to a file its profile names.
fn script(dir: &Path, name: &str, turns: Value) -> String {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, turns.to_string()).unwrap();
    path.display().to_string()
}

fn call(name: &str, args: Value) -> Value {
    json!({"function": {"name": name, "arguments": args}})
}

/// A callable worker that runs `turns` on the scripted provider.
fn worker(id: &str, script_path: Option<&str>, extra: Value) -> Value {
    let mut p = json!({
        "id": id,
        "description": format!("The {id} worker."),
        "tools": {"allow": ["builtin:workspace.*"], "maxRounds": 6},
        "delegation": {"callable": true, "callableAsTool": true, "allowAsHandoffTarget": true}
    });
    if let Some(s) = script_path {
        p["model"] = json!({"kind": "scripted", "script": s});
    }
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            p[k] = v;
        }
    }
    p
}

fn lead(id: &str, extra_allow: &[&str]) -> Value {
    let mut allow = vec![
        "builtin:workspace.*",
        "builtin:agent.*",
        "builtin:dice.roll",
    ];
    allow.extend_from_slice(extra_allow);
    json!({
        "id": id,
        "tools": {"allow": allow, "maxRounds": 12},
        "delegation": {"canDelegate": true, "canHandoff": true, "targets": ["*"], "maxConcurrentChildren": 4}
    })
}

/// Every message of every model request, flattened to text.
fn contents(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_owned(),
                m["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn events_of<'a>(journal: &'a [pb::JournalEvent], kind: &str) -> Vec<&'a pb::JournalEvent> {
    journal.iter().filter(|e| e.r#type == kind).collect()
}

async fn invocations(h: &mut Harness, run: &str) -> Vec<pb::Invocation> {
    h.runtime
        .list_invocations(pb::ListInvocationsRequest {
            run_id: run.into(),
            page_size: 100,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .invocations
}

/// Starts a runtime-driven run of `profile` on the scripted HTTP model at `base_url`.
async fn start_on(
    h: &mut Harness,
    profile: &str,
    base_url: &str,
    message: &str,
    chat: &str,
) -> String {
    h.start_run(pb::RunSpec {
        profile_id: profile.into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
            base_url: base_url.into(),
            model: "scripted".into(),
            ..Default::default()
        }),
        initial_user_message: message.into(),
        chat: Some(pb::ChatBinding {
            chat_id: chat.into(),
            message_id: None,
        }),
        ..Default::default()
    })
    .await
}

fn fast_script(dir: &Path) -> String {
    script(
        dir,
        "fast",
        json!([{"tool_calls": [call("task_return", json!({"summary": "FAST-RESULT: the answer is 42"}))]}]),
    )
}

fn slow_script(dir: &Path, delay_ms: u64) -> String {
    script(
        dir,
        &format!("slow-{delay_ms}"),
        json!([
            {"delayMs": delay_ms, "tool_calls": [call("workspace_write_file", json!({"path": "output/slow.md", "content": "slow work\n"}))]},
            {"tool_calls": [call("task_return", json!({"summary": "SLOW-RESULT: done", "artifacts": ["output/slow.md"]}))]}
        ]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_driven_lead_delegates_in_parallel_awaits_one_and_gets_the_other_injected() {
    let mut h = harness().await;
    let dir = h.dir.path().to_path_buf();
    h.put_profile(worker("fast", Some(&fast_script(&dir)), json!({})))
        .await;
    h.put_profile(worker("slow", Some(&slow_script(&dir, 700)), json!({})))
        .await;
    h.put_profile(worker("nomodel", None, json!({}))).await;
    h.put_profile(lead("lead", &["agent/fast:run"])).await;

    let model = spawn_model_server(vec![
        ScriptedReply::tool_calls(
            1,
            &[
                ("agent_list", json!({})),
                (
                    "agent_delegate",
                    json!({"agentId": "slow", "task": "Do the slow part."}),
                ),
                (
                    "agent_delegate",
                    json!({"agentId": "fast", "task": "Do the fast part."}),
                ),
                (
                    "agent_delegate",
                    json!({"agentId": "nomodel", "task": "Anything."}),
                ),
            ],
        ),
        ScriptedReply::tool_calls(2, &[("agent_await", json!({"taskIds": ["task-1"]}))]),
        ScriptedReply::tool_calls(
            3,
            &[("agent__fast__run", json!({"task": "One more quick check."}))],
        ),
        ScriptedReply::tool_calls(
            4,
            &[(
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "All parts are done.\n"}),
            )],
        ),
        ScriptedReply::tool_calls(
            5,
            &[
                ("workspace_commit", json!({})),
                ("workspace_finish", json!({"summary": "done"})),
            ],
        ),
    ])
    .await
    .unwrap();
    let run = start_on(
        &mut h,
        "lead",
        &model.base_url(),
        "Split the work between your agents.",
        "chat-agents",
    )
    .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    // Turn 1's results: the list offers the workers with a model, the one without is refused.
    let first: Vec<(String, String)> = contents(&requests[1]);
    let tool_text = |msgs: &[(String, String)]| -> String {
        msgs.iter()
            .filter(|(r, _)| r == "tool")
            .map(|(_, c)| c.clone())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let listed = tool_text(&first);
    assert!(
        listed.contains("`fast`") && listed.contains("`slow`"),
        "{listed}"
    );
    assert!(
        listed.contains("task-1") && listed.contains("task-2"),
        "{listed}"
    );
    assert!(
        listed.contains("agent.no_model") || listed.contains("no model endpoint"),
        "{listed}"
    );
    assert!(
        !listed.contains("task-3"),
        "the refused delegation registers no task: {listed}"
    );

    // `agent_await` on task-1 renders the slow result only.
    let awaited = tool_text(&contents(&requests[2]));
    assert!(awaited.contains("SLOW-RESULT"), "{awaited}");
    assert!(!awaited.contains("FAST-RESULT"), "{awaited}");
    // task-2 was never awaited: its result is injected into a later request, exactly once (the
    // last request carries the whole conversation).
    let injections: Vec<String> = contents(&requests[4])
        .into_iter()
        .filter(|(role, c)| role == "user" && c.contains("Results of tasks you delegated"))
        .map(|(_, c)| c)
        .collect();
    assert_eq!(injections.len(), 1, "{injections:?}");
    assert!(injections[0].contains("FAST-RESULT") && injections[0].contains("task-2"));
    // The sub-agent tool delegated and awaited under the hood.
    let sub = tool_text(&contents(&requests[3]));
    assert!(
        sub.contains("FAST-RESULT") && sub.contains("task-3"),
        "{sub}"
    );

    let journal = h.journal(&run).await;
    assert_eq!(events_of(&journal, "agent_task_registered").len(), 3);
    assert_eq!(events_of(&journal, "agent_task_completed").len(), 3);
    assert_eq!(events_of(&journal, "task_return_completed").len(), 3);
    for kind in [
        "agent_task_queued",
        "agent_task_started",
        "agent_delegate_started",
        "agent_await_started",
        "agent_await_completed",
        "agent_child_results_injected",
        "agent_target_unavailable",
        "run_completed",
    ] {
        assert!(!events_of(&journal, kind).is_empty(), "no {kind}");
    }
    // Every task is registered before its child starts, and ends before the run does.
    let seq = |kind: &str, task: &str| {
        journal
            .iter()
            .find(|e| e.r#type == kind && payload(e)["taskId"] == task)
            .map(|e| e.seq)
            .unwrap()
    };
    let end = events_of(&journal, "run_completed")[0].seq;
    for task in ["task-1", "task-2", "task-3"] {
        assert!(seq("agent_task_registered", task) < seq("agent_task_started", task));
        assert!(seq("agent_task_completed", task) < end);
    }

    // The returned results are files the parent (and the user) can read.
    let slow_done = payload(
        journal
            .iter()
            .find(|e| e.r#type == "agent_task_completed" && payload(e)["taskId"] == "task-1")
            .unwrap(),
    );
    let child = slow_done["childInvocationId"].as_str().unwrap().to_owned();
    let result: Value = serde_json::from_slice(
        &h.object(&run, &format!("agent-results/{child}.json"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(result["summary"], "SLOW-RESULT: done");
    assert_eq!(result["artifacts"], json!(["output/slow.md"]));
    let summary = h
        .object(&run, &format!("summaries/{child}-result.md"))
        .await
        .unwrap();
    assert!(String::from_utf8(summary).unwrap().contains("SLOW-RESULT"));
    assert_eq!(
        h.object(&run, "output/slow.md").await.unwrap(),
        b"slow work\n"
    );

    // Children are return-mode invocations of the run, under the root.
    let all = invocations(&mut h, &run).await;
    assert_eq!(all.len(), 4);
    let root = &all[0];
    assert_eq!(root.exit_policy, pb::ExitPolicy::Root as i32);
    for c in &all[1..] {
        assert_eq!(c.exit_policy, pb::ExitPolicy::ReturnChild as i32);
        assert_eq!(c.parent_invocation_id, root.invocation_id);
        assert_eq!(c.state, pb::InvocationState::Returned as i32);
        assert!(c.task_id.starts_with("task-"));
    }
    assert_eq!(done.active_invocation_id, root.invocation_id);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_driven_parent_is_not_blocked_and_its_finish_cancels_unfinished_children() {
    let mut h = harness().await;
    let dir = h.dir.path().to_path_buf();
    h.put_profile(worker("fast", Some(&fast_script(&dir)), json!({})))
        .await;
    h.put_profile(worker(
        "sleepy",
        Some(&slow_script(&dir, 30_000)),
        json!({}),
    ))
    .await;
    let finisher = script(
        &dir,
        "finisher",
        json!([{"tool_calls": [call("workspace_finish", json!({"summary": "I am done"}))]}]),
    );
    h.put_profile(worker("finisher", Some(&finisher), json!({})))
        .await;
    h.put_profile(lead("boss", &[])).await;
    let run = h.create_run("boss", true).await;
    let opened = h.open(&run, OPENAI).await;
    let inv = opened.invocation_id.clone();
    let turn = opened.first_turn.unwrap().turn_id;

    let r = h
        .execute(
            &inv,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "c1",
                    "agent_delegate",
                    json!({"agentId": "fast", "task": "Quick."}),
                ),
                (
                    "c2",
                    "agent_delegate",
                    json!({"agentId": "sleepy", "task": "Slow."}),
                ),
                (
                    "c3",
                    "agent_delegate",
                    json!({"agentId": "finisher", "task": "Try to finish the run."}),
                ),
            ]),
        )
        .await
        .unwrap();
    assert!(r.results.iter().all(|x| !x.is_error), "{:?}", r.results);
    // The answer came back while the sleepy child is still working.
    let journal = h.journal(&run).await;
    assert!(
        !journal.iter().any(|e| e.r#type.starts_with("agent_task_")
            && payload(e)["taskId"] == "task-2"
            && e.r#type != "agent_task_registered"
            && e.r#type != "agent_task_queued"
            && e.r#type != "agent_task_started"),
        "the parent waited for a child"
    );

    // The finished children's results come with the next turn's response.
    let mut turn = r.next_turn.unwrap().turn_id;
    let mut injected = Vec::new();
    let mut messages = Vec::new();
    for round in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let r = h
            .execute(
                &inv,
                &turn,
                OPENAI,
                openai_calls(&[(&format!("d{round}"), "dice_roll", json!({"notation": "d6"}))]),
            )
            .await
            .unwrap();
        turn = r.next_turn.unwrap().turn_id;
        injected.extend(r.injected_child_results.clone());
        if !r.injected_child_results.is_empty() {
            messages.push(r.injected_messages_json.clone());
        }
        if injected.len() >= 2 {
            break;
        }
    }
    let by_task = |id: &str| injected.iter().find(|t| t.task_id == id).unwrap().clone();
    let fast = by_task("task-1");
    assert_eq!(fast.status, pb::TaskStatus::Completed as i32);
    assert!(fast.content.contains("FAST-RESULT"));
    assert!(fast.result_path.starts_with("agent-results/"));
    // A child that calls workspace.finish is refused: the tool is not in its snapshot.
    let finisher = by_task("task-3");
    assert_eq!(finisher.status, pb::TaskStatus::Failed as i32);
    assert_eq!(
        finisher.failure.as_ref().unwrap().code,
        "model.unknown_tool_alias"
    );
    assert!(
        finisher.content.contains("workspace_finish"),
        "{}",
        finisher.content
    );
    let msgs: Value = serde_json::from_str(&messages.join("").replace("][", ",")).unwrap();
    assert!(msgs.to_string().contains("FAST-RESULT"), "{msgs}");
    assert!(injected.iter().all(|t| t.task_id != "task-2"));

    // Finishing cancels the sleepy child; its end is journalled before the run's.
    let r = h
        .execute(
            &inv,
            &turn,
            OPENAI,
            openai_calls(&[("f", "workspace_finish", json!({"summary": "done"}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.state, pb::InvocationState::Finished as i32);
    let done = h.run(&run).await;
    assert_eq!(done.status, pb::RunStatus::Completed as i32);
    let journal = h.journal(&run).await;
    let cancelled = journal
        .iter()
        .find(|e| e.r#type == "agent_task_cancelled" && payload(e)["taskId"] == "task-2")
        .expect("the sleepy task was cancelled");
    let end = events_of(&journal, "run_completed")[0];
    assert!(cancelled.seq < end.seq);
    let children = invocations(&mut h, &run).await;
    let sleepy = children
        .iter()
        .find(|i| i.task_id == "task-2")
        .expect("the sleepy child was opened");
    assert_eq!(sleepy.state, pb::InvocationState::Cancelled as i32);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_chain_of_depth_two_ends_with_the_first_owners_commit() {
    let mut h = harness().await;
    let dir = h.dir.path().to_path_buf();
    let handoff_agent = |id: &str, targets: Value, depth: u32| {
        json!({
            "id": id,
            "tools": {"allow": ["builtin:workspace.*", "builtin:agent.*", "builtin:dice.roll"]},
            "delegation": {"canDelegate": true, "canHandoff": true, "targets": targets, "callable": true, "allowAsHandoffTarget": true, "maxHandoffDepth": depth}
        })
    };
    h.put_profile(handoff_agent("a", json!(["b", "gated", "helper"]), 3))
        .await;
    h.put_profile(handoff_agent("b", json!(["c"]), 3)).await;
    h.put_profile(handoff_agent("c", json!(["d"]), 2)).await;
    h.put_profile(handoff_agent("d", json!([]), 2)).await;
    h.put_profile(worker(
        "gated",
        None,
        json!({"delegation": {"callable": true, "allowAsHandoffTarget": true, "allowedCallers": ["someone-else"]}}),
    ))
    .await;
    h.put_profile(worker("helper", Some(&slow_script(&dir, 400)), json!({})))
        .await;

    let run = h.create_run("a", false).await;
    let opened = h.open(&run, OPENAI).await;
    let a = opened.invocation_id.clone();
    let mut turn = opened.first_turn.unwrap().turn_id;
    // A writes and commits the answer.
    let r = h
        .execute(
            &a,
            &turn,
            OPENAI,
            openai_calls(&[
                (
                    "a1",
                    "workspace_write_file",
                    json!({"path": "output/main.md", "content": "Answer from A.\n"}),
                ),
                ("a2", "workspace_commit", json!({})),
            ]),
        )
        .await
        .unwrap();
    assert!(r.results.iter().all(|x| !x.is_error), "{:?}", r.results);
    turn = r.next_turn.unwrap().turn_id;

    // A target that only takes work from someone else refuses.
    let r = h
        .execute(
            &a,
            &turn,
            OPENAI,
            openai_calls(&[(
                "a3",
                "agent_handoff",
                json!({"agentId": "gated", "brief": "Take over."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.results[0].error_code.as_deref(),
        Some("agent.not_allowed")
    );
    assert!(r.results[0].content.contains("someone-else"));
    turn = r.next_turn.unwrap().turn_id;

    // With a delegated task still running, the handoff is refused; after awaiting it, it goes.
    let r = h
        .execute(
            &a,
            &turn,
            OPENAI,
            openai_calls(&[(
                "a4",
                "agent_delegate",
                json!({"agentId": "helper", "task": "Help."}),
            )]),
        )
        .await
        .unwrap();
    turn = r.next_turn.unwrap().turn_id;
    let r = h
        .execute(
            &a,
            &turn,
            OPENAI,
            openai_calls(&[(
                "a5",
                "agent_handoff",
                json!({"agentId": "b", "brief": "Polish it."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.results[0].error_code.as_deref(),
        Some("agent.children_unfinished")
    );
    assert!(r.results[0].content.contains("task-1"));
    turn = r.next_turn.unwrap().turn_id;
    let r = h
        .execute(
            &a,
            &turn,
            OPENAI,
            openai_calls(&[("a6", "agent_await", json!({}))]),
        )
        .await
        .unwrap();
    assert!(
        r.results[0].content.contains("SLOW-RESULT"),
        "{}",
        r.results[0].content
    );
    turn = r.next_turn.unwrap().turn_id;
    let r = h
        .execute(
            &a,
            &turn,
            OPENAI,
            openai_calls(&[(
                "a7",
                "agent_handoff",
                json!({"agentId": "b", "brief": "Polish the answer in output/main.md."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.state,
        pb::InvocationState::HandedOff as i32,
        "{:?}",
        r.results
    );
    assert!(r.next_turn.is_none());
    let to_b = r.handoff.unwrap();
    assert_eq!(to_b.profile_id, "b");
    assert_eq!(to_b.brief, "Polish the answer in output/main.md.");
    let tools: Value = serde_json::from_str(&to_b.tools_json).unwrap();
    assert!(tools.to_string().contains("agent_handoff"));

    // A keeps calling tools: none runs.
    let r = h
        .execute(
            &a,
            "stale",
            OPENAI,
            openai_calls(&[("a8", "dice_roll", json!({"notation": "d6"}))]),
        )
        .await
        .unwrap();
    assert_eq!(r.state, pb::InvocationState::HandedOff as i32);
    assert_eq!(
        r.results[0].error_code.as_deref(),
        Some("agent.tool_after_finish")
    );

    // B hands off to C: depth 2.
    let b = to_b.invocation_id.clone();
    let r = h
        .execute(
            &b,
            &to_b.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[(
                "b1",
                "agent_handoff",
                json!({"agentId": "c", "brief": "Finish up."}),
            )]),
        )
        .await
        .unwrap();
    let to_c = r.handoff.unwrap();
    let c = to_c.invocation_id.clone();
    let mut turn = to_c.first_turn.unwrap().turn_id;

    // C may not hand off again: `d` accepts chains of at most 2.
    let r = h
        .execute(
            &c,
            &turn,
            OPENAI,
            openai_calls(&[(
                "c1",
                "agent_handoff",
                json!({"agentId": "d", "brief": "More."}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.results[0].error_code.as_deref(),
        Some("agent.handoff_depth_exceeded")
    );
    turn = r.next_turn.unwrap().turn_id;

    // C finishes without committing: A's commit stands.
    let r = h
        .execute(
            &c,
            &turn,
            OPENAI,
            openai_calls(&[("c2", "workspace_finish", json!({"summary": "done"}))]),
        )
        .await
        .unwrap();
    assert_eq!(
        r.state,
        pb::InvocationState::Finished as i32,
        "{:?}",
        r.results
    );
    let done = h.run(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    assert_eq!(done.active_invocation_id, c);
    let chat = h.chat("chat-1").await;
    assert_eq!(chat.last().unwrap().content, "Answer from A.\n");

    let all = invocations(&mut h, &run).await;
    let state = |id: &str| all.iter().find(|i| i.invocation_id == id).unwrap().clone();
    assert_eq!(state(&a).state, pb::InvocationState::HandedOff as i32);
    assert_eq!(state(&b).state, pb::InvocationState::HandedOff as i32);
    assert_eq!(state(&b).exit_policy, pb::ExitPolicy::Handoff as i32);
    assert_eq!(state(&b).parent_invocation_id, a);
    assert_eq!(state(&c).parent_invocation_id, b);
    assert_eq!(state(&c).state, pb::InvocationState::Finished as i32);

    let journal = h.journal(&run).await;
    assert_eq!(events_of(&journal, "agent_handoff_requested").len(), 2);
    assert_eq!(events_of(&journal, "agent_handoff_accepted").len(), 2);
    assert_eq!(events_of(&journal, "agent_invocation_transferred").len(), 2);
    let accepted = payload(events_of(&journal, "agent_handoff_accepted")[1]);
    assert_eq!(accepted["depth"], 2);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_driven_run_follows_a_handoff_onto_the_targets_own_model() {
    let mut h = harness().await;
    let dir = h.dir.path().to_path_buf();
    let closer = script(
        &dir,
        "closer",
        json!([
            {"tool_calls": [call("workspace_write_file", json!({"path": "output/main.md", "content": "Closed by the closer.\n"}))]},
            {"tool_calls": [call("workspace_commit", json!({})), call("workspace_finish", json!({"summary": "done"}))]}
        ]),
    );
    h.put_profile(json!({
        "id": "closer",
        "tools": {"allow": ["builtin:workspace.*"]},
        "delegation": {"callable": true, "allowAsHandoffTarget": true},
        "model": {"kind": "scripted", "script": closer}
    }))
    .await;
    h.put_profile(lead("opener", &[])).await;
    let model = spawn_model_server(vec![ScriptedReply::tool_calls(
        1,
        &[(
            "agent_handoff",
            json!({"agentId": "closer", "brief": "Write the answer and close the run."}),
        )],
    )])
    .await
    .unwrap();
    let run = start_on(
        &mut h,
        "opener",
        &model.base_url(),
        "Get this done.",
        "chat-handoff",
    )
    .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    // The opener's endpoint saw one request; the closer ran on its own scripted model.
    assert_eq!(model.requests().len(), 1);
    assert_eq!(
        h.chat("chat-handoff").await.last().unwrap().content,
        "Closed by the closer.\n"
    );
    let all = invocations(&mut h, &run).await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].state, pb::InvocationState::HandedOff as i32);
    assert_eq!(all[1].exit_policy, pb::ExitPolicy::Handoff as i32);
    assert_eq!(all[1].state, pb::InvocationState::Finished as i32);
    assert_eq!(done.active_invocation_id, all[1].invocation_id);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_to_an_agent_whose_model_is_unusable_is_refused_and_the_run_goes_on() {
    let mut h = harness().await;
    h.put_profile(json!({
        "id": "broken",
        "tools": {"allow": ["builtin:workspace.*"]},
        "delegation": {"callable": true, "allowAsHandoffTarget": true},
        "model": {"kind": "scripted", "script": "/nonexistent/closer.json"}
    }))
    .await;
    h.put_profile(lead("opener", &[])).await;
    let model = spawn_model_server(vec![
        ScriptedReply::tool_calls(
            1,
            &[(
                "agent_handoff",
                json!({"agentId": "broken", "brief": "Close the run."}),
            )],
        ),
        ScriptedReply::tool_calls(
            2,
            &[(
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "Closed by the opener.\n"}),
            )],
        ),
        ScriptedReply::tool_calls(
            3,
            &[
                ("workspace_commit", json!({})),
                ("workspace_finish", json!({"summary": "done"})),
            ],
        ),
    ])
    .await
    .unwrap();
    let run = start_on(
        &mut h,
        "opener",
        &model.base_url(),
        "Get this done.",
        "chat-broken",
    )
    .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    // The model was told why, and the run stayed with the opener.
    let refused = h
        .journal(&run)
        .await
        .iter()
        .filter(|e| e.r#type == "tool_call_failed")
        .map(payload)
        .next()
        .unwrap();
    assert_eq!(refused["errorCode"], "agent.no_model", "{refused}");
    let result: Value = serde_json::from_slice(
        &h.object(&run, refused["resultPath"].as_str().unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    let content = result["result"]["content"].as_str().unwrap();
    assert!(content.contains("model endpoint is unusable"), "{content}");
    assert_eq!(invocations(&mut h, &run).await.len(), 1);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_cancels_its_running_children_before_the_run_ends() {
    let mut h = harness().await;
    let dir = h.dir.path().to_path_buf();
    h.put_profile(worker(
        "sleepy",
        Some(&slow_script(&dir, 30_000)),
        json!({}),
    ))
    .await;
    h.put_profile(lead("boss", &[])).await;
    let run = h.create_run("boss", true).await;
    let opened = h.open(&run, OPENAI).await;
    let r = h
        .execute(
            &opened.invocation_id,
            &opened.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[
                (
                    "c1",
                    "agent_delegate",
                    json!({"agentId": "sleepy", "task": "Take your time."}),
                ),
                (
                    "c2",
                    "agent_delegate",
                    json!({"agentId": "sleepy", "task": "You too."}),
                ),
            ]),
        )
        .await
        .unwrap();
    assert!(r.results.iter().all(|x| !x.is_error), "{:?}", r.results);
    // Both children are working (their model is "thinking" for 30 s).
    for _ in 0..100 {
        if events_of(&h.journal(&run).await, "agent_task_started").len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    h.runtime
        .cancel_run(pb::CancelRunRequest {
            run_id: run.clone(),
            reason: "the user changed their mind".into(),
        })
        .await
        .unwrap();
    let done = h.run(&run).await;
    assert_eq!(done.status, pb::RunStatus::Cancelled as i32);
    let journal = h.journal(&run).await;
    let end = events_of(&journal, "run_cancelled")[0].seq;
    let cancelled = events_of(&journal, "agent_task_cancelled");
    assert_eq!(cancelled.len(), 2);
    assert!(cancelled.iter().all(|e| e.seq < end));
    let children: Vec<pb::Invocation> = invocations(&mut h, &run)
        .await
        .into_iter()
        .filter(|i| i.exit_policy == pb::ExitPolicy::ReturnChild as i32)
        .collect();
    assert_eq!(children.len(), 2);
    assert!(
        children
            .iter()
            .all(|c| c.state == pb::InvocationState::Cancelled as i32)
    );
    h.plane.shutdown().await;
}
