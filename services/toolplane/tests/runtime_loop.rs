//! Runtime-driven runs end to end: the runtime calls a scripted OpenAI-compatible HTTP server through
//! its real HTTP client and drives the loop itself (tool calls, drift, malformed replies, 429 / 500
//! with retry, cancellation), or replays a scripted provider offline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};

fn spec(profile: &str, base_url: &str, background: bool, max_rounds: u32) -> pb::RunSpec {
    pb::RunSpec {
        profile_id: profile.into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
            base_url: base_url.into(),
            model: "scripted".into(),
            max_retries: Some(3),
            ..Default::default()
        }),
        initial_user_message: "Write a short note, publish it and finish.".into(),
        mode: if background {
            pb::RunMode::Background as i32
        } else {
            pb::RunMode::Foreground as i32
        },
        chat: Some(pb::ChatBinding {
            chat_id: "chat-loop".into(),
            message_id: None,
        }),
        max_rounds,
        ..Default::default()
    }
}

/// Waits for the run to complete and checks the note it published into `chat-loop`.
async fn completes_with_note(h: &mut Harness, run: &str, note: &str) {
    let done = h.wait_terminal(run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    assert_eq!(h.chat("chat-loop").await.last().unwrap().content, note);
}

fn write(n: usize, content: &str) -> ScriptedReply {
    ScriptedReply::tool_calls(
        n,
        &[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": content}),
        )],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_recovers_from_drift_and_finishes() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        write(1, "first draft\n"),
        ScriptedReply::text("Here is my answer in plain text."),
        ScriptedReply::tool_calls(3, &[("workspace_commit", json!({}))]),
        ScriptedReply::tool_calls(4, &[("workspace_finish", json!({"summary": "done"}))]),
    ])
    .await
    .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), false, 10))
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );

    let journal = h.journal(&run).await;
    let kinds = types(&journal);
    for expected in [
        "model_request_created",
        "model_call_attempt_started",
        "model_response_stored",
        "model_completed",
        "direct_output_captured",
        "drift_recovery_attempted",
        "chat_message_committed",
        "run_completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "missing {expected} in {kinds:?}"
        );
    }
    // The drifting text is kept in the workspace, and the model is reminded how to close.
    let captured = h.object(&run, "output/direct_output.md").await.unwrap();
    assert!(
        String::from_utf8(captured)
            .unwrap()
            .contains("Here is my answer in plain text.")
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let third: Vec<Value> = requests[2]["messages"].as_array().unwrap().clone();
    assert!(
        third
            .iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1_0"),
        "tool results reach the next request"
    );
    assert!(
        third.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("workspace_commit"),
        "the nudge names the closing tools"
    );
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "workspace_finish")
    );
    // The model's response bodies are stored.
    let stored = journal
        .iter()
        .find(|e| e.r#type == "model_response_stored")
        .map(payload)
        .unwrap();
    assert!(
        h.object(&run, stored["path"].as_str().unwrap())
            .await
            .is_some()
    );
    assert_eq!(
        h.chat("chat-loop").await.last().unwrap().content,
        "first draft\n"
    );
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_provider_errors_are_retried_and_journalled() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        ScriptedReply::status(429),
        ScriptedReply::status(500),
        ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]),
    ])
    .await
    .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), true, 5))
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    let journal = h.journal(&run).await;
    let failed: Vec<Value> = journal
        .iter()
        .filter(|e| e.r#type == "model_call_attempt_failed")
        .map(payload)
        .collect();
    assert_eq!(
        failed
            .iter()
            .map(|f| f["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [429, 500]
    );
    assert_eq!(
        types(&journal)
            .iter()
            .filter(|k| *k == "model_call_retry_scheduled")
            .count(),
        2
    );
    assert_eq!(model.requests().len(), 3);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failures_fail_the_run_with_a_clear_code() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;

    // A malformed body is a provider-contract failure.
    let model = spawn_model_server(vec![ScriptedReply::raw("{\"choices\": \"nope\"}")])
        .await
        .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), true, 5))
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.status, pb::RunStatus::Failed as i32);
    assert_eq!(done.failure.unwrap().code, "model.malformed_response");

    // An endpoint nobody listens on: retried, then failed with the reason, not only "error
    // sending request".
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut unreachable = spec("writer", &format!("http://{closed}/v1"), true, 5);
    if let Some(m) = unreachable.model.as_mut() {
        m.max_retries = Some(0);
    }
    let run = h.start_run(unreachable).await;
    let done = h.wait_terminal(&run).await;
    let failure = done.failure.unwrap();
    assert_eq!(failure.code, "model.call_failed");
    assert!(
        failure.message.contains("Connection refused"),
        "{}",
        failure.message
    );

    // A non-retryable status fails at once.
    let model = spawn_model_server(vec![ScriptedReply::status(400)])
        .await
        .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), true, 5))
        .await;
    let done = h.wait_terminal(&run).await;
    let failure = done.failure.unwrap();
    assert_eq!(failure.code, "model.call_failed");
    assert!(failure.retryable);
    assert_eq!(model.requests().len(), 1, "400 is not retried");

    // Drift with no rounds left: failed (retryable) without a commit …
    let model = spawn_model_server(vec![ScriptedReply::text("just text")])
        .await
        .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), false, 1))
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.status, pb::RunStatus::Failed as i32);
    let f = done.failure.unwrap();
    assert_eq!(f.code, "model.tool_call_required");
    assert!(f.retryable);
    let last = h
        .journal(&run)
        .await
        .into_iter()
        .rev()
        .find(|e| e.r#type == "run_failed")
        .map(|e| payload(&e))
        .unwrap();
    assert_eq!(last["userRetryable"], true);

    // … and a partial success when a chat message was committed before.
    let model = spawn_model_server(vec![
        write(1, "kept\n"),
        ScriptedReply::tool_calls(2, &[("workspace_commit", json!({}))]),
        ScriptedReply::text("and more text"),
    ])
    .await
    .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), false, 3))
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::PartialSuccess as i32,
        "{:?}",
        done.failure
    );
    assert!(types(&h.journal(&run).await).contains(&"run_partial_success".to_owned()));

    // The round limit.
    let model = spawn_model_server(
        (0..5)
            .map(|i| {
                ScriptedReply::tool_calls(
                    i,
                    &[("dice_roll", json!({"notation": format!("d{}", i + 2)}))],
                )
            })
            .collect(),
    )
    .await
    .unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), true, 2))
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(done.failure.unwrap().code, "agent.max_tool_rounds_exceeded");
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_run_waiting_on_its_model() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let mut slow = ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]);
    slow.delay = Some(std::time::Duration::from_secs(20));
    let model = spawn_model_server(vec![slow]).await.unwrap();
    let run = h
        .start_run(spec("writer", &model.base_url(), true, 5))
        .await;
    for _ in 0..100 {
        if !model.requests().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cancelled = h.cancel(&run, "user pressed stop").await;
    assert_eq!(cancelled.status, pb::RunStatus::Cancelled as i32);
    let kinds = types(&h.journal(&run).await);
    assert!(
        kinds.contains(&"run_cancel_requested".to_owned())
            && kinds.contains(&"run_cancelled".to_owned()),
        "{kinds:?}"
    );
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_provider_runs_offline() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let script = json!({"turns": [
        {"tool_calls": [{"function": {"name": "workspace_write_file", "arguments": {"path": "output/main.md", "content": "offline\n"}}}]},
        {"tool_calls": [{"function": {"name": "workspace_commit", "arguments": {}}}]},
        {"tool_calls": [{"function": {"name": "workspace_finish", "arguments": {}}}]}
    ]});
    let mut s = spec("writer", "", false, 5);
    s.model = Some(pb::ModelEndpoint {
        kind: pb::ModelEndpointKind::Scripted as i32,
        script_json: Some(script.to_string()),
        ..Default::default()
    });
    let run = h.start_run(s).await;
    completes_with_note(&mut h, &run, "offline\n").await;
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_spec_naming_an_unknown_profile_is_refused_before_anything_is_created() {
    let mut h = harness().await;
    let model = spawn_model_server(vec![]).await.unwrap();
    let mut bad = spec("nobody", &model.base_url(), true, 3);
    bad.run_id = "never-created".into();
    let status = h
        .runtime
        .start_run(pb::StartRunRequest { spec: Some(bad) })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(status.message().contains("nobody"), "{}", status.message());
    let missing = h
        .runtime
        .get_run(pb::GetRunRequest {
            run_id: "never-created".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(model.requests().is_empty());
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_no_usable_model_is_refused_before_anything_is_created() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let mut ghost = writer_profile();
    ghost["id"] = json!("ghost");
    ghost["model"] = json!({"kind": "scripted", "script": "/nonexistent/turns.json"});
    h.put_profile(ghost).await;
    for (profile, expected) in [
        (
            "writer",
            "has no model endpoint and the run spec names none",
        ),
        ("ghost", "model endpoint cannot be used: reading the script"),
    ] {
        let mut s = spec(profile, "", false, 5);
        s.model = None;
        s.run_id = format!("never-{profile}");
        let status = h
            .runtime
            .start_run(pb::StartRunRequest { spec: Some(s) })
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(expected), "{}", status.message());
        let missing = h
            .runtime
            .get_run(pb::GetRunRequest {
                run_id: format!("never-{profile}"),
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), tonic::Code::NotFound);
    }
    h.plane.shutdown().await;
}

/// An Anthropic Messages reply calling one tool.
fn anthropic_reply(n: usize, name: &str, input: Value) -> ScriptedReply {
    ScriptedReply::raw(
        &json!({
            "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "scripted",
            "content": [{"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": input}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}
        })
        .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_whose_model_speaks_anthropic_drives_a_run_with_no_endpoint_in_the_spec() {
    let mut h = harness().await;
    let model = spawn_model_server(vec![
        anthropic_reply(
            1,
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "from the profile's model\n"}),
        ),
        anthropic_reply(2, "workspace_commit", json!({})),
        anthropic_reply(3, "workspace_finish", json!({})),
    ])
    .await
    .unwrap();
    let mut profile = writer_profile();
    // Anthropic's base URL is the host; the runtime adds `/v1/messages`.
    let base_url = model.base_url().trim_end_matches("/v1").to_owned();
    profile["model"] = json!({"kind": "anthropic", "baseUrl": base_url, "model": "scripted"});
    h.put_profile(profile).await;
    let mut s = spec("writer", "", false, 8);
    s.model = None;
    let run = h.start_run(s).await;
    completes_with_note(&mut h, &run, "from the profile's model\n").await;
    // The tools went out in Anthropic's shape, and the results came back as `tool_result`s.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests[0]["tools"][0].get("input_schema").is_some(),
        "{}",
        requests[0]["tools"][0]
    );
    assert!(
        requests[1]["messages"].to_string().contains("tool_result"),
        "{}",
        requests[1]["messages"]
    );
    h.plane.shutdown().await;
}
