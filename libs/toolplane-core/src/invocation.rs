//! `ToolInvocation`: one decoded tool call, in canonical terms.
//!
//! An invocation is produced only by decoding a provider call through a turn contract; it names
//! the tool by `ToolId`, never by alias. Arguments the model got wrong (not JSON, not an object, too
//! large) are kept verbatim so the audit shows what was sent, and the call ends as a recoverable
//! `tool.invalid_arguments` result instead of failing the invocation.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::id::ToolId;

/// Largest arguments object accepted, in bytes of JSON text.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;

/// A tool call's arguments as the model sent them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolArguments {
    /// A JSON object, ready for the executor.
    Object { value: Map<String, Value> },
    /// Anything else, kept verbatim with the reason it cannot be used.
    Invalid { raw: String, reason: String },
}

impl ToolArguments {
    /// Parses arguments sent as JSON text (OpenAI style). Empty text counts as `{}`, as providers
    /// send it for tools without parameters.
    pub fn from_text(raw: &str) -> ToolArguments {
        if raw.len() > MAX_ARGUMENTS_BYTES {
            return ToolArguments::Invalid {
                raw: raw.chars().take(4096).collect(),
                reason: format!(
                    "arguments are {} bytes, over the {MAX_ARGUMENTS_BYTES}-byte limit",
                    raw.len()
                ),
            };
        }
        if raw.trim().is_empty() {
            return ToolArguments::Object { value: Map::new() };
        }
        match serde_json::from_str::<Value>(raw) {
            // The text's length was checked above; no need to measure it again.
            Ok(Value::Object(map)) => ToolArguments::Object { value: map },
            Ok(value) => ToolArguments::from_value(value),
            Err(e) => ToolArguments::Invalid {
                raw: raw.to_owned(),
                reason: format!("arguments are not valid JSON: {e}"),
            },
        }
    }

    /// Takes arguments sent as a JSON value (Anthropic, Gemini style). `null` counts as `{}`.
    pub fn from_value(value: Value) -> ToolArguments {
        match value {
            Value::Object(map) => {
                let len = serde_json::to_vec(&map)
                    .map(|v| v.len())
                    .unwrap_or(usize::MAX);
                if len > MAX_ARGUMENTS_BYTES {
                    ToolArguments::Invalid {
                        raw: String::new(),
                        reason: format!(
                            "arguments are {len} bytes, over the {MAX_ARGUMENTS_BYTES}-byte limit"
                        ),
                    }
                } else {
                    ToolArguments::Object { value: map }
                }
            }
            Value::Null => ToolArguments::Object { value: Map::new() },
            other => ToolArguments::Invalid {
                raw: other.to_string(),
                reason: format!("arguments must be a JSON object, got {}", kind_of(&other)),
            },
        }
    }

    pub fn as_object(&self) -> Option<&Map<String, Value>> {
        match self {
            ToolArguments::Object { value } => Some(value),
            ToolArguments::Invalid { .. } => None,
        }
    }

    /// The arguments as JSON text for executors and audit (`raw` text for invalid ones).
    pub fn to_json_text(&self) -> String {
        match self {
            ToolArguments::Object { value } => Value::Object(value.clone()).to_string(),
            ToolArguments::Invalid { raw, .. } => raw.clone(),
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One decoded tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInvocation {
    /// The provider's call id (or the synthesised `<turn>:<index>` for Gemini calls without one).
    /// Opaque: stored in audit content and the journal, never used as a file name.
    pub call_id: String,
    pub tool_id: ToolId,
    pub arguments: ToolArguments,
    /// Provider fields that must travel back with the result (e.g. Gemini's thought signatures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_metadata: Option<Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn argument_parsing() {
        assert!(matches!(
            ToolArguments::from_text(""),
            ToolArguments::Object { .. }
        ));
        assert!(matches!(
            ToolArguments::from_text(r#"{"a":1}"#),
            ToolArguments::Object { .. }
        ));
        for bad in ["{", "[1]", "\"s\"", "3", "true"] {
            assert!(
                matches!(ToolArguments::from_text(bad), ToolArguments::Invalid { .. }),
                "{bad}"
            );
        }
        assert!(matches!(
            ToolArguments::from_value(json!(null)),
            ToolArguments::Object { .. }
        ));
        let big = format!("{{\"x\":\"{}\"}}", "a".repeat(MAX_ARGUMENTS_BYTES));
        assert!(matches!(
            ToolArguments::from_text(&big),
            ToolArguments::Invalid { .. }
        ));
        assert_eq!(ToolArguments::from_text("{").to_json_text(), "{");
    }
}
