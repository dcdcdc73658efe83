//! Taking a run over (docs/runtime.md, "Taking a run over"): two runtimes with run leases on over
//! one store and one workspace, as two replicas of a cluster are. A runtime whose lease ended
//! (its process died) leaves its runs to the other, which takes the lease with a newer epoch and
//! goes on from the active invocation's checkpoint: a host's next turn, sent to the other
//! runtime, is answered there; a turn that was running is answered with `tool.outcome_unknown`
//! for the calls that may have taken effect; a runtime-driven run goes on to its end. The old
//! driver's late writes are refused. The workspace's leases are the in-memory ports' (the real
//! workspace's are tested in `ownership.rs` and the workspace's own tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::{Alone, agent, alone_with, calls, eventually, host_turn, scripted, turn, writer_run};
use tonic::{Code, Request};
use tonic_types::StatusExt;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_server::RuntimeService;
use toolplane_runtime::Runtime;
use toolplane_runtime::context::held::LoopStart;
use toolplane_runtime::lifecycle::NewRun;
use toolplane_runtime::runloop;
use toolplane_runtime::service::RuntimeGrpc;
use toolplane_runtime::state::{AuditObject, Driver, Event, HeldTurn, RunStatus, TurnStage};

/// A runtime with run leases on (long enough not to end by themselves), and a second one over
/// the same store and peers started before any run exists, as a second replica is.
async fn replicas() -> (Alone, Arc<Runtime>) {
    let a = alone_with(|c| {
        c.cluster.leases = true;
        c.cluster.lease_ttl_ms = 600_000;
    })
    .await;
    let b = a.restart().await;
    a.mem.put_profile(agent("writer", json!({})));
    (a, b)
}

fn write(id: &str, path: &str) -> (String, String, Value) {
    (
        id.to_owned(),
        "workspace_write_file".to_owned(),
        json!({"path": path, "content": format!("from {id}")}),
    )
}

fn turn_calls(list: &[(String, String, Value)]) -> Value {
    let refs: Vec<(&str, &str, Value)> = list
        .iter()
        .map(|(i, n, a)| (i.as_str(), n.as_str(), a.clone()))
        .collect();
    calls(&refs)
}

/// `ExecuteToolCalls` of `calls` for `turn` sent to `svc`.
async fn execute(
    svc: &RuntimeGrpc,
    invocation: &str,
    turn: &str,
    calls: &Value,
) -> Result<pb::ExecuteToolCallsResponse, tonic::Status> {
    svc.execute_tool_calls(Request::new(pb::ExecuteToolCallsRequest {
        invocation_id: invocation.to_owned(),
        turn_id: turn.to_owned(),
        provider_format: pb::ProviderFormat::OpenaiChat as i32,
        calls_json: calls.to_string(),
        ..Default::default()
    }))
    .await
    .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn a_host_driven_run_whose_driver_died_is_taken_over_at_its_next_turn() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-1", "writer").await;
    let first = turn_calls(&[write("c1", "output/one.md")]);
    let answered = a.first_turn(&opened, &first).await.unwrap();
    let second_turn = answered.next_turn_id.clone().unwrap();
    let inv = opened.invocation.id.clone();
    // The checkpoint leaves the invocation's snapshot to the run's workspace: B reads it back.
    let checkpoints = a.rt.held_of_run("default", "to-1").await;
    assert_eq!(checkpoints.len(), 1);
    assert!(checkpoints[0].snapshot.is_none());
    let on_b = RuntimeGrpc::new(b.clone());
    let second = turn_calls(&[write("c2", "output/two.md")]);

    // While A's lease is live, B does not drive the run: A advertises no URL to forward to.
    let refused = execute(&on_b, &inv, &second_turn, &second)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let info = refused.get_details_error_info().unwrap();
    assert_eq!(info.reason, "runtime.not_owner");
    assert_eq!(info.metadata["run_id"], "to-1");
    assert!(!b.has_run("to-1"));

    // A dies: its lease ends. The host sends its next turn to B, which takes the run over.
    a.mem.expire_lease("to-1");
    let on_b_answer = execute(&on_b, &inv, &second_turn, &second).await.unwrap();
    assert_eq!(on_b_answer.state, pb::InvocationState::Open as i32);
    assert!(on_b_answer.result_messages_json.contains("c2"));
    assert_eq!(a.mem.file("output/two.md").as_deref(), Some("from c2"));
    let taken = a.mem.payloads("to-1", "run_taken_over");
    assert_eq!(taken.len(), 1, "{:?}", a.mem.kinds("to-1"));
    assert_eq!(taken[0]["epoch"], json!(2));
    assert_eq!(taken[0]["fromEpoch"], json!(1));
    assert_eq!(a.mem.lease("to-1").unwrap().1, 2);
    // The invocation went on where it was: the turn after the second, its gate counting both.
    let third_turn = on_b_answer.next_turn.unwrap().turn_id;
    assert_ne!(third_turn, second_turn);
    let got = on_b
        .get_run(Request::new(pb::GetRunRequest {
            run_id: "to-1".into(),
        }))
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_eq!(got.status, pb::RunStatus::Running as i32);
    assert_eq!(got.epoch, 2);

    // Every record is of one driver at a time: epoch 1 up to the takeover, 2 after it.
    let epochs = a.mem.epochs("to-1");
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "{epochs:?}");
    assert_eq!(*epochs.last().unwrap(), 2);

    // The old driver, still thinking the run is its own, writes nothing: its append is refused
    // as stale, and it stops driving the run.
    let before = a.mem.journal("to-1").len();
    let late = host_turn(
        &a.rt,
        &opened.invocation,
        &second_turn,
        &turn_calls(&[write("c9", "output/late.md")]),
    )
    .await;
    assert_eq!(
        late.unwrap_err().code(),
        toolplane_core::error::RUNTIME_LEASE_LOST,
        "the old driver learns it lost the run"
    );
    assert!(a.mem.file("output/late.md").is_none());
    assert_eq!(a.mem.journal("to-1").len(), before);
    assert!(a.rt.run("to-1").unwrap().lease_lost());
}

