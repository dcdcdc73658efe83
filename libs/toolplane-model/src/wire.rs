//! Plumbing shared by the four provider modules: the input limits, a reader that turns a wrong
//! JSON shape into a `model.malformed_response` naming the exact path, the turn's tools and choice
//! in alias terms, and the pairing of results with the calls they answer.
//!
//! It owns no provider shape and never decides anything about aliases itself: names are resolved
//! by the core turn contract, identities by `AgentToolResult::verify_identity`.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use toolplane_core::alias::ModelAlias;
use toolplane_core::error::{
    CoreError, MODEL_MALFORMED_RESPONSE, MODEL_TOOL_CHOICE_VIOLATED, MODEL_UNKNOWN_TOOL_ALIAS,
    TOOL_RESULT_IDENTITY_MISMATCH,
};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::InvocationToolSnapshot;
use toolplane_core::turn::{
    MAX_CALLS_PER_TURN, ModelTool, RawToolCall, ToolChoice, ToolTurnContract,
};

use crate::format::ProviderFormat;

/// Largest response body [`crate::decode_calls_json`] parses, in bytes. Nesting is bounded by
/// `serde_json`'s parser (128 levels).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Most entries in any one list of a response: choices, tool calls, output items, content blocks,
/// parts. Tool calls are further bounded by the core's `MAX_CALLS_PER_TURN`.
pub const MAX_RESPONSE_ITEMS: usize = 1024;
/// Most assistant text kept from one response, in bytes.
pub const MAX_ASSISTANT_TEXT_BYTES: usize = 4 * 1024 * 1024;

/// The turn's tool choice, in alias terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice<'a> {
    None,
    Auto,
    Required,
    Specific(&'a ModelAlias),
}

impl<'a> Choice<'a> {
    pub(crate) fn of(contract: &'a ToolTurnContract) -> Result<Choice<'a>, CoreError> {
        Ok(match contract.choice() {
            ToolChoice::None => Choice::None,
            ToolChoice::Auto => Choice::Auto,
            ToolChoice::Required => Choice::Required,
            // The contract refuses a specific tool it does not advertise; this error only guards
            // a contract built some other way.
            ToolChoice::Specific(id) => {
                Choice::Specific(contract.alias_of(id).ok_or_else(|| {
                    CoreError::new(
                        MODEL_TOOL_CHOICE_VIOLATED,
                        format!("the specific tool `{id}` is not advertised in this turn"),
                    )
                })?)
            }
        })
    }
}

/// A turn's request fields: `tools`, and the choice field ([`Choice`] encoded by the format).
pub(crate) fn fields(tools: Value, (key, choice): (&'static str, Value)) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("tools".into(), tools);
    fields.insert(key.into(), choice);
    fields
}

/// The turn's tools with their frozen descriptors. Every turn tool must have a binding in the
/// snapshot: a contract from another invocation would otherwise silently advertise fewer tools.
pub(crate) fn advertised<'s>(
    contract: &ToolTurnContract,
    snapshot: &'s InvocationToolSnapshot,
) -> Result<Vec<ModelTool<'s>>, CoreError> {
    if contract.invocation_id() != snapshot.invocation_id {
        return Err(CoreError::new(
            MODEL_UNKNOWN_TOOL_ALIAS,
            format!(
                "turn {} belongs to invocation {}, not to snapshot {}",
                contract.turn(),
                contract.invocation_id(),
                snapshot.snapshot_id
            ),
        ));
    }
    let tools = contract.model_tools(snapshot);
    if tools.len() != contract.tools().len() {
        let missing = contract
            .tools()
            .iter()
            .find(|t| snapshot.binding(&t.tool_id).is_none())
            .map(|t| t.tool_id.to_string())
            .unwrap_or_default();
        return Err(CoreError::new(
            MODEL_UNKNOWN_TOOL_ALIAS,
            format!(
                "turn {} advertises `{missing}`, which snapshot {} does not bind",
                contract.turn(),
                snapshot.snapshot_id
            ),
        ));
    }
    Ok(tools)
}

