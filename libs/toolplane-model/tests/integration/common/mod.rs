//! The snapshot, turn contracts and provider-native sample responses shared by the wire tests, and
//! the one list of outputs that both the expect-test tables and the SDK fixture set are made of.
#![allow(dead_code)]

use serde_json::{Value, json};
use toolplane_core::Profile;
use toolplane_core::builtin;
use toolplane_core::catalog::{CatalogEntry, McpPermission, ToolCatalog, ToolOrigin};
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_core::error::TOOL_INVALID_ARGUMENTS;
use toolplane_core::id::ToolId;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::policy::PolicyLayers;
use toolplane_core::result::{AgentToolResult, ResourceRef};
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::turn::{ToolChoice, ToolTurnContract};
use toolplane_model::{DecodedTurn, ProviderFormat};

pub const GH: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
pub const TURN: u32 = 2;

pub fn create_issue_id() -> ToolId {
    ToolId::parse(&format!("mcp/{GH}:create_issue")).unwrap()
}

fn mcp(native: &str, description: &str, schema: Value) -> CatalogEntry {
    let id = ToolId::parse(&format!("mcp/{GH}:{native}")).unwrap();
    let d = ToolDescriptor::new(id, description, schema)
        .unwrap()
        .with_title(Some(format!("{native} (title is for people)")))
        .unwrap();
    CatalogEntry::usable(
        ToolOrigin::Mcp {
            registration_id: GH.into(),
            server_name: "github".into(),
            permission: McpPermission::Allow,
        },
        d,
    )
    .unwrap()
}

/// A builtin, an MCP tool whose schema uses keywords an OpenAPI-subset schema would reject, and an
/// MCP tool without a description.
pub fn snapshot_for(invocation_id: &str) -> InvocationToolSnapshot {
    let entries = vec![
        CatalogEntry::usable(
            ToolOrigin::Builtin,
            builtin::descriptor(builtin::DICE_ROLL).unwrap().clone(),
        )
        .unwrap(),
        mcp(
            "create_issue",
            "Create an issue in a GitHub repository.",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1},
                    "labels": {"type": "array", "items": {"type": "string"}, "default": []},
                    "priority": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
                },
                "required": ["title"],
                "additionalProperties": false
            }),
        ),
        mcp("ping", "", json!({"type": "object"})),
    ];
    let catalog = ToolCatalog::new(entries).unwrap();
    let profile = Profile::from_json(
        &json!({"id": "agent", "tools": {"allow": ["builtin:dice.roll", "mcp:github/*"]}})
            .to_string(),
    )
    .unwrap();
    InvocationToolSnapshot::compile(CompileRequest {
        run_id: "run-1",
        invocation_id,
        profile: &profile,
        layers: PolicyLayers::default(),
        exit_policy: &ExitPolicy::Root,
        catalog: &catalog,
    })
    .unwrap()
}

pub fn snapshot() -> InvocationToolSnapshot {
    snapshot_for("inv-1")
}

pub fn contract(snapshot: &InvocationToolSnapshot, choice: ToolChoice) -> ToolTurnContract {
    ToolTurnContract::all(snapshot, TURN, choice).unwrap()
}

/// One call of a sample, provider-neutral.
#[derive(Debug, Clone)]
pub struct SampleCall {
    pub id: Option<String>,
    pub name: String,
    pub args: Value,
}

pub fn call(id: Option<&str>, name: &str, args: Value) -> SampleCall {
    SampleCall {
        id: id.map(str::to_owned),
        name: name.to_owned(),
        args,
    }
}

/// The model's turn, provider-neutral: optional text, then calls.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub text: Option<String>,
    pub calls: Vec<SampleCall>,
}

pub fn sample(text: Option<&str>, calls: Vec<SampleCall>) -> Sample {
    Sample {
        text: text.map(str::to_owned),
        calls,
    }
}

