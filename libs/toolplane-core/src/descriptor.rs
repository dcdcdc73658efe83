//! `ToolDescriptor`: the neutral description of a tool.
//!
//! A descriptor holds what a tool *is* — id, title, description, schemas, raw annotations — and
//! never what a profile or invocation makes of it: no alias, permission, executor or budget. Its
//! root input schema is always a JSON object schema, so every provider can take it as function
//! parameters.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{CoreError, TOOL_INVALID_DESCRIPTOR, TOOL_INVALID_SCHEMA};
use crate::id::ToolId;

/// Longest description accepted, in bytes.
pub const MAX_DESCRIPTION_LEN: usize = 16 * 1024;
/// Longest title accepted, in bytes.
pub const MAX_TITLE_LEN: usize = 256;
/// Largest serialised input or output schema accepted, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Deepest nesting of a schema accepted.
pub const MAX_SCHEMA_DEPTH: usize = 32;

/// MCP-style behaviour hints. They are hints, not guarantees; the category resolver reads
/// `read_only_hint` as its third fallback level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolAnnotations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// The neutral descriptor of one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "RawDescriptor")]
pub struct ToolDescriptor {
    id: ToolId,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    description: String,
    input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_schema: Option<Value>,
    #[serde(skip_serializing_if = "is_default_annotations")]
    annotations: ToolAnnotations,
}

fn is_default_annotations(a: &ToolAnnotations) -> bool {
    *a == ToolAnnotations::default()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDescriptor {
    id: ToolId,
    #[serde(default)]
    title: Option<String>,
    description: String,
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    annotations: ToolAnnotations,
}

impl TryFrom<RawDescriptor> for ToolDescriptor {
    type Error = CoreError;
    fn try_from(raw: RawDescriptor) -> Result<Self, CoreError> {
        ToolDescriptor::new(raw.id, raw.description, raw.input_schema)?
            .with_title(raw.title)?
            .with_output_schema(raw.output_schema)
            .map(|d| d.with_annotations(raw.annotations))
    }
}

impl ToolDescriptor {
    /// Builds a descriptor; the input schema must be an object schema (`{"type": "object", …}`).
    pub fn new(
        id: ToolId,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Result<Self, CoreError> {
        let description = description.into();
        if description.len() > MAX_DESCRIPTION_LEN {
            return Err(CoreError::new(
                TOOL_INVALID_DESCRIPTOR,
                format!(
                    "{id}: description is {} bytes, over the {MAX_DESCRIPTION_LEN}-byte limit",
                    description.len()
                ),
            ));
        }
        check_object_schema(&id, &input_schema)?;
        Ok(ToolDescriptor {
            id,
            title: None,
            description,
            input_schema,
            output_schema: None,
            annotations: ToolAnnotations::default(),
        })
    }

    pub fn with_title(mut self, title: Option<String>) -> Result<Self, CoreError> {
        if let Some(t) = &title
            && (t.len() > MAX_TITLE_LEN || t.chars().any(char::is_control))
        {
            return Err(CoreError::new(
                TOOL_INVALID_DESCRIPTOR,
                format!(
                    "{}: title is over 256 bytes or has control characters",
                    self.id
                ),
            ));
        }
        self.title = title;
        Ok(self)
    }

    pub fn with_output_schema(mut self, schema: Option<Value>) -> Result<Self, CoreError> {
        if let Some(s) = &schema {
            check_schema_size(&self.id, s, "output")?;
            if !s.is_object() {
                return Err(CoreError::new(
                    TOOL_INVALID_SCHEMA,
                    format!("{}: output schema must be a JSON object", self.id),
                ));
            }
        }
        self.output_schema = schema;
        Ok(self)
    }

    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Replaces the description (profile description overrides), keeping the length limit.
    pub fn with_description(mut self, description: String) -> Result<Self, CoreError> {
        if description.len() > MAX_DESCRIPTION_LEN {
            return Err(CoreError::new(
                TOOL_INVALID_DESCRIPTOR,
                format!("{}: description override over the limit", self.id),
            ));
        }
        self.description = description;
        Ok(self)
    }

    pub fn id(&self) -> &ToolId {
        &self.id
    }
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }
    pub fn description(&self) -> &str {
        &self.description
    }
    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }
    pub fn output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }
    pub fn annotations(&self) -> &ToolAnnotations {
        &self.annotations
    }
}

