//! Delegation throughput, the whole plane in this process over real loopback gRPC, durable journal
//! and audit on:
//! - baseline: 100 root runs of a trivial scripted agent, one after another (`StartRun`, then
//!   `WatchRun` until the run has ended);
//! - subject: one host-driven parent delegating 100 tasks to the same agent (`agent.delegate` ×
//!   100 in one turn, then `agent.await`), its scheduler running at most 8 children at once.
//!
//! Both agents take one model turn on the scripted provider and close with one tool call
//! (`workspace.finish` for a root run, `task.return` for a child). Target: the delegated 100 take
//! at most 1/3 of the sequential wall time.
//!
//! Run with `cargo bench -p toolplane --bench agents` (`TOOLPLANE_BENCH_ROUNDS`, default 3).

// A benchmark's set-up either works or the benchmark is meaningless.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;

const TASKS: usize = 100;

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

async fn put(profiles: &mut ProfileServiceClient<Channel>, profile: Value) {
    profiles
        .put_profile(pb::PutProfileRequest {
            profile_id: profile["id"].as_str().unwrap().into(),
            profile_json: profile.to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
}

fn one_call(name: &str, args: Value) -> String {
    json!([{"tool_calls": [{"function": {"name": name, "arguments": args}}]}]).to_string()
}

/// One root run of the trivial agent, start to end.
async fn root_run(rt: &mut RuntimeServiceClient<Channel>) {
    let run = rt
        .start_run(pb::StartRunRequest {
            spec: Some(pb::RunSpec {
                profile_id: "trivial".into(),
                model: Some(pb::ModelEndpoint {
                    kind: pb::ModelEndpointKind::Scripted as i32,
                    script_json: Some(one_call("workspace_finish", json!({"summary": "done"}))),
                    ..Default::default()
                }),
                initial_user_message: "Say you are done.".into(),
                mode: pb::RunMode::Background as i32,
                ..Default::default()
            }),
            request_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;
    let mut events = rt
        .watch_run(pb::WatchRunRequest {
            run_id: run.clone(),
            from_seq: 0,
            history_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut ended = false;
    while let Some(e) = events.next().await {
        let t = e.unwrap().event.unwrap().r#type;
        assert_ne!(t, "run_failed", "a baseline run failed");
        ended |= t == "run_completed";
    }
    assert!(ended, "run {run} did not complete");
}

/// 100 delegated tasks of one parent, from the delegating turn to the await's answer.
async fn delegated(rt: &mut RuntimeServiceClient<Channel>) -> Duration {
    let run = rt
        .create_run(pb::CreateRunRequest {
            profile_id: "boss".into(),
            mode: pb::RunMode::Background as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;
    let opened = rt
        .open_invocation(pb::OpenInvocationRequest {
            run_id: run,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let calls: Vec<Value> = (0..TASKS)
        .map(|i| json!({"id": format!("d{i}"), "type": "function", "function": {"name": "agent_delegate", "arguments": json!({"agentId": "trivial", "task": format!("Task {i}: say you are done.")}).to_string()}}))
        .collect();
    let started = Instant::now();
    let r = rt
        .execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: opened.invocation_id.clone(),
            turn_id: opened.first_turn.unwrap().turn_id,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            calls_json: json!({"role": "assistant", "content": null, "tool_calls": calls})
                .to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        r.results.iter().all(|x| !x.is_error),
        "{:?}",
        r.results.iter().find(|x| x.is_error)
    );
    if std::env::var_os("TOOLPLANE_BENCH_VERBOSE").is_some() {
        eprintln!("delegating turn answered after {:?}", started.elapsed());
    }
    // Tasks that finished while the delegating turn was still being answered come back with it.
    let early = r
        .injected_child_results
        .iter()
        .filter(|t| t.status == pb::TaskStatus::Completed as i32)
        .count();
    let r = rt
        .execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: opened.invocation_id,
            turn_id: r.next_turn.unwrap().turn_id,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            calls_json: json!({"role": "assistant", "content": null, "tool_calls": [{"id": "w", "type": "function", "function": {"name": "agent_await", "arguments": "{}"}}]}).to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let took = started.elapsed();
    let tasks = r.results[0]
        .structured_json
        .as_deref()
        .map(|s| serde_json::from_str::<Value>(s).unwrap())
        .unwrap();
    let done = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] == "completed")
        .count();
    assert_eq!(
        early + done,
        TASKS,
        "not every task completed: {}",
        r.results[0].content
    );
    took
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::var("TOOLPLANE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("trivial.json");
    std::fs::write(&script, one_call("task_return", json!({"summary": "done"}))).unwrap();
    let plane = Plane::up(PlaneConfig::ephemeral(dir.path().join("plane")))
        .await
        .unwrap();
    let mut profiles = ProfileServiceClient::new(channel(&plane.catalog_url()).await);
    put(
        &mut profiles,
        json!({"id": "trivial", "tools": {"allow": ["builtin:workspace.finish"]}, "delegation": {"callable": true}, "model": {"kind": "scripted", "script": script.display().to_string()}}),
    )
    .await;
    put(
        &mut profiles,
        json!({"id": "boss", "tools": {"allow": ["builtin:agent.*"], "maxCallsPerInvocation": 1000}, "delegation": {"canDelegate": true, "targets": ["trivial"], "maxConcurrentChildren": 8}}),
    )
    .await;
    let mut rt = RuntimeServiceClient::new(channel(&plane.runtime_url()).await);

    // Warm-up: one of each.
    root_run(&mut rt).await;
    let _ = delegated(&mut rt).await;

    let (mut seq, mut par) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        for _ in 0..TASKS {
            root_run(&mut rt).await;
        }
        seq.push(started.elapsed());
        par.push(delegated(&mut rt).await);
    }
    seq.sort();
    par.sort();
    let (s, p) = (seq[seq.len() / 2], par[par.len() / 2]);
    let ratio = p.as_secs_f64() / s.as_secs_f64();
    println!("rounds {rounds}");
    println!("{TASKS} sequential root runs of the trivial agent: p50 {s:?}");
    println!(
        "{TASKS} delegated tasks of one parent, at most 8 at once: p50 {p:?} = {ratio:.3} of sequential (target <= 0.333) {}",
        if ratio <= 1.0 / 3.0 { "ok" } else { "MISSED" }
    );
    plane.shutdown().await;
}
