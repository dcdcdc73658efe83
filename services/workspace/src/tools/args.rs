//! Tool arguments checked against the builtin descriptors' schemas (`toolplane_core::builtin`):
//! an object, only the declared properties, the right JSON types, integers within their bounds.
//! Owns the `tool.invalid_arguments` answers; must never accept a property a schema does not
//! declare (the schemas say `additionalProperties: false`).

use serde_json::{Map, Value};

use crate::error::WsError;

fn bad(message: impl Into<String>) -> WsError {
    WsError::tool("tool.invalid_arguments", message)
}

/// Parsed, schema-checked arguments of one call.
#[derive(Debug, Clone)]
pub struct Args {
    map: Map<String, Value>,
}

impl Args {
    /// Parses `text` and checks it against the builtin's input schema.
    pub fn parse(native: &str, text: &str) -> Result<Args, WsError> {
        let text = if text.trim().is_empty() { "{}" } else { text };
        let value: Value = serde_json::from_str(text)
            .map_err(|e| bad(format!("arguments are not valid JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(bad("arguments must be a JSON object"));
        };
        let descriptor = toolplane_core::builtin::descriptor(native)
            .ok_or_else(|| bad(format!("unknown tool {native}")))?;
        check_object(&map, descriptor.input_schema(), "")?;
        Ok(Args { map })
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        self.map.get(name).and_then(Value::as_str)
    }

    pub fn required_str(&self, name: &str) -> Result<&str, WsError> {
        self.str(name)
            .ok_or_else(|| bad(format!("missing required argument {name}")))
    }

    pub fn u64(&self, name: &str) -> Option<u64> {
        self.map.get(name).and_then(Value::as_u64)
    }

    pub fn bool(&self, name: &str) -> Option<bool> {
        self.map.get(name).and_then(Value::as_bool)
    }

    pub fn array(&self, name: &str) -> Option<&Vec<Value>> {
        self.map.get(name).and_then(Value::as_array)
    }
}

fn check_object(map: &Map<String, Value>, schema: &Value, at: &str) -> Result<(), WsError> {
    let props = schema.get("properties").and_then(Value::as_object);
    for (name, value) in map {
        let Some(prop) = props.and_then(|p| p.get(name)) else {
            return Err(bad(format!("unknown argument {at}{name}")));
        };
        check_value(value, prop, &format!("{at}{name}"))?;
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                return Err(bad(format!("missing required argument {at}{name}")));
            }
        }
    }
    Ok(())
}

fn check_value(value: &Value, schema: &Value, at: &str) -> Result<(), WsError> {
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "string" => {
            let s = value
                .as_str()
                .ok_or_else(|| bad(format!("{at} must be a string")))?;
            if let Some(options) = schema.get("enum").and_then(Value::as_array)
                && !options.iter().any(|o| o.as_str() == Some(s))
            {
                let names: Vec<&str> = options.iter().filter_map(Value::as_str).collect();
                return Err(bad(format!("{at} must be one of {}", names.join(", "))));
            }
        }
        "integer" => {
            let n = value.as_u64().ok_or_else(|| {
                if value.as_i64().is_some() {
                    bad(format!("{at} must not be negative"))
                } else {
                    bad(format!("{at} must be an integer"))
                }
            })?;
            if let Some(min) = schema.get("minimum").and_then(Value::as_u64)
                && n < min
            {
                return Err(bad(format!("{at} must be at least {min}")));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_u64)
                && n > max
            {
                return Err(bad(format!("{at} must be at most {max}")));
            }
        }
        "boolean" => {
            value
                .as_bool()
                .ok_or_else(|| bad(format!("{at} must be true or false")))?;
        }
        "array" => {
            let items = value
                .as_array()
                .ok_or_else(|| bad(format!("{at} must be an array")))?;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                return Err(bad(format!("{at} needs at least {min} items")));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && (items.len() as u64) > max
            {
                return Err(bad(format!("{at} holds at most {max} items")));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_value(item, item_schema, &format!("{at}[{i}]"))?;
                }
            }
        }
        "object" => {
            let map = value
                .as_object()
                .ok_or_else(|| bad(format!("{at} must be an object")))?;
            check_object(map, schema, &format!("{at}."))?;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_the_builtin_schemas() {
        assert!(
            Args::parse(
                "workspace.read_file",
                r#"{"path":"output/a.md","start_line":2}"#
            )
            .is_ok()
        );
        for (tool, args) in [
            ("workspace.read_file", "[]"),
            ("workspace.read_file", "{}"),
            ("workspace.read_file", r#"{"path":"a","start_line":0}"#),
            ("workspace.read_file", r#"{"path":"a","extra":1}"#),
            (
                "workspace.write_file",
                r#"{"path":"a","content":"x","mode":"insert"}"#,
            ),
            (
                "workspace.apply_patch",
                r#"{"path":"a","old_string":"x","new_string":1}"#,
            ),
            ("chat.read_messages", r#"{"messages":[]}"#),
            ("chat.read_messages", r#"{"messages":[{"index":-1}]}"#),
            ("workspace.search_files", r#"{"query":"x","limit":1000}"#),
            ("workspace.read_file", "not json"),
        ] {
            let err = Args::parse(tool, args).expect_err(args);
            assert_eq!(err.code(), "tool.invalid_arguments", "{tool} {args}");
        }
    }
}