/// A provider tool carries its description only when there is one: every provider treats the
/// field as optional, and an empty string tells the model nothing.
pub(crate) fn insert_description(map: &mut Map<String, Value>, tool: &ModelTool<'_>) {
    if !tool.description.is_empty() {
        map.insert("description".into(), Value::from(tool.description));
    }
}

/// A provider turn read from its JSON, before decoding through the contract.
#[derive(Debug)]
pub(crate) struct ParsedTurn {
    pub calls: Vec<RawToolCall>,
    pub text: TextSink,
    pub history: Vec<Value>,
}

/// Collects the assistant's text within [`MAX_ASSISTANT_TEXT_BYTES`]. Pieces are concatenated
/// verbatim: providers split one answer into several blocks or parts mid-sentence.
#[derive(Debug)]
pub(crate) struct TextSink {
    format: ProviderFormat,
    text: Option<String>,
}

impl TextSink {
    pub(crate) fn new(format: ProviderFormat) -> TextSink {
        TextSink { format, text: None }
    }

    pub(crate) fn push(&mut self, piece: &str) -> Result<(), CoreError> {
        let text = self.text.get_or_insert_with(String::new);
        if text.len().saturating_add(piece.len()) > MAX_ASSISTANT_TEXT_BYTES {
            return Err(CoreError::new(
                MODEL_MALFORMED_RESPONSE,
                format!(
                    "{} response: assistant text is over the {MAX_ASSISTANT_TEXT_BYTES}-byte limit",
                    self.format
                ),
            ));
        }
        text.push_str(piece);
        Ok(())
    }

    /// The text, or `None` when the assistant wrote none (or only empty pieces).
    pub(crate) fn into_option(self) -> Option<String> {
        self.text.filter(|t| !t.is_empty())
    }
}

/// Reads provider JSON; every shape error is a `model.malformed_response` naming the path
/// (`$.choices[0].message.tool_calls[1].function.name`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    format: ProviderFormat,
}

impl Reader {
    pub(crate) fn new(format: ProviderFormat) -> Reader {
        Reader { format }
    }

    pub(crate) fn malformed(&self, path: &str, what: impl std::fmt::Display) -> CoreError {
        CoreError::new(
            MODEL_MALFORMED_RESPONSE,
            format!("{} response: `{path}` {what}", self.format),
        )
    }

    pub(crate) fn object<'v>(
        &self,
        value: &'v Value,
        path: &str,
    ) -> Result<&'v Map<String, Value>, CoreError> {
        value
            .as_object()
            .ok_or_else(|| self.malformed(path, format!("is {}, not an object", kind(value))))
    }

    /// A field that is present and not `null`.
    pub(crate) fn field<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
        map.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn opt_str<'v>(
        &self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<&'v str>, CoreError> {
        match Reader::field(map, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.malformed(
                &format!("{path}.{key}"),
                format!("is {}, not a string", kind(other)),
            )),
        }
    }

    pub(crate) fn str<'v>(
        &self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<&'v str, CoreError> {
        self.opt_str(map, key, path)?
            .ok_or_else(|| self.malformed(&format!("{path}.{key}"), "is missing"))
    }

    pub(crate) fn opt_object<'v>(
        &self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<&'v Map<String, Value>>, CoreError> {
        Reader::field(map, key)
            .map(|v| self.object(v, &format!("{path}.{key}")))
            .transpose()
    }

    pub(crate) fn opt_array<'v>(
        &self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Result<Option<&'v [Value]>, CoreError> {
        Reader::field(map, key)
            .map(|v| self.array(v, &format!("{path}.{key}")))
            .transpose()
    }

    /// An array within [`MAX_RESPONSE_ITEMS`].
    pub(crate) fn array<'v>(&self, value: &'v Value, path: &str) -> Result<&'v [Value], CoreError> {
        let items = value
            .as_array()
            .ok_or_else(|| self.malformed(path, format!("is {}, not an array", kind(value))))?;
        if items.len() > MAX_RESPONSE_ITEMS {
            return Err(self.malformed(
                path,
                format!(
                    "has {} entries, over the limit of {MAX_RESPONSE_ITEMS}",
                    items.len()
                ),
            ));
        }
        Ok(items)
    }

    /// The single entry of a list the plane decodes one of (choices, candidates): several would
    /// leave it to guess which one the agent continues with.
    pub(crate) fn single<'v>(
        &self,
        items: &'v [Value],
        path: &str,
        ask: &str,
    ) -> Result<&'v Value, CoreError> {
        match items {
            [one] => Ok(one),
            [] => Err(self.malformed(path, "is empty")),
            many => Err(self.malformed(
                path,
                format!(
                    "has {} entries; the plane decodes exactly one ({ask})",
                    many.len()
                ),
            )),
        }
    }
}