/// The calls of a turn, decoded as the runtime runs them.
fn decoded(calls: &Value, inv: &toolplane_runtime::state::Invocation) -> Vec<ToolInvocation> {
    let inner = inv.inner.try_lock().unwrap();
    toolplane_model::decode_calls(ProviderFormat::OpenAiChat, &inner.turn, calls)
        .unwrap()
        .invocations
}

#[tokio::test]
async fn a_turn_running_when_its_driver_died_answers_unknown_outcomes_and_reruns_only_reads() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-2", "writer").await;
    a.mem.put_file("output/seen.md", "already there");
    let inv = Arc::clone(&opened.invocation);
    let sent = turn_calls(&[
        write("w1", "output/maybe.md"),
        (
            "r1".to_owned(),
            "workspace_read_file".to_owned(),
            json!({"path": "output/seen.md"}),
        ),
        write("w2", "output/done.md"),
    ]);
    // A had started the turn (its checkpoint says so) when it died, and had journalled w2's
    // result (as if it ran it last, its effect lost with A's workspace call).
    let calls = decoded(&sent, &inv);
    {
        let running = HeldTurn::running(1, calls.clone(), None);
        let mut inner = inv.inner.lock().await;
        a.rt.checkpoint(&inv, &mut inner, TurnStage::Running, &running)
            .await;
    }
    let w2 = AgentToolResult::ok(&calls[2], "Wrote output/done.md (as A saw it).");
    let path = "tool-results/a/w2.json".to_owned();
    let object = AuditObject {
        path: path.clone(),
        content: serde_json::to_vec(&json!({"result": w2})).unwrap(),
        content_type: "application/json",
    };
    let done = Event::new(
        "tool_call_completed",
        json!({"invocationId": inv.id, "round": 1, "callId": "w2", "isError": false, "resultPath": path}),
    )
    .inv(&inv.id);
    let run = a.rt.run("to-2").unwrap();
    a.rt.append(&run, 1, vec![object], vec![done])
        .await
        .unwrap();
    a.mem.expire_lease("to-2");

    // The host sends the same turn again, to B.
    let on_b = RuntimeGrpc::new(b.clone());
    let answer = execute(&on_b, &inv.id, &opened.turn_id, &sent)
        .await
        .unwrap();
    let results: Vec<Value> = serde_json::from_str(&answer.result_messages_json).unwrap();
    assert_eq!(results.len(), 3, "{results:?}");
    // A call whose result A journalled is answered with that result, not run again.
    assert_eq!(results[2]["content"], "Wrote output/done.md (as A saw it).");
    assert!(a.mem.file("output/done.md").is_none());
    let write_result = results[0]["content"].as_str().unwrap();
    assert!(
        write_result.contains("whether it took effect is unknown"),
        "{write_result}"
    );
    assert!(
        a.mem.file("output/maybe.md").is_none(),
        "a write whose outcome is unknown is not run again"
    );
    let read_result = results[1]["content"].as_str().unwrap();
    assert!(read_result.contains("already there"), "{read_result}");
    // The answers are audited under the new epoch's names, beside whatever the old driver left.
    let failed = a.mem.payloads("to-2", "tool_call_failed");
    assert!(
        failed.iter().any(|p| p["callId"] == "w1"
            && p["errorCode"] == "tool.outcome_unknown"
            && p["resultPath"].as_str().unwrap().ends_with(&format!(
                "/{}.json",
                toolplane_runtime::pipeline::call_file("w1#epoch2")
            ))),
        "{failed:?}"
    );
    // The turn is over: the next one runs its calls normally.
    let next = answer.next_turn.unwrap().turn_id;
    execute(
        &on_b,
        &inv.id,
        &next,
        &turn_calls(&[write("w1-again", "output/maybe.md")]),
    )
    .await
    .unwrap();
    assert_eq!(
        a.mem.file("output/maybe.md").as_deref(),
        Some("from w1-again")
    );
}

