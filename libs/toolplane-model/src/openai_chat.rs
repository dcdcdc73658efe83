//! OpenAI Chat Completions (`POST /v1/chat/completions`), also the dialect of vLLM, Ollama and
//! llama.cpp.
//!
//! Owns the chat shapes and nothing else:
//! - tools: `{"type": "function", "function": {"name", "description"?, "parameters"}}`. `strict`
//!   is left out: Chat Completions defaults it to false, which is what our schemas need (they are
//!   not strict-mode schemas: optional properties, open objects), and OpenAI-compatible servers
//!   that predate the field never see it;
//! - choice: `"none"`, `"auto"`, `"required"`, `{"type": "function", "function": {"name"}}`;
//! - calls in: a `chat.completion` (exactly one choice) or its assistant message; `tool_calls`
//!   entries `{id, type: "function", function: {name, arguments}}`. `arguments` is JSON text; an
//!   object is accepted too, as some compatible servers send one. A legacy `function_call` or a
//!   custom tool call is refused: the plane never advertises either;
//! - results: one `{"role": "tool", "tool_call_id", "content"}` message per result;
//! - history: the assistant message rebuilt from the parsed one (`content`, `refusal`,
//!   `tool_calls` with JSON-text arguments), without response-only fields such as `annotations`.
//!
//! No provider metadata is kept: a chat tool call has nothing that must travel back besides its id.
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
use crate::wire::{Answer, Choice, ParsedTurn, Reader, TextSink, insert_description, kind};

const FORMAT: ProviderFormat = ProviderFormat::OpenAiChat;

/// `tools` and `tool_choice`.
pub(crate) fn request_fields(tools: &[ModelTool<'_>], choice: Choice<'_>) -> Map<String, Value> {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut function = Map::new();
            function.insert("name".into(), Value::from(t.alias.as_str()));
            insert_description(&mut function, t);
            function.insert("parameters".into(), t.input_schema.clone());
            json!({"type": "function", "function": function})
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
        Choice::Specific(alias) => {
            json!({"type": "function", "function": {"name": alias.as_str()}})
        }
    };
    ("tool_choice", value)
}

/// Reads a `chat.completion` or an assistant message.
pub(crate) fn parse(response: &Value) -> Result<ParsedTurn, CoreError> {
    let r = Reader::new(FORMAT);
    let root = r.object(response, "$")?;
    let (message, path) = if let Some(choices) = r.opt_array(root, "choices", "$")? {
        let choice = r.single(choices, "$.choices", "request n=1")?;
        let choice = r.object(choice, "$.choices[0]")?;
        let message = Reader::field(choice, "message")
            .ok_or_else(|| r.malformed("$.choices[0].message", "is missing"))?;
        (
            r.object(message, "$.choices[0].message")?,
            "$.choices[0].message",
        )
    } else if root.contains_key("role") {
        (root, "$")
    } else {
        return Err(r.malformed(
            "$",
            "is neither a chat.completion (no `choices`) nor an assistant message (no `role`)",
        ));
    };
    let role = r.str(message, "role", path)?;
    if role != "assistant" {
        return Err(r.malformed(
            &format!("{path}.role"),
            format!("is `{role}`, not `assistant`"),
        ));
    }
    if Reader::field(message, "function_call").is_some() {
        return Err(r.malformed(
            &format!("{path}.function_call"),
            "is a legacy function call; the plane advertises tools, not functions",
        ));
    }

    let mut text = TextSink::new(FORMAT);
    let content = Reader::field(message, "content");
    match content {
        None => {}
        Some(Value::String(s)) => text.push(s)?,
        Some(parts @ Value::Array(_)) => {
            // Content parts: `text` parts are the answer, `refusal` parts are not.
            for (i, part) in r
                .array(parts, &format!("{path}.content"))?
                .iter()
                .enumerate()
            {
                let ppath = format!("{path}.content[{i}]");
                let part = r.object(part, &ppath)?;
                if r.opt_str(part, "type", &ppath)? == Some("text") {
                    text.push(r.str(part, "text", &ppath)?)?;
                }
            }
        }
        Some(other) => {
            return Err(r.malformed(
                &format!("{path}.content"),
                format!("is {}, not a string or an array", kind(other)),
            ));
        }
    }
    let refusal = r.opt_str(message, "refusal", path)?;

    let mut calls = Vec::new();
    let mut echoed = Vec::new();
    for (i, call) in r
        .opt_array(message, "tool_calls", path)?
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let cpath = format!("{path}.tool_calls[{i}]");
        let call = r.object(call, &cpath)?;
        if let Some(t) = r.opt_str(call, "type", &cpath)?
            && t != "function"
        {
            return Err(r.malformed(
                &format!("{cpath}.type"),
                format!("is `{t}`; only function tool calls are decoded"),
            ));
        }
        let id = r.opt_str(call, "id", &cpath)?;
        let fpath = format!("{cpath}.function");
        let function = r
            .opt_object(call, "function", &cpath)?
            .ok_or_else(|| r.malformed(&fpath, "is missing"))?;
        let name = r.str(function, "name", &fpath)?;
        let (arguments, arguments_text) = match Reader::field(function, "arguments") {
            None => (RawArguments::Text(String::new()), String::new()),
            Some(Value::String(s)) => (RawArguments::Text(s.clone()), s.clone()),
            Some(v @ Value::Object(_)) => (RawArguments::Value(v.clone()), v.to_string()),
            Some(other) => {
                return Err(r.malformed(
                    &format!("{fpath}.arguments"),
                    format!("is {}, not json text", kind(other)),
                ));
            }
        };
        calls.push(RawToolCall {
            call_id: id.map(str::to_owned),
            name: name.to_owned(),
            arguments,
            provider_metadata: None,
        });
        echoed.push(json!({
            "id": id.unwrap_or_default(),
            "type": "function",
            "function": {"name": name, "arguments": arguments_text},
        }));
    }

    let mut history = Map::new();
    history.insert("role".into(), json!("assistant"));
    history.insert("content".into(), content.cloned().unwrap_or(Value::Null));
    if let Some(refusal) = refusal {
        history.insert("refusal".into(), Value::from(refusal));
    }
    if !echoed.is_empty() {
        history.insert("tool_calls".into(), Value::Array(echoed));
    }
    Ok(ParsedTurn {
        calls,
        text,
        history: vec![Value::Object(history)],
    })
}

/// One `tool` message per result.
pub(crate) fn results(answers: &[Answer<'_>]) -> Vec<Value> {
    answers
        .iter()
        .map(|a| {
            json!({
                "role": "tool",
                "tool_call_id": a.call.call_id,
                "content": a.content,
            })
        })
        .collect()
}