/// Checks that a root input schema is an object schema of bounded size and depth. Exposed so that
/// sources (MCP caches) can explain why a tool is unusable without building a descriptor.
pub fn check_object_schema(id: &ToolId, schema: &Value) -> Result<(), CoreError> {
    check_schema_size(id, schema, "input")?;
    let Some(obj) = schema.as_object() else {
        return Err(CoreError::new(
            TOOL_INVALID_SCHEMA,
            format!("{id}: input schema is not a JSON object"),
        ));
    };
    match obj.get("type") {
        Some(Value::String(t)) if t == "object" => Ok(()),
        Some(other) => Err(CoreError::new(
            TOOL_INVALID_SCHEMA,
            format!("{id}: input schema root has type {other}, expected \"object\""),
        )),
        None => Err(CoreError::new(
            TOOL_INVALID_SCHEMA,
            format!("{id}: input schema root has no `type: object`"),
        )),
    }
}

fn check_schema_size(id: &ToolId, schema: &Value, which: &str) -> Result<(), CoreError> {
    if depth(schema) > MAX_SCHEMA_DEPTH {
        return Err(CoreError::new(
            TOOL_INVALID_SCHEMA,
            format!("{id}: {which} schema nested deeper than {MAX_SCHEMA_DEPTH}"),
        ));
    }
    let len = serde_json::to_vec(schema)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if len > MAX_SCHEMA_BYTES {
        return Err(CoreError::new(
            TOOL_INVALID_SCHEMA,
            format!("{id}: {which} schema is {len} bytes, over {MAX_SCHEMA_BYTES}"),
        ));
    }
    Ok(())
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn id() -> ToolId {
        ToolId::parse("ext/h:t").unwrap()
    }

    #[test]
    fn root_schema_must_be_an_object() {
        for bad in [
            json!(null),
            json!("object"),
            json!([]),
            json!({"type": "array"}),
            json!({"properties": {}}),
            json!({"type": ["object"]}),
        ] {
            let err = ToolDescriptor::new(id(), "d", bad.clone()).unwrap_err();
            assert_eq!(err.code, TOOL_INVALID_SCHEMA, "{bad}");
        }
        assert!(ToolDescriptor::new(id(), "d", json!({"type": "object"})).is_ok());
    }

    #[test]
    fn deep_or_huge_schemas_are_refused() {
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        assert_eq!(
            ToolDescriptor::new(id(), "d", deep).unwrap_err().code,
            TOOL_INVALID_SCHEMA
        );
        let huge = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert_eq!(
            ToolDescriptor::new(id(), "d", huge).unwrap_err().code,
            TOOL_INVALID_SCHEMA
        );
    }

    #[test]
    fn serde_round_trip_validates() {
        let d = ToolDescriptor::new(id(), "does t", json!({"type": "object"}))
            .unwrap()
            .with_annotations(ToolAnnotations {
                read_only_hint: Some(true),
                ..Default::default()
            });
        let text = serde_json::to_string(&d).unwrap();
        assert_eq!(
            text,
            r#"{"id":"ext/h:t","description":"does t","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}"#
        );
        assert_eq!(serde_json::from_str::<ToolDescriptor>(&text).unwrap(), d);
        assert!(
            serde_json::from_str::<ToolDescriptor>(
                r#"{"id":"ext/h:t","description":"","inputSchema":{"type":"array"}}"#
            )
            .is_err()
        );
    }
}
