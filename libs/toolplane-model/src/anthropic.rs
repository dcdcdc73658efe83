//! Anthropic Messages (`POST /v1/messages`).
//!
//! Owns the Messages shapes and nothing else:
//! - tools: `{"name", "description"?, "input_schema"}`; tools are sent under every choice,
//!   `none` included, because a request whose history holds `tool_use` blocks must define tools;
//! - choice: `{"type": "none" | "auto" | "any"}` or `{"type": "tool", "name"}`;
//! - calls in: a `message` response or an assistant message param; `tool_use` blocks
//!   `{id, name, input}` (input is a JSON value). Text comes from `text` blocks (or a string
//!   `content`); `thinking` and other blocks only travel in the history. An `error` response is
//!   refused;
//! - results: one `user` message whose content is one
//!   `{"type": "tool_result", "tool_use_id", "content", "is_error"}` block per result (Anthropic
//!   wants every result of a turn in the one message after it). An empty result leaves `content`
//!   out, since Anthropic refuses empty text;
//! - history: `{"role": "assistant", "content": <blocks>}` with the blocks verbatim — thinking
//!   blocks and their signatures must go back unchanged — minus `null` fields, which responses
//!   carry (`citations: null`) and request params do not accept.
//!
//! No provider metadata is kept: a `tool_use` block has nothing that must travel back besides its
//! id, and thinking blocks go back through the history.
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
use crate::wire::{
    Answer, Choice, ParsedTurn, Reader, TextSink, excerpt, insert_description, kind,
};

const FORMAT: ProviderFormat = ProviderFormat::AnthropicMessages;

/// `tools` and `tool_choice`.
pub(crate) fn request_fields(tools: &[ModelTool<'_>], choice: Choice<'_>) -> Map<String, Value> {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut tool = Map::new();
            tool.insert("name".into(), Value::from(t.alias.as_str()));
            insert_description(&mut tool, t);
            tool.insert("input_schema".into(), t.input_schema.clone());
            Value::Object(tool)
        })
        .collect();
    crate::wire::fields(Value::Array(tools), choice_field(choice))
}

/// The request field of the turn's tool choice: its name and value.
pub(crate) fn choice_field(choice: Choice<'_>) -> (&'static str, Value) {
    let value = match choice {
        Choice::None => json!({"type": "none"}),
        Choice::Auto => json!({"type": "auto"}),
        Choice::Required => json!({"type": "any"}),
        Choice::Specific(alias) => json!({"type": "tool", "name": alias.as_str()}),
    };
    ("tool_choice", value)
}

/// Reads a `message` response or an assistant message param.
pub(crate) fn parse(response: &Value) -> Result<ParsedTurn, CoreError> {
    let r = Reader::new(FORMAT);
    let root = r.object(response, "$")?;
    if r.opt_str(root, "type", "$")? == Some("error") {
        let error = Reader::field(root, "error").unwrap_or(&Value::Null);
        return Err(r.malformed("$", format!("is an error: {}", excerpt(error))));
    }
    let role = r.str(root, "role", "$")?;
    if role != "assistant" {
        return Err(r.malformed("$.role", format!("is `{role}`, not `assistant`")));
    }
    let content =
        Reader::field(root, "content").ok_or_else(|| r.malformed("$.content", "is missing"))?;

    let mut text = TextSink::new(FORMAT);
    let mut calls = Vec::new();
    let history_content = match content {
        Value::String(s) => {
            text.push(s)?;
            content.clone()
        }
        Value::Array(_) => {
            let blocks = r.array(content, "$.content")?;
            let mut kept = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.iter().enumerate() {
                let bpath = format!("$.content[{i}]");
                let obj = r.object(block, &bpath)?;
                match r.str(obj, "type", &bpath)? {
                    "text" => text.push(r.str(obj, "text", &bpath)?)?,
                    "tool_use" => calls.push(RawToolCall {
                        call_id: r.opt_str(obj, "id", &bpath)?.map(str::to_owned),
                        name: r.str(obj, "name", &bpath)?.to_owned(),
                        arguments: RawArguments::Value(
                            Reader::field(obj, "input").cloned().unwrap_or(Value::Null),
                        ),
                        provider_metadata: None,
                    }),
                    _ => {}
                }
                kept.push(Value::Object(
                    obj.iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ));
            }
            Value::Array(kept)
        }
        other => {
            return Err(r.malformed(
                "$.content",
                format!("is {}, not a string or an array", kind(other)),
            ));
        }
    };
    Ok(ParsedTurn {
        calls,
        text,
        history: vec![json!({"role": "assistant", "content": history_content})],
    })
}

/// One `user` message with a `tool_result` block per result.
pub(crate) fn results(answers: &[Answer<'_>]) -> Vec<Value> {
    let blocks: Vec<Value> = answers
        .iter()
        .map(|a| {
            let mut block = Map::new();
            block.insert("type".into(), json!("tool_result"));
            block.insert("tool_use_id".into(), Value::from(a.call.call_id.as_str()));
            if !a.content.is_empty() {
                block.insert("content".into(), Value::from(a.content.as_ref()));
            }
            block.insert("is_error".into(), Value::Bool(a.is_error));
            Value::Object(block)
        })
        .collect();
    vec![json!({"role": "user", "content": blocks})]
}
