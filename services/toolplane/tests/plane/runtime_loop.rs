//! Runtime-driven runs end to end: the runtime calls a scripted OpenAI-compatible HTTP server through
//! its real HTTP client and drives the loop itself (tool calls, drift, malformed replies, 429 / 500
//! with retry, cancellation), or replays a scripted provider offline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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
        .start_run(pb::StartRunRequest {
            spec: Some(bad),
            request_id: String::new(),
        })
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
            .start_run(pb::StartRunRequest {
                spec: Some(s),
                request_id: String::new(),
            })
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

/// A run driven in `format` against the scripted model server: the closing-tool script in that
/// format's reply shape, the spec naming kind and format, and the path the server must be called at.
async fn drive_in_format(format: pb::ProviderFormat) -> (Harness, Vec<Value>, Vec<String>) {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let note = format!("written over {}\n", format.as_str_name());
    let calls: [(&str, Value); 3] = [
        (
            "workspace_write_file",
            json!({"path": "output/main.md", "content": note}),
        ),
        ("workspace_commit", json!({})),
        ("workspace_finish", json!({"summary": "done"})),
    ];
    let replies: Vec<ScriptedReply> = calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let one = std::slice::from_ref(call);
            match format {
                pb::ProviderFormat::OpenaiResponses => ScriptedReply::responses_calls(i + 1, one),
                pb::ProviderFormat::AnthropicMessages => ScriptedReply::anthropic_calls(i + 1, one),
                pb::ProviderFormat::Gemini => ScriptedReply::gemini_calls(one),
                _ => ScriptedReply::tool_calls(i + 1, one),
            }
        })
        .collect();
    let model = spawn_model_server(replies).await.unwrap();
    let (kind, base_url) = match format {
        pb::ProviderFormat::AnthropicMessages => (
            pb::ModelEndpointKind::Anthropic,
            model.base_url().trim_end_matches("/v1").to_owned(),
        ),
        pb::ProviderFormat::Gemini => (
            pb::ModelEndpointKind::Gemini,
            model.base_url().trim_end_matches("/v1").to_owned(),
        ),
        _ => (pb::ModelEndpointKind::OpenaiCompatible, model.base_url()),
    };
    let mut s = spec("writer", &base_url, false, 8);
    let m = s.model.as_mut().unwrap();
    m.kind = kind as i32;
    m.provider_format = format as i32;
    m.max_output_tokens = Some(512);
    let run = h.start_run(s).await;
    completes_with_note(&mut h, &run, &note).await;
    // Every call was executed: the tool events name each, in order.
    let journal = h.journal(&run).await;
    let completed: Vec<String> = journal
        .iter()
        .filter(|e| e.r#type == "tool_call_completed")
        .map(|e| payload(e)["alias"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        completed,
        [
            "workspace_write_file",
            "workspace_commit",
            "workspace_finish"
        ]
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    (h, requests, model.paths())
}

/// The names of the tools a request advertises.
fn advertised(tools: &Value, name: impl Fn(&Value) -> Option<&str>) -> Vec<String> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| name(t).map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_chat_endpoint_is_driven_in_chat_completions() {
    let (h, requests, paths) = drive_in_format(pb::ProviderFormat::OpenaiChat).await;
    assert!(
        paths.iter().all(|p| p == "/v1/chat/completions"),
        "{paths:?}"
    );
    let names = advertised(&requests[0]["tools"], |t| t["function"]["name"].as_str());
    assert!(names.iter().any(|n| n == "workspace_finish"), "{names:?}");
    assert_eq!(requests[0]["messages"][0]["role"], "system");
    assert_eq!(requests[0]["max_tokens"], 512);
    let messages = requests[1]["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["tool_calls"][0]["id"], "call_1_0");
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_call_id"], "call_1_0");
    assert!(messages[n - 1]["content"].is_string());
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_responses_endpoint_is_driven_in_responses() {
    let (h, requests, paths) = drive_in_format(pb::ProviderFormat::OpenaiResponses).await;
    assert!(paths.iter().all(|p| p == "/v1/responses"), "{paths:?}");
    let first = &requests[0];
    assert!(first.get("messages").is_none(), "{first}");
    let tools = first["tools"].as_array().unwrap();
    assert!(
        tools.iter().all(|t| t["type"] == "function"
            && t["parameters"].is_object()
            && t["strict"] == false),
        "{tools:?}"
    );
    let names = advertised(&first["tools"], |t| t["name"].as_str());
    assert!(names.iter().any(|n| n == "workspace_finish"), "{names:?}");
    assert!(
        first["instructions"]
            .as_str()
            .unwrap()
            .contains("workspace_finish")
    );
    assert_eq!(first["max_output_tokens"], 512);
    assert_eq!(first["input"][0]["role"], "user");
    // The previous round's output item, then its result as a `function_call_output` item.
    let input = requests[1]["input"].as_array().unwrap();
    let n = input.len();
    assert_eq!(input[n - 2]["type"], "function_call");
    assert_eq!(input[n - 2]["call_id"], "call_1_0");
    assert_eq!(input[n - 1]["type"], "function_call_output");
    assert_eq!(input[n - 1]["call_id"], "call_1_0");
    assert!(input[n - 1]["output"].is_string());
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_endpoint_is_driven_in_messages() {
    let (h, requests, paths) = drive_in_format(pb::ProviderFormat::AnthropicMessages).await;
    assert!(paths.iter().all(|p| p == "/v1/messages"), "{paths:?}");
    let names = advertised(&requests[0]["tools"], |t| t["name"].as_str());
    assert!(names.iter().any(|n| n == "workspace_finish"), "{names:?}");
    assert!(requests[0]["tools"][0]["input_schema"].is_object());
    assert!(requests[0]["system"].is_string());
    assert_eq!(requests[0]["max_tokens"], 512);
    let messages = requests[1]["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["content"][0]["type"], "tool_use");
    let result = &messages[n - 1]["content"][0];
    assert_eq!(messages[n - 1]["role"], "user");
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1_0");
    assert_eq!(result["is_error"], false);
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_endpoint_is_driven_in_generate_content() {
    let (h, requests, paths) = drive_in_format(pb::ProviderFormat::Gemini).await;
    assert!(
        paths
            .iter()
            .all(|p| p == "/v1beta/models/scripted:generateContent"),
        "{paths:?}"
    );
    let first = &requests[0];
    let names = advertised(&first["tools"][0]["functionDeclarations"], |t| {
        t["name"].as_str()
    });
    assert!(names.iter().any(|n| n == "workspace_finish"), "{names:?}");
    assert_eq!(first["toolConfig"]["functionCallingConfig"]["mode"], "AUTO");
    assert!(first["systemInstruction"]["parts"][0]["text"].is_string());
    assert_eq!(first["generationConfig"]["maxOutputTokens"], 512);
    assert_eq!(first["contents"][0]["role"], "user");
    let contents = requests[1]["contents"].as_array().unwrap();
    let n = contents.len();
    assert_eq!(contents[n - 2]["role"], "model");
    assert_eq!(
        contents[n - 2]["parts"][0]["functionCall"]["name"],
        "workspace_write_file"
    );
    let response = &contents[n - 1]["parts"][0]["functionResponse"];
    assert_eq!(contents[n - 1]["role"], "user");
    assert_eq!(response["name"], "workspace_write_file");
    assert!(
        response.get("id").is_none(),
        "the call came without an id: {response}"
    );
    assert!(response["response"]["output"].is_string(), "{response}");
    h.plane.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_the_endpoint_kind_cannot_speak_is_refused_at_start() {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![ScriptedReply::text("never")])
        .await
        .unwrap();
    for (kind, format, says) in [
        (
            pb::ModelEndpointKind::Anthropic,
            pb::ProviderFormat::Gemini,
            "cannot speak the provider format gemini; it speaks anthropic_messages",
        ),
        (
            pb::ModelEndpointKind::Gemini,
            pb::ProviderFormat::OpenaiResponses,
            "it speaks gemini",
        ),
    ] {
        let mut s = spec("writer", &model.base_url(), false, 5);
        s.run_id = format!("never-{}", format.as_str_name());
        let m = s.model.as_mut().unwrap();
        m.kind = kind as i32;
        m.provider_format = format as i32;
        let status = h
            .runtime
            .start_run(pb::StartRunRequest {
                spec: Some(s.clone()),
                request_id: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(says), "{}", status.message());
        let missing = h
            .runtime
            .get_run(pb::GetRunRequest { run_id: s.run_id })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), tonic::Code::NotFound);
    }
    assert!(model.requests().is_empty());
    h.plane.shutdown().await;
}

/// Tokens of a request body as the runtime estimates them (its JSON text in bytes / 4).
fn estimated_tokens(body: &Value) -> u64 {
    (body.to_string().len() as u64).div_ceil(4)
}

/// Room for the tools, the write's arguments and one copy of the file, not two (the requests of
/// the script below are ~1,400, ~3,400 and, with the file read back, ~5,500 tokens).
const BUDGET_TOKENS: u32 = 4_500;

/// Writes a 7,000-character file, reads it back, then answers, commits and finishes, on an
/// endpoint speaking `format` with a budget of [`BUDGET_TOKENS`]. Returns the requests and the
/// run's `history_trimmed` payloads, after checking the note's path holds the full result.
async fn trim_in_format(format: pb::ProviderFormat) -> (Vec<Value>, Vec<Value>) {
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let big: String = (0..120)
        .map(|i| format!("line {i:03} of a long file that the model reads back in full, once\n"))
        .collect();
    let calls: Vec<(&str, Value)> = vec![
        (
            "workspace_write_file",
            json!({"path": "output/big.txt", "content": big}),
        ),
        ("workspace_read_file", json!({"path": "output/big.txt"})),
        (
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "short answer\n"}),
        ),
        ("workspace_commit", json!({})),
        ("workspace_finish", json!({"summary": "done"})),
    ];
    let replies = calls
        .iter()
        .enumerate()
        .map(|(i, call)| match format {
            pb::ProviderFormat::Gemini => ScriptedReply::gemini_calls(std::slice::from_ref(call)),
            _ => ScriptedReply::tool_calls(i + 1, std::slice::from_ref(call)),
        })
        .collect();
    let model = spawn_model_server(replies).await.unwrap();
    let mut s = spec("writer", &model.base_url(), false, 10);
    let m = s.model.as_mut().unwrap();
    if format == pb::ProviderFormat::Gemini {
        m.kind = pb::ModelEndpointKind::Gemini as i32;
        m.base_url = model.base_url().trim_end_matches("/v1").to_owned();
    }
    m.context_budget_tokens = Some(BUDGET_TOKENS);
    let run = h.start_run(s).await;
    completes_with_note(&mut h, &run, "short answer\n").await;
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    let trims: Vec<Value> = h
        .journal(&run)
        .await
        .iter()
        .filter(|e| e.r#type == "history_trimmed")
        .map(payload)
        .collect();
    assert!(!trims.is_empty(), "no trim was journalled");
    let path = trims[0]["externalised"][0]["path"].as_str().unwrap();
    let stored = String::from_utf8(h.object(&run, path).await.unwrap()).unwrap();
    assert!(stored.contains("line 119"), "{stored}");
    h.plane.shutdown().await;
    (requests, trims)
}

/// Checks the first trim: before the third request, the read's result was externalised and
/// nothing dropped; the third request is within the budget. Returns the note's path.
fn check_first_trim(requests: &[Value], trims: &[Value]) -> String {
    let budget = u64::from(BUDGET_TOKENS);
    let trim = &trims[0];
    assert_eq!(trim["round"], 3, "{trim}");
    assert_eq!(trim["fits"], true, "{trim}");
    assert_eq!(trim["droppedTurns"], 0, "{trim}");
    assert!(trim["beforeTokens"].as_u64().unwrap() > budget, "{trim}");
    assert!(trim["afterTokens"].as_u64().unwrap() <= budget, "{trim}");
    // The second request carried the file once and was left alone; the third is within budget
    // (the request's own fields, such as `model`, aside).
    assert!(requests[1].to_string().contains("line 119"));
    for r in requests {
        assert!(
            estimated_tokens(r) <= budget + 16,
            "{}",
            estimated_tokens(r)
        );
    }
    trim["externalised"][0]["path"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_context_budget_externalises_a_large_result_in_chat_completions() {
    let (requests, trims) = trim_in_format(pb::ProviderFormat::OpenaiChat).await;
    let path = check_first_trim(&requests, &trims);
    assert_eq!(trims[0]["externalised"][0]["callId"], "call_2_0");
    // Still well-formed Chat Completions: the read call and its answer both there, the answer
    // naming where the full result is.
    let messages = requests[2]["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["tool_calls"][0]["id"] == "call_2_0")
    );
    let answer = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_2_0")
        .expect("the read's answer stays");
    let note = answer["content"].as_str().unwrap();
    assert!(
        note.contains(&path) && note.contains("workspace_read_file"),
        "{note}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_context_budget_externalises_a_large_result_in_gemini() {
    let (requests, trims) = trim_in_format(pb::ProviderFormat::Gemini).await;
    let path = check_first_trim(&requests, &trims);
    // Gemini's calls carry no ids: the answer is found by its text, and stays a
    // `functionResponse` right after its `functionCall`.
    assert_eq!(trims[0]["externalised"][0]["callId"], "");
    let contents = requests[2]["contents"].as_array().unwrap();
    let at = contents
        .iter()
        .position(|c| c["parts"][0]["functionCall"]["name"] == "workspace_read_file")
        .expect("the read call stays");
    let response = &contents[at + 1]["parts"][0]["functionResponse"];
    assert_eq!(response["name"], "workspace_read_file");
    let note = response["response"]["output"].as_str().unwrap();
    assert!(
        note.contains(&path) && note.contains("workspace_read_file"),
        "{note}"
    );
}