/// The standard turn: some text, a dice roll and an issue. Ids are given per provider below.
pub fn standard(format: ProviderFormat) -> Sample {
    let ids: [Option<&str>; 2] = match format {
        ProviderFormat::OpenAiChat => [Some("call_7Gx2"), Some("call_Q9d1")],
        ProviderFormat::OpenAiResponses => [Some("call_r1"), Some("call_r2")],
        ProviderFormat::AnthropicMessages => {
            [Some("toolu_01A09q90qw90lq917835lq9"), Some("toolu_01Bx")]
        }
        // Gemini's whole-response sample omits ids, as Gemini often does.
        ProviderFormat::Gemini => [None, None],
    };
    sample(
        Some("Rolling first, then filing the issue."),
        vec![
            call(ids[0], "dice_roll", json!({"notation": "3d6+4"})),
            call(
                ids[1],
                "mcp__github__create_issue",
                json!({"title": "Dice are loaded", "labels": ["bug"]}),
            ),
        ],
    )
}

/// A turn of one call without arguments and without text. Gemini's carries an id this time, to
/// show ids are kept and echoed when the model sends them.
pub fn ping(format: ProviderFormat) -> Sample {
    let id = match format {
        ProviderFormat::OpenAiChat => "call_p1",
        ProviderFormat::OpenAiResponses => "call_p1",
        ProviderFormat::AnthropicMessages => "toolu_01Px",
        ProviderFormat::Gemini => "fc-1",
    };
    sample(None, vec![call(Some(id), "mcp__github__ping", json!({}))])
}

/// The provider's whole response for a sample, with the fields real responses carry.
pub fn whole_response(format: ProviderFormat, s: &Sample) -> Value {
    match format {
        ProviderFormat::OpenAiChat => json!({
            "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
            "object": "chat.completion",
            "created": 1767225600,
            "model": "gpt-4.1-2025-04-14",
            "choices": [{
                "index": 0,
                "message": chat_message(s),
                "logprobs": null,
                "finish_reason": if s.calls.is_empty() { "stop" } else { "tool_calls" }
            }],
            "usage": {"prompt_tokens": 412, "completion_tokens": 58, "total_tokens": 470}
        }),
        ProviderFormat::OpenAiResponses => {
            let mut output = vec![json!({"type": "reasoning", "id": "rs_68af", "summary": []})];
            output.extend(responses_items(s));
            json!({
                "id": "resp_68af4030592c81938ec0a5fbab4a3e9f",
                "object": "response",
                "created_at": 1767225600,
                "status": "completed",
                "error": null,
                "incomplete_details": null,
                "instructions": null,
                "model": "gpt-5-2025-08-07",
                "output": output,
                "parallel_tool_calls": true,
                "tool_choice": "auto",
                "tools": []
            })
        }
        ProviderFormat::AnthropicMessages => {
            let mut content = vec![json!({
                "type": "thinking",
                "thinking": "The user wants a roll and an issue.",
                "signature": "EqQBCkgIARABGAIiQL1"
            })];
            content.extend(anthropic_blocks(s, true));
            json!({
                "id": "msg_01Aq9w938a90dw8q",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": content,
                "stop_reason": if s.calls.is_empty() { "end_turn" } else { "tool_use" },
                "stop_sequence": null,
                "usage": {"input_tokens": 412, "output_tokens": 58}
            })
        }
        ProviderFormat::Gemini => json!({
            "candidates": [{
                "content": gemini_content(s, true),
                "finishReason": "STOP",
                "index": 0
            }],
            "usageMetadata": {
                "promptTokenCount": 412,
                "candidatesTokenCount": 58,
                "totalTokenCount": 470
            },
            "modelVersion": "gemini-2.5-flash",
            "responseId": "kS2uaPXkLd6mz7IP2YuO2Q4"
        }),
    }
}

