//! A runtime-driven run's model calls against a real HTTP endpoint (the testkit's scripted model
//! server). Retries: a `Retry-After` the endpoint sends is waited for, the attempts stop at the
//! endpoint's `max_retries`, and a wait longer than one attempt may take is not taken
//! (docs/runtime.md, "Model call retries"). Connections: invocations of one cell share one HTTP
//! client, so a second run's calls reuse the first one's connection (docs/egress.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};

fn spec(base_url: &str, max_retries: u32, timeout_ms: u64) -> pb::RunSpec {
    pb::RunSpec {
        profile_id: "writer".into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
            base_url: base_url.into(),
            model: "scripted".into(),
            max_retries: Some(max_retries),
            timeout_ms,
            ..Default::default()
        }),
        initial_user_message: "Finish.".into(),
        mode: pb::RunMode::Background as i32,
        max_rounds: 3,
        ..Default::default()
    }
}

fn scheduled(journal: &[pb::JournalEvent]) -> Vec<Value> {
    journal
        .iter()
        .filter(|e| e.r#type == "model_call_retry_scheduled")
        .map(payload)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_before_a_retry_honours_retry_after() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        ScriptedReply::status(429).with_retry_after("1"),
        ScriptedReply::status(503).with_retry_after("0"),
        ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]),
    ])
    .await
    .unwrap();
    let run = h.start_run(spec(&model.base_url(), 3, 10_000)).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    // The harness's backoff is 20 ms; the endpoint asked for a second, and got it.
    let at = model.arrivals();
    assert_eq!(at.len(), 3);
    let waited = at[1] - at[0];
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    let journal = h.journal(&run).await;
    let waits: Vec<(u64, u64)> = scheduled(&journal)
        .iter()
        .map(|p| {
            (
                p["delayMs"].as_u64().unwrap(),
                p["retryAfterMs"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(waits, [(1000, 1000), (0, 0)]);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_stop_at_the_endpoints_retry_limit() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        ScriptedReply::status(503),
        ScriptedReply::status(503),
        ScriptedReply::status(503),
        ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]),
    ])
    .await
    .unwrap();
    let run = h.start_run(spec(&model.base_url(), 2, 10_000)).await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.status, pb::RunStatus::Failed as i32);
    let failure = done.failure.unwrap();
    assert_eq!(failure.code, "model.call_failed");
    assert!(failure.message.contains("503"), "{}", failure.message);
    // One attempt and two retries; the fourth reply was never asked for.
    assert_eq!(model.requests().len(), 3);
    assert_eq!(model.remaining(), 1);
    let journal = h.journal(&run).await;
    let delays: Vec<u64> = scheduled(&journal)
        .iter()
        .map(|p| p["delayMs"].as_u64().unwrap())
        .collect();
    // Full jitter: each wait lies between zero and its doubling step (20 ms, then 40 ms).
    assert_eq!(delays.len(), 2, "{delays:?}");
    assert!(delays[0] <= 20 && delays[1] <= 40, "{delays:?}");
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_longer_than_an_attempt_may_take_fails_the_call_at_once() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        ScriptedReply::status(429).with_retry_after("30"),
        ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]),
    ])
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let run = h.start_run(spec(&model.base_url(), 3, 5_000)).await;
    let done = h.wait_terminal(&run).await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(done.status, pb::RunStatus::Failed as i32);
    let failure = done.failure.unwrap();
    assert_eq!(failure.code, "model.call_failed");
    assert!(
        failure.message.contains("asked to wait 30 s"),
        "{}",
        failure.message
    );
    assert_eq!(model.requests().len(), 1);
    assert!(scheduled(&h.journal(&run).await).is_empty());
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocations_of_a_cell_reuse_one_connection_to_the_model_endpoint() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]),
        ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]),
    ])
    .await
    .unwrap();
    for _ in 0..2 {
        let run = h.start_run(spec(&model.base_url(), 0, 10_000)).await;
        let done = h.wait_terminal(&run).await;
        assert_eq!(
            done.status,
            pb::RunStatus::Completed as i32,
            "{:?}",
            done.failure
        );
    }
    assert_eq!(model.requests().len(), 2);
    assert_eq!(model.connections(), 1, "two runs' calls, one connection");
    h.plane.shutdown().await;
}
