//! Gemini `generateContent` (REST JSON, camelCase field names).
//!
//! Owns the Gemini shapes and nothing else:
//! - tools: one `{"functionDeclarations": [{"name", "description"?, "parametersJsonSchema"}]}`.
//!   `parametersJsonSchema` (google-genai's `FunctionDeclaration.parameters_json_schema`) takes
//!   the tool's JSON Schema as it is. The older `parameters` field takes an OpenAPI 3.0 subset
//!   that rejects `additionalProperties`, `$schema`, `$ref`, `anyOf` and more; sanitising into it
//!   would silently change what the model is told about a tool, so the plane does not;
//! - choice: `toolConfig.functionCallingConfig.mode` `NONE` / `AUTO` / `ANY`, and for a specific
//!   tool `ANY` with `allowedFunctionNames: [alias]`;
//! - calls in: a `GenerateContentResponse` (exactly one candidate) or a `Content`;
//!   `functionCall {name, args, id?}` parts. A call without an id gets the turn's synthesised
//!   `<turn>:<index>` id, and `provider_metadata` records `{"callIdSynthesised": true}` so the
//!   answer goes back without an id, paired by name and order as Gemini expects. A part's
//!   `thoughtSignature` is kept as `provider_metadata.thoughtSignature`. Text comes from `text`
//!   parts that are not thoughts (`thought: true`);
//! - results: one `user`-role content (the SDK documents roles `user` and `model` only) with a
//!   `functionResponse {id?, name: alias, response}` part per result, `response` being
//!   `{"output": text}` or, for an error, `{"error": text}` — the keys Gemini documents;
//! - history: the candidate's content verbatim (role `model`), thought signatures included:
//!   Gemini requires them back on the parts they came on.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use serde_json::{Map, Value, json};
use toolplane_core::CoreError;
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::turn::{ModelTool, RawArguments, RawToolCall};

use crate::format::ProviderFormat;
use crate::wire::{Answer, Choice, ParsedTurn, Reader, TextSink, insert_description};

const FORMAT: ProviderFormat = ProviderFormat::Gemini;

/// The key of a call's thought signature in `provider_metadata`.
pub const META_THOUGHT_SIGNATURE: &str = "thoughtSignature";
/// The key that marks a call whose id the plane synthesised, in `provider_metadata`.
pub const META_CALL_ID_SYNTHESISED: &str = "callIdSynthesised";

/// `tools` and `toolConfig`.
pub(crate) fn request_fields(tools: &[ModelTool<'_>], choice: Choice<'_>) -> Map<String, Value> {
    let declarations: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut declaration = Map::new();
            declaration.insert("name".into(), Value::from(t.alias.as_str()));
            insert_description(&mut declaration, t);
            declaration.insert("parametersJsonSchema".into(), t.input_schema.clone());
            Value::Object(declaration)
        })
        .collect();
    crate::wire::fields(
        json!([{ "functionDeclarations": declarations }]),
        choice_field(choice),
    )
}

/// The request field of the turn's tool choice: its name and value.
pub(crate) fn choice_field(choice: Choice<'_>) -> (&'static str, Value) {
    let config = match choice {
        Choice::None => json!({"mode": "NONE"}),
        Choice::Auto => json!({"mode": "AUTO"}),
        Choice::Required => json!({"mode": "ANY"}),
        Choice::Specific(alias) => json!({"mode": "ANY", "allowedFunctionNames": [alias.as_str()]}),
    };
    ("toolConfig", json!({ "functionCallingConfig": config }))
}