/// Just the assistant part: the chat message, the Responses output items, an Anthropic assistant
/// message param, a Gemini `Content`.
pub fn assistant_part(format: ProviderFormat, s: &Sample) -> Value {
    match format {
        ProviderFormat::OpenAiChat => chat_message(s),
        ProviderFormat::OpenAiResponses => Value::Array(responses_items(s)),
        ProviderFormat::AnthropicMessages => {
            json!({"role": "assistant", "content": anthropic_blocks(s, false)})
        }
        ProviderFormat::Gemini => gemini_content(s, false),
    }
}

fn chat_message(s: &Sample) -> Value {
    let mut m = json!({
        "role": "assistant",
        "content": s.text,
        "refusal": null,
        "annotations": []
    });
    if !s.calls.is_empty() {
        m["tool_calls"] = s
            .calls
            .iter()
            .map(|c| {
                let mut tc = json!({
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.args.to_string()}
                });
                if let Some(id) = &c.id {
                    tc["id"] = json!(id);
                }
                tc
            })
            .collect();
    }
    m
}

fn responses_items(s: &Sample) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(text) = &s.text {
        items.push(json!({
            "type": "message",
            "id": "msg_68af",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }));
    }
    for (i, c) in s.calls.iter().enumerate() {
        let mut item = json!({
            "type": "function_call",
            "id": format!("fc_68af{i}"),
            "name": c.name,
            "arguments": c.args.to_string(),
            "status": "completed"
        });
        if let Some(id) = &c.id {
            item["call_id"] = json!(id);
        }
        items.push(item);
    }
    items
}

fn anthropic_blocks(s: &Sample, response: bool) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(text) = &s.text {
        let mut b = json!({"type": "text", "text": text});
        if response {
            b["citations"] = Value::Null;
        }
        blocks.push(b);
    }
    for c in &s.calls {
        let mut b = json!({"type": "tool_use", "name": c.name, "input": c.args});
        if let Some(id) = &c.id {
            b["id"] = json!(id);
        }
        blocks.push(b);
    }
    blocks
}

fn gemini_content(s: &Sample, response: bool) -> Value {
    let mut parts = Vec::new();
    if response {
        // A thought summary (`includeThoughts`): history, never assistant text.
        parts.push(json!({"text": "Roll first; the issue needs the result.", "thought": true}));
    }
    if let Some(text) = &s.text {
        parts.push(json!({"text": text}));
    }
    for (i, c) in s.calls.iter().enumerate() {
        let mut function_call = json!({"name": c.name, "args": c.args});
        if let Some(id) = &c.id {
            function_call["id"] = json!(id);
        }
        let mut part = json!({"functionCall": function_call});
        // Gemini puts the thought signature on the first function call part only.
        if response && i == 0 {
            part["thoughtSignature"] = json!("CiQBVKhc7vB2fOOOTaQXN8Zq9p0=");
        }
        parts.push(part);
    }
    json!({"role": "model", "parts": parts})
}

/// Results for decoded calls: the dice roll succeeds with structured content and refs, `ping`
/// succeeds with no content at all, anything else fails with a code. Structured content, codes and
/// refs must never reach the provider.
pub fn results_for(calls: &[ToolInvocation]) -> Vec<AgentToolResult> {
    calls
        .iter()
        .map(|c| match c.tool_id.native() {
            "dice.roll" => AgentToolResult::ok(c, "3d6+4: 4 + 2 + 6 + 4 = 16")
                .with_structured(json!({"dice": [4, 2, 6], "total": 16, "marker": "STRUCTURED"}))
                .with_refs(vec![ResourceRef {
                    uri: "workspace:scratch/rolls.txt".into(),
                    title: None,
                }]),
            "ping" => AgentToolResult::ok(c, ""),
            _ => AgentToolResult::error(
                c,
                TOOL_INVALID_ARGUMENTS,
                "`labels` must name existing labels; `bug` does not exist. Call without `labels` or use `triage`.",
            ),
        })
        .collect()
}

