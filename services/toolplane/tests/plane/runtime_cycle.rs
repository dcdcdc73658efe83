//! The cycle detector through runtime-driven runs: exploring many different files completes, the
//! same call repeated is stopped at the documented streak, and a profile's `tools.cycle` changes
//! where that happens (docs/runtime.md, docs/profiles.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;

fn call(name: &str, args: Value) -> Value {
    json!({"function": {"name": name, "arguments": args}})
}

fn read(path: &str) -> Value {
    json!({"tool_calls": [call("workspace_read_file", json!({"path": path}))]})
}

/// A profile with room for long runs and, optionally, its own cycle thresholds.
fn explorer(id: &str, cycle: Option<Value>) -> Value {
    let mut p = json!({
        "id": id,
        "tools": {
            "allow": ["builtin:workspace.*"],
            "maxCallsPerInvocation": 200,
            "maxRounds": 100
        }
    });
    if let Some(c) = cycle {
        p["tools"]["cycle"] = c;
    }
    p
}

/// Starts a runtime-driven foreground run replaying `turns` offline.
async fn start(h: &mut Harness, profile: &str, turns: Vec<Value>) -> String {
    let script = json!({ "turns": turns });
    h.start_run(pb::RunSpec {
        profile_id: profile.into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::Scripted as i32,
            script_json: Some(script.to_string()),
            ..Default::default()
        }),
        initial_user_message: "Read the notes and summarise them.".into(),
        mode: pb::RunMode::Foreground as i32,
        chat: Some(pb::ChatBinding {
            chat_id: "chat-cycle".into(),
            message_id: None,
        }),
        max_rounds: 100,
        ..Default::default()
    })
    .await
}

/// One turn writing `n` notes, so there is something to read.
fn write_notes(n: usize) -> Value {
    let calls: Vec<Value> = (0..n)
        .map(|i| {
            call(
                "workspace_write_file",
                json!({"path": format!("scratch/note-{i}.md"), "content": format!("note {i}\n")}),
            )
        })
        .collect();
    json!({ "tool_calls": calls })
}

/// The closing turns: publish a summary, commit, finish.
fn publish(summary: &str) -> Vec<Value> {
    vec![
        json!({"tool_calls": [call("workspace_write_file", json!({"path": "output/main.md", "content": summary}))]}),
        json!({"tool_calls": [call("workspace_commit", json!({}))]}),
        json!({"tool_calls": [call("workspace_finish", json!({}))]}),
    ]
}

/// The `cycle_detected` events of a run as `(streak, verdict)`.
async fn cycle_events(h: &mut Harness, run: &str) -> Vec<(u64, String)> {
    h.journal(run)
        .await
        .iter()
        .filter(|e| e.r#type == "cycle_detected")
        .map(payload)
        .map(|p| {
            (
                p["streak"].as_u64().unwrap(),
                p["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// How many reads actually ran (a call the detector stops never starts).
async fn reads_started(h: &mut Harness, run: &str) -> usize {
    h.journal(run)
        .await
        .iter()
        .filter(|e| e.r#type == "tool_call_started")
        .filter(|e| payload(e)["toolId"] == "builtin:workspace.read_file")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_twenty_different_files_in_a_row_completes() {
    let mut h = harness().await;
    h.put_profile(explorer("explorer", None)).await;
    let mut turns = vec![write_notes(20)];
    turns.extend((0..20).map(|i| read(&format!("scratch/note-{i}.md"))));
    turns.extend(publish("twenty notes read\n"));
    let run = start(&mut h, "explorer", turns).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    assert_eq!(reads_started(&mut h, &run).await, 20);
    assert_eq!(cycle_events(&mut h, &run).await, []);
    assert_eq!(
        h.chat("chat-cycle").await.last().unwrap().content,
        "twenty notes read\n"
    );
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_read_repeated_is_warned_at_3_and_stopped_at_5() {
    let mut h = harness().await;
    h.put_profile(explorer("explorer", None)).await;
    let mut turns = vec![write_notes(1)];
    turns.extend((0..10).map(|_| read("scratch/note-0.md")));
    turns.extend(publish("never published\n"));
    let run = start(&mut h, "explorer", turns).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.status, pb::RunStatus::Failed as i32);
    let failure = done.failure.unwrap();
    assert_eq!(failure.code, "agent.cycle_detected");
    assert!(
        failure.message.contains("5 times in a row"),
        "{}",
        failure.message
    );
    assert_eq!(
        cycle_events(&mut h, &run).await,
        [
            (3, "warn".to_owned()),
            (4, "warn".to_owned()),
            (5, "stop".to_owned())
        ]
    );
    assert_eq!(reads_started(&mut h, &run).await, 4, "the fifth never ran");
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_cycle_thresholds_move_the_warning_and_the_stop() {
    let mut h = harness().await;
    // Room for seven identical reads: warned from the sixth, never stopped.
    h.put_profile(explorer(
        "patient",
        Some(json!({"identicalWarn": 6, "identicalStop": 8})),
    ))
    .await;
    let mut turns = vec![write_notes(1)];
    turns.extend((0..7).map(|_| read("scratch/note-0.md")));
    turns.extend(publish("read seven times\n"));
    let run = start(&mut h, "patient", turns).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    assert_eq!(
        cycle_events(&mut h, &run).await,
        [(6, "warn".to_owned()), (7, "warn".to_owned())]
    );

    // A strict profile stops the second identical read, without a warning first.
    h.put_profile(explorer(
        "strict",
        Some(json!({"identicalWarn": 2, "identicalStop": 2})),
    ))
    .await;
    let mut turns = vec![write_notes(1)];
    turns.extend((0..3).map(|_| read("scratch/note-0.md")));
    let run = start(&mut h, "strict", turns).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.failure.unwrap().code, "agent.cycle_detected");
    assert_eq!(cycle_events(&mut h, &run).await, [(2, "stop".to_owned())]);
    assert_eq!(reads_started(&mut h, &run).await, 1);
    h.plane.shutdown().await;
}