#[tokio::test]
async fn a_runtime_driven_run_whose_driver_died_mid_turn_is_finished_by_the_other_runtime() {
    let (a, b) = replicas().await;
    // The second turn's write takes a minute: A dies during it.
    let script = json!([
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/one.md", "content": "1"})
        )]),
        turn(&[(
            "workspace_write_file",
            json!({"path": support::SLOW_PATH, "content": "2"})
        )]),
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "3"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]);
    let run = a.start(writer_run("to-3"), scripted(script)).await;
    assert!(
        eventually(|| a.mem.file("output/one.md").is_some()
            && a.mem
                .kinds("to-3")
                .iter()
                .filter(|k| *k == "model_request_created")
                .count()
                >= 2)
        .await,
        "{:?}",
        a.mem.kinds("to-3")
    );
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // A dies in the slow call: it writes nothing more, and its lease ends.
    a.rt.lose_run(&run, "the process died");
    a.mem.expire_lease("to-3");

    // B finds the run nobody drives and takes it over.
    runloop::take_over_orphans(&b).await;
    assert!(b.has_run("to-3"));
    assert!(
        eventually(|| a.mem.sealed("to-3") == Some(RunStatus::Completed)).await,
        "{:?} {:?}",
        a.mem.kinds("to-3"),
        a.mem.payloads("to-3", "tool_call_failed")
    );
    assert_eq!(a.mem.file("output/main.md").as_deref(), Some("3"));
    assert!(
        a.mem.file(support::SLOW_PATH).is_none(),
        "the call running at the death is not run again"
    );
    let unknown = a.mem.payloads("to-3", "tool_call_failed");
    assert!(
        unknown
            .iter()
            .any(|p| p["errorCode"] == "tool.outcome_unknown"),
        "{unknown:?}"
    );
    // Each model turn was asked once: B went on from the turn A was in, not from the start.
    let rounds: Vec<Value> = a
        .mem
        .payloads("to-3", "model_request_created")
        .iter()
        .map(|r| r["round"].clone())
        .collect();
    assert_eq!(
        rounds,
        vec![json!(1), json!(2), json!(3), json!(4), json!(5)]
    );
    let epochs = a.mem.epochs("to-3");
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "{epochs:?}");
    assert_eq!(*epochs.last().unwrap(), 2);
}