/// A JSON value's kind, for error messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A provider value shortened for an error message (at most 200 characters).
pub(crate) fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    let mut out: String = text.chars().take(200).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// One result, paired with the call it answers, in model-facing terms.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    pub call: &'a ToolInvocation,
    /// The alias the turn advertised the call's tool under.
    pub alias: &'a ModelAlias,
    /// `model_content()`: the content, under `## Tool error` for errors. Nothing else of the
    /// result reaches the provider.
    pub content: Cow<'a, str>,
    pub is_error: bool,
}

fn mismatch(message: String) -> CoreError {
    CoreError::new(TOOL_RESULT_IDENTITY_MISMATCH, message)
}

/// Pairs each call with the one result that answers it, in call order.
pub(crate) fn pair_results<'a>(
    contract: &'a ToolTurnContract,
    calls: &'a [ToolInvocation],
    results: &'a [AgentToolResult],
) -> Result<Vec<Answer<'a>>, CoreError> {
    if calls.len() > MAX_CALLS_PER_TURN {
        return Err(mismatch(format!(
            "{} calls in turn {}, over the limit of {MAX_CALLS_PER_TURN}",
            calls.len(),
            contract.turn()
        )));
    }
    let mut by_call: HashMap<&str, &AgentToolResult> = HashMap::with_capacity(results.len());
    for r in results {
        if by_call.insert(r.call_id.as_str(), r).is_some() {
            return Err(mismatch(format!(
                "two results answer call `{}` of turn {}",
                r.call_id,
                contract.turn()
            )));
        }
    }
    let mut seen: HashSet<&str> = HashSet::with_capacity(calls.len());
    let mut answers = Vec::with_capacity(calls.len());
    for call in calls {
        if !seen.insert(call.call_id.as_str()) {
            return Err(mismatch(format!(
                "call id `{}` appears twice in the calls of turn {}",
                call.call_id,
                contract.turn()
            )));
        }
        let alias = contract.alias_of(&call.tool_id).ok_or_else(|| {
            mismatch(format!(
                "call `{}` names `{}`, which turn {} did not advertise",
                call.call_id,
                call.tool_id,
                contract.turn()
            ))
        })?;
        let result = by_call.remove(call.call_id.as_str()).ok_or_else(|| {
            mismatch(format!(
                "call `{}` (`{alias}`) of turn {} has no result",
                call.call_id,
                contract.turn()
            ))
        })?;
        result.verify_identity(call)?;
        answers.push(Answer {
            call,
            alias,
            content: result.model_content(),
            is_error: result.is_error,
        });
    }
    if let Some(stray) = results
        .iter()
        .find(|r| by_call.contains_key(r.call_id.as_str()))
    {
        return Err(mismatch(format!(
            "the result for call `{}` (`{}`) answers no call of turn {}",
            stray.call_id,
            stray.tool_id,
            contract.turn()
        )));
    }
    Ok(answers)
}
