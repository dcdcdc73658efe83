//! OpenAI Responses (`POST /v1/responses`).
//!
//! Owns the Responses shapes and nothing else:
//! - tools: `{"type": "function", "name", "description"?, "parameters", "strict": false}`.
//!   Responses defaults `strict` to true, which demands strict-mode schemas (every property
//!   required, `additionalProperties: false` everywhere); tool schemas come from MCP servers and
//!   hosts as they are, so strict mode is switched off explicitly;
//! - choice: `"none"`, `"auto"`, `"required"`, `{"type": "function", "name"}`;
//! - calls in: a `response` object or its `output` array; `function_call` items
//!   `{call_id, name, arguments}` (JSON text). The item's own `id` (`fc_…`) is kept as
//!   `provider_metadata = {"itemId": …}`. Text comes from `output_text` parts of `message` items.
//!   A response carrying an `error` and `custom_tool_call` items are refused; other items
//!   (reasoning, …) only travel in the history;
//! - results: one `{"type": "function_call_output", "call_id", "output"}` item per result;
//! - history: the output items verbatim — OpenAI documents appending `response.output` to the next
//!   request's `input`, which keeps reasoning items next to the calls they led to.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use serde_json::{Map, Value, json};
use toolplane_core::CoreError;
use toolplane_core::turn::{ModelTool, RawArguments, RawToolCall};

use crate::format::ProviderFormat;
use crate::wire::{Answer, Choice, ParsedTurn, Reader, TextSink, excerpt, insert_description};

const FORMAT: ProviderFormat = ProviderFormat::OpenAiResponses;

/// The key of the `function_call` item id in `provider_metadata`.
pub const META_ITEM_ID: &str = "itemId";

/// `tools` and `tool_choice`.
pub(crate) fn request_fields(tools: &[ModelTool<'_>], choice: Choice<'_>) -> Map<String, Value> {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut tool = Map::new();
            tool.insert("type".into(), json!("function"));
            tool.insert("name".into(), Value::from(t.alias.as_str()));
            insert_description(&mut tool, t);
            tool.insert("parameters".into(), t.input_schema.clone());
            tool.insert("strict".into(), Value::Bool(false));
            Value::Object(tool)
        })
        .collect();
    crate::wire::fields(Value::Array(tools), choice_field(choice))
}

/// The request field of the turn's tool choice: its name and value.
pub(crate) fn choice_field(choice: Choice<'_>) -> (&'static str, Value) {
    let value = match choice {
        Choice::None => json!("none"),
        Choice::Auto => json!("auto"),
        Choice::Required => json!("required"),
        Choice::Specific(alias) => json!({"type": "function", "name": alias.as_str()}),
    };
    ("tool_choice", value)
}

/// Reads a `response` object or an output item array.
pub(crate) fn parse(response: &Value) -> Result<ParsedTurn, CoreError> {
    let r = Reader::new(FORMAT);
    let (items, path) = match response {
        Value::Array(_) => (r.array(response, "$")?, "$"),
        _ => {
            let root = r.object(response, "$")?;
            if let Some(error) = Reader::field(root, "error") {
                return Err(r.malformed("$.error", format!("is set: {}", excerpt(error))));
            }
            let items = r
                .opt_array(root, "output", "$")?
                .ok_or_else(|| r.malformed("$.output", "is missing"))?;
            (items, "$.output")
        }
    };

    let mut text = TextSink::new(FORMAT);
    let mut calls = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}[{i}]");
        let obj = r.object(item, &ipath)?;
        match r.str(obj, "type", &ipath)? {
            "function_call" => {
                let name = r.str(obj, "name", &ipath)?;
                let call_id = r.opt_str(obj, "call_id", &ipath)?;
                let arguments = r.opt_str(obj, "arguments", &ipath)?.unwrap_or_default();
                let provider_metadata = r
                    .opt_str(obj, "id", &ipath)?
                    .map(|id| json!({ META_ITEM_ID: id }));
                calls.push(RawToolCall {
                    call_id: call_id.map(str::to_owned),
                    name: name.to_owned(),
                    arguments: RawArguments::Text(arguments.to_owned()),
                    provider_metadata,
                });
            }
            "message" => {
                let parts = r.opt_array(obj, "content", &ipath)?.unwrap_or_default();
                for (j, part) in parts.iter().enumerate() {
                    let ppath = format!("{ipath}.content[{j}]");
                    let part = r.object(part, &ppath)?;
                    if r.opt_str(part, "type", &ppath)? == Some("output_text") {
                        text.push(r.str(part, "text", &ppath)?)?;
                    }
                }
            }
            "custom_tool_call" => {
                return Err(r.malformed(
                    &format!("{ipath}.type"),
                    "is `custom_tool_call`; only function tool calls are decoded",
                ));
            }
            _ => {}
        }
    }
    Ok(ParsedTurn {
        calls,
        text,
        history: items.to_vec(),
    })
}

/// One `function_call_output` item per result.
pub(crate) fn results(answers: &[Answer<'_>]) -> Vec<Value> {
    answers
        .iter()
        .map(|a| {
            json!({
                "type": "function_call_output",
                "call_id": a.call.call_id,
                "output": a.content,
            })
        })
        .collect()
}