#[tokio::test]
async fn a_runtime_driven_run_whose_driver_died_before_its_first_round_is_started_again() {
    let (a, b) = replicas().await;
    // A creates the run and dies before its loop writes a checkpoint (as a process killed right
    // after `StartRun` answered): only the run's record and its start are stored.
    let script = json!([
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "42"})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ]);
    let run =
        a.rt.create_run(NewRun {
            driver: Some(Driver::Runtime),
            loop_start: Some(LoopStart {
                endpoint: Some(runloop::stored_endpoint(&scripted(script))),
                max_rounds: 0,
            }),
            ..writer_run("to-6")
        })
        .await
        .unwrap();
    a.rt.lose_run(&run, "the process died");
    a.mem.expire_lease("to-6");

    // The sweep finds it (nothing but its start is under `held/`) and B starts its loop.
    runloop::take_over_orphans(&b).await;
    assert!(b.has_run("to-6"));
    assert!(
        eventually(|| a.mem.sealed("to-6") == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds("to-6")
    );
    assert_eq!(a.mem.file("output/main.md").as_deref(), Some("42"));
    eprintln!(
        "KINDS {:?}",
        a.mem
            .journal("to-6")
            .iter()
            .map(|r| (r.kind.clone(), r.invocation_id.clone()))
            .collect::<Vec<_>>()
    );
    let kinds = a.mem.kinds("to-6");
    assert_eq!(kinds.iter().filter(|k| *k == "run_taken_over").count(), 1);
    assert_eq!(kinds.iter().filter(|k| *k == "run_completed").count(), 1);
    // Started once, by B: each model round asked once, and the start removed with the run.
    let rounds: Vec<Value> = a
        .mem
        .payloads("to-6", "model_request_created")
        .iter()
        .map(|r| r["round"].clone())
        .collect();
    assert_eq!(rounds, vec![json!(1), json!(2), json!(3)]);
    assert!(b.loop_start("default", "to-6").await.is_none());

    // A start whose run was never recorded (its creator died in between) is removed once its
    // lease is free.
    let orphan = LoopStart {
        endpoint: Some(json!({})),
        max_rounds: 0,
    };
    b.save_loop_start("default", "unborn", &orphan)
        .await
        .unwrap();
    assert!(b.loop_start("default", "unborn").await.is_some());
    runloop::take_over_orphans(&b).await;
    assert!(b.loop_start("default", "unborn").await.is_none());
    assert!(!b.has_run("unborn"));
}

#[tokio::test]
async fn a_run_whose_driver_journalled_its_end_and_died_is_finished_not_driven_again() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-7", "writer").await;
    let run = a.rt.run("to-7").unwrap();
    // A journals the run's end and dies before saving the run's record: the record still says
    // running, and the invocation's checkpoint is still stored.
    let end = Event::new(
        "run_completed",
        json!({"status": "completed", "failure": null}),
    );
    a.rt.append(&run, 1, Vec::new(), vec![end]).await.unwrap();
    a.rt.lose_run(&run, "the process died");
    a.mem.expire_lease("to-7");
    assert!(!b.held_of_run("default", "to-7").await.is_empty());

    runloop::take_over_orphans(&b).await;
    let taken = b.run("to-7").unwrap().snapshot();
    assert_eq!(taken.status, RunStatus::Completed);
    assert_eq!(a.mem.sealed("to-7"), Some(RunStatus::Completed));
    let kinds = a.mem.kinds("to-7");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_completed"),
        "{kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| *k == "run_completed").count(), 1);
    assert!(b.held_of_run("default", "to-7").await.is_empty());
    // Nothing drives it: the host's next turn is refused as for any finished run.
    let late = execute(
        &RuntimeGrpc::new(b.clone()),
        &opened.invocation.id,
        &opened.turn_id,
        &turn_calls(&[write("c1", "output/one.md")]),
    )
    .await;
    assert!(late.is_err(), "{late:?}");
    assert!(a.mem.file("output/one.md").is_none());
}

/// Asks B about `run` (A died with it): B takes it over and completes its finish, journalling
/// `run_taken_over`, then `first`, then the commit and the end — and nothing else.
async fn finished_by_b(a: &Alone, b: &Arc<Runtime>, run: &str, first: &[&str]) {
    runloop::locate(b, "default", run).await.unwrap();
    assert!(
        eventually(|| a.mem.sealed(run) == Some(RunStatus::Completed)).await,
        "{:?}",
        a.mem.kinds(run)
    );
    let kinds = a.mem.kinds(run);
    let from = kinds.iter().position(|k| k == "run_taken_over").unwrap();
    let mut expected = vec!["run_taken_over"];
    expected.extend(first);
    expected.extend([
        "commit_started",
        "persistent_changes_committed",
        "status_changed",
        "run_completed",
    ]);
    assert_eq!(kinds[from..], expected, "{kinds:?}");
    assert!(b.held_of_run("default", run).await.is_empty());
}

