//! One agent turn is one trace across the services, exported over OTLP to a collector
//! (`fake-opentelemetry-collector`): the host's span → the runtime's `ExecuteToolCalls` → one
//! `execute_tool {tool}` span per call (GenAI attributes, run, invocation, cell, outcome) → the
//! workspace service's and the mcp-proxy's `ToolExecutor/Execute` spans and their own
//! `execute_tool` spans, parent to child all the way, carried by W3C `traceparent` metadata over
//! real sockets. A runtime-driven run adds a `chat {model}` client span per model call with what
//! the response reported (models, id, finish reasons, token usage) and the server it was sent to.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};
use tracing::Instrument;

/// An attribute's value: the collector keeps the `AnyValue` in its debug form.
fn attr(span: &ExportedSpan, key: &str) -> Option<String> {
    let raw = span.attributes.get(key)?;
    if let Some(rest) = raw.split_once("StringValue(\"").map(|(_, r)| r) {
        return rest
            .rsplit_once("\")")
            .map(|(v, _)| v.replace("\\\"", "\""));
    }
    raw.split_once("IntValue(")
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(v, _)| v.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_is_one_trace_across_runtime_workspace_and_mcp_proxy() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let telemetry = toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("toolplane")
            .with_default_directive("warn")
            .with_var("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
            .with_var("OTEL_METRIC_EXPORT_INTERVAL", "3600000"),
    )
    .unwrap();
    assert!(telemetry.is_exporting());

    let mut h = harness().await;
    register_fixture(&mut h).await;
    h.put_profile(json!({"id": "traced", "tools": {"allow": ["builtin:workspace.read_file", "mcp:fixture/slow", "mcp:fixture/trace"]}}))
        .await;
    let run = h.create_run("traced", true).await;
    let opened = h.open(&run, pb::ProviderFormat::OpenaiChat).await;

    // The host's own span: its context rides on the request's metadata.
    let mut traced = RuntimeServiceClient::with_interceptor(
        channel(&h.plane.runtime_url()).await,
        toolplane_telemetry::TraceContextInterceptor,
    );
    let host = tracing::info_span!("agent_host_turn", otel.name = "agent_host_turn");
    let request = pb::ExecuteToolCallsRequest {
        invocation_id: opened.invocation_id.clone(),
        turn_id: opened.first_turn.unwrap().turn_id,
        provider_format: pb::ProviderFormat::OpenaiChat as i32,
        calls_json: openai_calls(&[
            (
                "r1",
                "workspace_read_file",
                json!({"path": "output/none.md"}),
            ),
            ("m1", "mcp__fixture__slow", json!({"ms": 1})),
            ("t1", "mcp__fixture__trace", json!({})),
        ])
        .to_string(),
        ..Default::default()
    };
    let r = async { traced.execute_tool_calls(request).await }
        .instrument(host)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.results.len(), 3);
    // What the MCP server itself received in the request's `_meta` (SEP-414).
    let received = r.results[2].content.trim().to_owned();
    // Export stops (flushing spans, pushing metrics a last time) while the plane still runs.
    telemetry.shutdown().unwrap();
    h.plane.shutdown().await;

    // The metrics went out over OTLP too (the last push happens at shutdown), each service as
    // its own resource.
    let metrics = collector.exported_metrics(3, Duration::from_secs(10)).await;
    let families: Vec<Vec<&str>> = metrics
        .iter()
        .map(|m| m.metrics.iter().map(|f| f.name.as_str()).collect())
        .collect();
    for expected in [
        "toolplane_tool_calls_total",
        "toolplane_workspace_journal_records_total",
        "toolplane_mcp_connections",
    ] {
        assert_eq!(
            families.iter().filter(|f| f.contains(&expected)).count(),
            1,
            "{expected} in exactly one service's metrics: {families:?}"
        );
    }
    let dump = format!("{metrics:?}");
    assert!(dump.contains("builtin:workspace.read_file"), "{dump:.2000}");

    let spans = collector.exported_spans(10, Duration::from_secs(10)).await;
    let by_id: HashMap<&str, &ExportedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let named =
        |name: &str| -> Vec<&ExportedSpan> { spans.iter().filter(|s| s.name == name).collect() };
    let one = |name: &str| -> &ExportedSpan {
        let found = named(name);
        assert_eq!(
            found.len(),
            1,
            "{name}: {:#?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        found[0]
    };
    let parent = |s: &ExportedSpan| by_id.get(s.parent_span_id.as_str()).copied();
    let has_ancestor = |s: &ExportedSpan, ancestor: &ExportedSpan| {
        let mut at = parent(s);
        while let Some(p) = at {
            if p.span_id == ancestor.span_id {
                return true;
            }
            at = parent(p);
        }
        false
    };

    let root = one("agent_host_turn");
    let server = one("toolplane.v1.RuntimeService/ExecuteToolCalls");
    assert_eq!(server.parent_span_id, root.span_id);
    assert_eq!(server.kind, "SPAN_KIND_SERVER");
    let read = one("execute_tool builtin:workspace.read_file");
    let mcp = spans
        .iter()
        .find(|s| {
            s.name.starts_with("execute_tool mcp/")
                && attr(s, "gen_ai.tool.call.id").as_deref() == Some("m1")
                && attr(s, "gen_ai.operation.name").is_some()
        })
        .unwrap_or_else(|| {
            panic!(
                "the runtime's span of the MCP call: {:#?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    for call in [read, mcp] {
        assert_eq!(call.trace_id, root.trace_id);
        assert!(has_ancestor(call, server));
        assert_eq!(attr(call, "gen_ai.operation.name").unwrap(), "execute_tool");
        assert_eq!(attr(call, "gen_ai.tool.type").unwrap(), "extension");
        assert_eq!(attr(call, "run.id").unwrap(), run);
        assert_eq!(attr(call, "invocation.id").unwrap(), opened.invocation_id);
        assert_eq!(attr(call, "cell.id").unwrap(), "default");
        assert!(!call.attributes.contains_key("arguments"));
    }
    assert_eq!(
        attr(read, "gen_ai.tool.name").unwrap(),
        "builtin:workspace.read_file"
    );
    assert_eq!(attr(read, "gen_ai.tool.call.id").unwrap(), "r1");
    assert_eq!(attr(read, "toolplane.outcome").unwrap(), "known");
    assert!(
        attr(read, "error.type").unwrap().starts_with("workspace."),
        "{:?}",
        read.attributes
    );
    assert_eq!(attr(mcp, "toolplane.outcome").unwrap(), "known");

    // The workspace service's and the mcp-proxy's server spans hang under the runtime's call
    // spans, and their own execute spans under those.
    let executes = named("toolplane.v1.ToolExecutor/Execute");
    assert_eq!(executes.len(), 3, "{executes:#?}");
    let ws = executes
        .iter()
        .find(|s| has_ancestor(s, read))
        .expect("workspace Execute under read_file");
    let px = executes
        .iter()
        .find(|s| has_ancestor(s, mcp))
        .expect("mcp-proxy Execute under the mcp call");
    let ws_tool = one("execute_tool workspace.read_file");
    assert!(has_ancestor(ws_tool, ws));
    assert!(
        spans.iter().any(|s| s.span_id != mcp.span_id
            && s.trace_id == root.trace_id
            && has_ancestor(s, px)),
        "the mcp-proxy's own spans"
    );
    // The MCP server got the trace too: same trace id, parent a span of the mcp-proxy's that
    // hangs under the runtime's `execute_tool` of that call.
    let parts: Vec<&str> = received.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {received}");
    assert_eq!(parts[1], root.trace_id, "traceparent {received}");
    let traced_call = spans
        .iter()
        .find(|s| {
            s.name.starts_with("execute_tool mcp/")
                && attr(s, "gen_ai.tool.call.id").as_deref() == Some("t1")
                && attr(s, "gen_ai.operation.name").is_some()
        })
        .expect("the runtime's span of the trace call");
    let sender = by_id
        .get(parts[2])
        .expect("the span that sent the MCP request was exported");
    assert!(has_ancestor(sender, traced_call), "{sender:#?}");
    // That span is the mcp-proxy's client span of the request, with the MCP conventions.
    assert_eq!(
        attr(sender, "mcp.method.name").as_deref(),
        Some("tools/call"),
        "{sender:#?}"
    );
    assert_eq!(
        attr(sender, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert!(
        sender.name.starts_with("tools/call ")
            && attr(sender, "gen_ai.tool.name").is_some_and(|t| sender.name.ends_with(&t)),
        "{sender:#?}"
    );
    assert!(
        attr(sender, "mcp.protocol.version").is_some_and(|v| v.starts_with("20")),
        "{sender:#?}"
    );
    assert!(attr(sender, "jsonrpc.request.id").is_some(), "{sender:#?}");
    assert_eq!(attr(sender, "network.transport").as_deref(), Some("pipe"));
    // One trace for the whole turn.
    assert!(
        spans
            .iter()
            .filter(|s| has_ancestor(s, root))
            .all(|s| s.trace_id == root.trace_id)
    );
    let _ = &mut collector;
}

/// A completion calling `calls`, as a provider reports it: its own id, the dated model that
/// answered, `tool_calls` as the finish reason and the tokens it cost.
fn reported(n: usize, calls: &[(&str, Value)], input: u64, output: u64) -> ScriptedReply {
    let mut reply = ScriptedReply::tool_calls(n, calls);
    let mut body: Value = serde_json::from_str(&reply.body).unwrap();
    body["id"] = json!(format!("chatcmpl-{n}"));
    body["model"] = json!("gpt-test-2026-01-01");
    body["choices"][0]["finish_reason"] = json!("tool_calls");
    body["usage"] = json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output});
    reply.body = body.to_string();
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_driven_runs_model_and_tool_spans_follow_the_genai_conventions() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let telemetry = toolplane_telemetry::init(
        toolplane_telemetry::TelemetryConfig::new("toolplane")
            .with_default_directive("warn")
            .with_var("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
            .with_var("OTEL_METRIC_EXPORT_INTERVAL", "3600000"),
    )
    .unwrap();
    let mut h = harness().await;
    h.put_profile(writer_profile()).await;
    let model = spawn_model_server(vec![
        reported(
            1,
            &[(
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "note\n"}),
            )],
            120,
            7,
        ),
        reported(2, &[("workspace_commit", json!({}))], 150, 5),
        reported(
            3,
            &[("workspace_finish", json!({"summary": "done"}))],
            170,
            3,
        ),
    ])
    .await
    .unwrap();
    let run = h
        .start_run(pb::RunSpec {
            profile_id: "writer".into(),
            model: Some(pb::ModelEndpoint {
                kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
                base_url: model.base_url(),
                model: "gpt-test".into(),
                ..Default::default()
            }),
            initial_user_message: "Write a note, publish it and finish.".into(),
            mode: pb::RunMode::Foreground as i32,
            chat: Some(pb::ChatBinding {
                chat_id: "chat-traced".into(),
                message_id: None,
            }),
            max_rounds: 6,
            ..Default::default()
        })
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    telemetry.shutdown().unwrap();
    h.plane.shutdown().await;

    let spans = collector.exported_spans(6, Duration::from_secs(10)).await;
    let mut chats: Vec<&ExportedSpan> =
        spans.iter().filter(|s| s.name == "chat gpt-test").collect();
    chats.sort_by_key(|s| attr(s, "toolplane.round").unwrap().parse::<u32>().unwrap());
    assert_eq!(
        chats.len(),
        3,
        "{:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let port = model.addr.port().to_string();
    for (i, (chat, (input, output))) in chats
        .iter()
        .zip([("120", "7"), ("150", "5"), ("170", "3")])
        .enumerate()
    {
        assert_eq!(chat.kind, "SPAN_KIND_CLIENT");
        let want = [
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.model", "gpt-test"),
            ("gen_ai.response.model", "gpt-test-2026-01-01"),
            ("gen_ai.usage.input_tokens", input),
            ("gen_ai.usage.output_tokens", output),
            ("server.address", "127.0.0.1"),
            ("server.port", port.as_str()),
            ("run.id", run.as_str()),
        ];
        for (key, value) in want {
            assert_eq!(
                attr(chat, key).as_deref(),
                Some(value),
                "{key}: {:#?}",
                chat.attributes
            );
        }
        assert_eq!(
            attr(chat, "gen_ai.response.id").unwrap(),
            format!("chatcmpl-{}", i + 1)
        );
        // A string array: `["tool_calls"]`.
        let reasons = chat
            .attributes
            .get("gen_ai.response.finish_reasons")
            .unwrap();
        assert!(
            reasons.contains("ArrayValue") && reasons.contains("\"tool_calls\""),
            "{reasons}"
        );
        assert!(!chat.attributes.contains_key("error.type"));
    }

    // Each call the model made is an `execute_tool` span with its name, call id and type.
    for (name, call_id) in [
        ("builtin:workspace.write_file", "call_1_0"),
        ("builtin:workspace.commit", "call_2_0"),
        ("builtin:workspace.finish", "call_3_0"),
    ] {
        let call = spans
            .iter()
            .find(|s| {
                s.name == format!("execute_tool {name}")
                    && attr(s, "gen_ai.tool.call.id").as_deref() == Some(call_id)
            })
            .unwrap_or_else(|| {
                panic!(
                    "{name}: {:#?}",
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            });
        assert_eq!(attr(call, "gen_ai.operation.name").unwrap(), "execute_tool");
        assert_eq!(attr(call, "gen_ai.tool.name").unwrap(), name);
        assert_eq!(attr(call, "gen_ai.tool.type").unwrap(), "extension");
        assert_eq!(attr(call, "run.id").unwrap(), run);
    }
    let _ = &mut collector;
}