/// What a decoded turn looks like in a snapshot (the history has its own entry).
pub fn render_decoded(turn: &DecodedTurn) -> Value {
    json!({
        "invocations": turn.invocations,
        "assistantText": turn.assistant_text,
    })
}

/// One output of the wire formats: `kind` names what it is (and which SDK type checks it),
/// `case` the variant.
#[derive(Debug, Clone)]
pub struct Output {
    pub kind: &'static str,
    pub case: &'static str,
    pub value: Value,
}

impl Output {
    pub fn name(&self) -> String {
        format!("{}__{}", self.kind, self.case)
    }
}

/// The kind of the tool-choice output: `tool_choice`, or Gemini's `tool_config`.
pub fn choice_kind(format: ProviderFormat) -> (&'static str, &'static str) {
    match format {
        ProviderFormat::Gemini => ("tool_config", "toolConfig"),
        _ => ("tool_choice", "tool_choice"),
    }
}

/// Every output of one provider format, in a fixed order: the tools, the four choices, the
/// samples we decode, what they decode to, the history they leave, and the results.
pub fn outputs(format: ProviderFormat) -> Vec<Output> {
    let snap = snapshot();
    let mut out = Vec::new();
    let (choice_kind, choice_field) = choice_kind(format);
    let encode =
        |choice| toolplane_model::encode_tools(format, &contract(&snap, choice), &snap).unwrap();
    out.push(Output {
        kind: "tools",
        case: "all",
        value: encode(ToolChoice::Auto)["tools"].clone(),
    });
    for (case, choice) in [
        ("none", ToolChoice::None),
        ("auto", ToolChoice::Auto),
        ("required", ToolChoice::Required),
        ("specific", ToolChoice::Specific(create_issue_id())),
    ] {
        let fields = encode(choice);
        out.push(Output {
            kind: choice_kind,
            case,
            value: fields[choice_field].clone(),
        });
    }

    let turn = contract(&snap, ToolChoice::Auto);
    let s = standard(format);
    let whole = whole_response(format, &s);
    let part = assistant_part(format, &ping(format));
    let mut turns: Vec<Vec<Value>> = Vec::new();
    let mut stored = Vec::new();
    for (case, input) in [("response", whole), ("assistant", part)] {
        let decoded = toolplane_model::decode_calls(format, &turn, &input).unwrap();
        let results = results_for(&decoded.invocations);
        let encoded =
            toolplane_model::encode_results(format, &turn, &decoded.invocations, &results).unwrap();
        turns.push(decoded.history.iter().chain(&encoded).cloned().collect());
        stored.extend(results.iter().map(|r| {
            toolplane_model::context::StoredResult::new(
                r.call_id.clone(),
                format!("tool-results/inv-1/{}.json", r.call_id),
                &r.model_content(),
            )
        }));
        out.push(Output {
            kind: "input",
            case,
            value: input,
        });
        out.push(Output {
            kind: "decoded",
            case,
            value: render_decoded(&decoded),
        });
        out.push(Output {
            kind: "history",
            case,
            value: Value::Array(decoded.history),
        });
        out.push(Output {
            kind: "results",
            case,
            value: Value::Array(encoded),
        });
    }
    // The two turns (the ping first) trimmed to nothing: every result externalised, the older
    // turn dropped.
    let mut conversation = vec![toolplane_model::user_message(format, "Roll the dice.")];
    conversation.extend(turns.into_iter().rev().flatten());
    let budget = toolplane_model::context::Budget {
        max_tokens: 0,
        fixed_tokens: 0,
        stored: &stored,
        min_externalise_chars: 0,
        read_tool: Some("workspace_read_file"),
    };
    let trim = toolplane_model::context::fit(format, &conversation, &budget).unwrap();
    out.push(Output {
        kind: "trimmed",
        case: "history",
        value: Value::Array(trim.history),
    });
    out
}