#[tokio::test]
async fn a_run_whose_driver_died_while_finishing_it_is_finished_by_the_other_runtime() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-8", "writer").await;
    a.first_turn(&opened, &turn_calls(&[write("c1", "output/main.md")]))
        .await
        .unwrap();
    let run = a.rt.run("to-8").unwrap();
    // A's invocation finished (`workspace.finish`, its checkpoint removed) and A died before
    // journalling the run's commit and end.
    let finished = Event::new(
        "agent_invocation_completed",
        json!({"invocationId": opened.invocation.id, "status": "finished"}),
    )
    .inv(&opened.invocation.id);
    a.rt.append(&run, 1, Vec::new(), vec![finished])
        .await
        .unwrap();
    a.rt.forget_held_of_run("default", "to-8").await;
    a.rt.lose_run(&run, "the process died");
    a.mem.expire_lease("to-8");
    finished_by_b(&a, &b, "to-8", &["agent_loop_finished"]).await;
}

#[tokio::test]
async fn a_run_whose_driver_died_after_its_finish_call_is_finished_by_the_other_runtime() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-9", "writer").await;
    let inv = opened.invocation.id.clone();
    a.first_turn(&opened, &turn_calls(&[write("c1", "output/main.md")]))
        .await
        .unwrap();
    let run = a.rt.run("to-9").unwrap();
    // A journalled a completed `workspace.finish` call and died before ending the invocation.
    let call =
        json!({"invocationId": inv, "round": 2, "callId": "c2", "toolId": "workspace.finish"});
    let mut done = call.clone();
    done["isError"] = json!(false);
    let records = vec![
        Event::new("tool_call_requested", call.clone()).inv(&inv),
        Event::new("tool_call_started", call).inv(&inv),
        Event::new("tool_call_completed", done).inv(&inv),
        Event::new(
            "tool_result_stored",
            json!({"invocationId": inv, "callId": "c2", "path": "x"}),
        )
        .inv(&inv),
    ];
    a.rt.append(&run, 1, Vec::new(), records).await.unwrap();
    a.rt.lose_run(&run, "the process died");
    a.mem.expire_lease("to-9");
    let ended = [
        "agent_invocation_restored",
        "agent_invocation_completed",
        "agent_loop_finished",
    ];
    finished_by_b(&a, &b, "to-9", &ended).await;
}

#[tokio::test]
async fn a_finish_running_when_its_driver_died_is_run_again() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-10", "writer").await;
    let inv = Arc::clone(&opened.invocation);
    let sent = turn_calls(&[(
        "f1".to_owned(),
        "workspace_finish".to_owned(),
        json!({"summary": "done"}),
    )]);
    {
        let running = HeldTurn::running(1, decoded(&sent, &inv), None);
        let mut inner = inv.inner.lock().await;
        a.rt.checkpoint(&inv, &mut inner, TurnStage::Running, &running)
            .await;
    }
    a.mem.expire_lease("to-10");

    // Finishing only decides the end: B runs it again instead of answering "unknown".
    let answer = execute(
        &RuntimeGrpc::new(b.clone()),
        &inv.id,
        &opened.turn_id,
        &sent,
    )
    .await
    .unwrap();
    assert!(
        !answer
            .result_messages_json
            .contains("whether it took effect is unknown"),
        "{}",
        answer.result_messages_json
    );
    let kinds = a.mem.kinds("to-10");
    let last_call = a.mem.payloads("to-10", "tool_call_started");
    assert!(
        last_call.iter().any(|p| p["callId"] == "f1"),
        "the finish was run: {kinds:?}"
    );
}

#[tokio::test]
async fn a_stopping_runtime_hands_its_runs_over_at_once() {
    let (a, b) = replicas().await;
    let opened = a.host_run("to-4", "writer").await;
    a.first_turn(&opened, &turn_calls(&[write("c1", "output/one.md")]))
        .await
        .unwrap();
    a.rt.start_draining();
    a.rt.hand_over_runs().await;
    // No new runs on the stopping runtime.
    let refused = RuntimeGrpc::new(a.rt.clone())
        .create_run(Request::new(pb::CreateRunRequest {
            run_id: "to-5".into(),
            profile_id: "writer".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert_eq!(
        refused.get_details_error_info().unwrap().reason,
        "runtime.draining"
    );
    // The lease was given up, not left to expire: B takes the run over at once.
    runloop::take_over_orphans(&b).await;
    assert!(b.has_run("to-4"));
    assert_eq!(a.mem.lease("to-4").unwrap().1, 2);
    assert_eq!(b.run("to-4").unwrap().snapshot().status, RunStatus::Running);
}