/// Reads a `GenerateContentResponse` or a `Content`.
pub(crate) fn parse(response: &Value) -> Result<ParsedTurn, CoreError> {
    let r = Reader::new(FORMAT);
    let root = r.object(response, "$")?;
    let (content, path) = if let Some(candidates) = r.opt_array(root, "candidates", "$")? {
        let candidate = r.single(candidates, "$.candidates", "request candidateCount=1")?;
        let candidate = r.object(candidate, "$.candidates[0]")?;
        (
            r.opt_object(candidate, "content", "$.candidates[0]")?,
            "$.candidates[0].content",
        )
    } else if root.contains_key("parts") || root.contains_key("role") {
        (Some(root), "$")
    } else if let Some(feedback) = r.opt_object(root, "promptFeedback", "$")? {
        let reason = r
            .opt_str(feedback, "blockReason", "$.promptFeedback")?
            .unwrap_or("unspecified");
        return Err(r.malformed(
            "$.candidates",
            format!("is missing: the prompt was blocked ({reason})"),
        ));
    } else {
        return Err(r.malformed(
            "$",
            "is neither a GenerateContentResponse (no `candidates`) nor a Content (no `parts`)",
        ));
    };
    let Some(content) = content else {
        // A candidate without content (stopped for safety, recitation, …): an empty turn.
        return Ok(ParsedTurn {
            calls: Vec::new(),
            text: TextSink::new(FORMAT),
            history: Vec::new(),
        });
    };
    if let Some(role) = r.opt_str(content, "role", path)?
        && role != "model"
    {
        return Err(r.malformed(&format!("{path}.role"), format!("is `{role}`, not `model`")));
    }

    let mut text = TextSink::new(FORMAT);
    let mut calls = Vec::new();
    let parts = r.opt_array(content, "parts", path)?.unwrap_or_default();
    for (i, part) in parts.iter().enumerate() {
        let ppath = format!("{path}.parts[{i}]");
        let part = r.object(part, &ppath)?;
        if let Some(call) = r.opt_object(part, "functionCall", &ppath)? {
            let cpath = format!("{ppath}.functionCall");
            let id = r.opt_str(call, "id", &cpath)?.filter(|id| !id.is_empty());
            let mut metadata = Map::new();
            if let Some(signature) = r.opt_str(part, "thoughtSignature", &ppath)? {
                metadata.insert(META_THOUGHT_SIGNATURE.into(), Value::from(signature));
            }
            if id.is_none() {
                metadata.insert(META_CALL_ID_SYNTHESISED.into(), Value::Bool(true));
            }
            calls.push(RawToolCall {
                call_id: id.map(str::to_owned),
                name: r.str(call, "name", &cpath)?.to_owned(),
                arguments: RawArguments::Value(
                    Reader::field(call, "args").cloned().unwrap_or(Value::Null),
                ),
                provider_metadata: (!metadata.is_empty()).then_some(Value::Object(metadata)),
            });
        } else if let Some(piece) = r.opt_str(part, "text", &ppath)?
            && Reader::field(part, "thought") != Some(&Value::Bool(true))
        {
            text.push(piece)?;
        }
    }

    let mut history = content.clone();
    history
        .entry("role")
        .or_insert_with(|| Value::from("model"));
    Ok(ParsedTurn {
        calls,
        text,
        history: vec![Value::Object(history)],
    })
}

/// Whether the plane synthesised this call's id (the provider sent none).
fn id_synthesised(call: &ToolInvocation) -> bool {
    call.provider_metadata
        .as_ref()
        .and_then(|m| m.get(META_CALL_ID_SYNTHESISED))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// One `user` content with a `functionResponse` part per result.
pub(crate) fn results(answers: &[Answer<'_>]) -> Vec<Value> {
    let parts: Vec<Value> = answers
        .iter()
        .map(|a| {
            let mut response = Map::new();
            if !id_synthesised(a.call) {
                response.insert("id".into(), Value::from(a.call.call_id.as_str()));
            }
            response.insert("name".into(), Value::from(a.alias.as_str()));
            let key = if a.is_error { "error" } else { "output" };
            response.insert("response".into(), json!({ key: a.content }));
            json!({ "functionResponse": response })
        })
        .collect();
    vec![json!({"role": "user", "parts": parts})]
}
