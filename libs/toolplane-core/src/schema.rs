//! JSON Schema checks of a tool's arguments (against its input schema) and of an MCP tool's
//! structured result (against its output schema), through the `jsonschema` crate. Owns compiling a
//! schema once into a [`SchemaCheck`] and turning violations into a short, bounded list a model can
//! act on; must never fetch anything: references outside the schema are refused, and `pattern`
//! keywords run on the linear-time `regex` engine with size limits, since schemas come from MCP
//! servers and external hosts, which are not trusted.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::{PatternOptions, Validator};
use serde::Serialize;
use serde_json::Value;

use crate::descriptor::ToolDescriptor;
use crate::id::ToolId;

/// Most violations one check reports; the rest are counted.
pub const MAX_REPORTED_VIOLATIONS: usize = 10;
/// Longest message of one violation, in characters.
const MAX_MESSAGE_CHARS: usize = 200;
/// Compiled size limit of each `pattern` of a schema, in bytes.
const MAX_PATTERN_PROGRAM: usize = 1024 * 1024;

/// A compiled schema.
#[derive(Debug)]
pub struct SchemaCheck {
    validator: Validator,
}

/// One place where a value breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// JSON Pointer into the checked value (`""` is the whole value, `/items/0/name` a field).
    pub path: String,
    /// What is wrong, without the offending value (which may be large or secret).
    pub message: String,
}

/// The outcome of a failed check: the first violations and how many there were in all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violations {
    pub violations: Vec<Violation>,
    pub total: usize,
}

impl Violations {
    /// One line per violation, for a tool result's message.
    pub fn summary(&self) -> String {
        let mut lines: Vec<String> = self
            .violations
            .iter()
            .map(|v| {
                let at = if v.path.is_empty() {
                    "(root)"
                } else {
                    v.path.as_str()
                };
                format!("- `{at}`: {}", v.message)
            })
            .collect();
        if self.total > self.violations.len() {
            lines.push(format!(
                "- … and {} more",
                self.total.saturating_sub(self.violations.len())
            ));
        }
        lines.join("\n")
    }
}

impl SchemaCheck {
    /// Compiles `schema`, or says why it cannot be used (a malformed schema, a reference outside
    /// it, a pattern over the size limit).
    pub fn compile(schema: &Value) -> Result<SchemaCheck, String> {
        let validator = jsonschema::options()
            .with_pattern_options(
                PatternOptions::regex()
                    .size_limit(MAX_PATTERN_PROGRAM)
                    .dfa_size_limit(MAX_PATTERN_PROGRAM),
            )
            .build(schema)
            .map_err(|e| bounded(&e.masked().to_string()))?;
        Ok(SchemaCheck { validator })
    }

    /// Checks `value`; on failure, the first [`MAX_REPORTED_VIOLATIONS`] violations and the count.
    pub fn check(&self, value: &Value) -> Result<(), Violations> {
        if self.validator.is_valid(value) {
            return Ok(());
        }
        let mut violations = Vec::new();
        let mut total = 0usize;
        for error in self.validator.iter_errors(value) {
            total = total.saturating_add(1);
            if violations.len() < MAX_REPORTED_VIOLATIONS {
                violations.push(Violation {
                    path: error.instance_path().as_str().to_owned(),
                    message: bounded(&error.masked().to_string()),
                });
            }
        }
        Err(Violations { violations, total })
    }
}

/// The schema checks of one snapshot's tools, each compiled on the tool's first call and kept for
/// the invocation. A schema that cannot be compiled (a reference outside it, a pattern over the
/// limit) is not checked: the tool's own server remains the judge of its arguments.
#[derive(Debug, Default)]
pub struct SnapshotSchemas {
    input: HashMap<ToolId, Option<Arc<SchemaCheck>>>,
    output: HashMap<ToolId, Option<Arc<SchemaCheck>>>,
}

impl SnapshotSchemas {
    /// Checks a call's arguments against the tool's input schema.
    pub fn check_arguments(
        &mut self,
        tool: &ToolDescriptor,
        args: &Value,
    ) -> Result<(), Violations> {
        let check = self
            .input
            .entry(tool.id().clone())
            .or_insert_with(|| compile_or_skip(tool.input_schema()));
        check.as_ref().map_or(Ok(()), |c| c.check(args))
    }

    /// Checks a structured result against the tool's output schema, when it declares one.
    pub fn check_structured(
        &mut self,
        tool: &ToolDescriptor,
        structured: &Value,
    ) -> Result<(), Violations> {
        let Some(schema) = tool.output_schema() else {
            return Ok(());
        };
        let check = self
            .output
            .entry(tool.id().clone())
            .or_insert_with(|| compile_or_skip(schema));
        check.as_ref().map_or(Ok(()), |c| c.check(structured))
    }
}

fn compile_or_skip(schema: &Value) -> Option<Arc<SchemaCheck>> {
    SchemaCheck::compile(schema).ok().map(Arc::new)
}

fn bounded(text: &str) -> String {
    if text.chars().count() <= MAX_MESSAGE_CHARS {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 20},
                "limit": {"type": "integer", "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    #[test]
    fn violations_name_their_paths_without_the_values() {
        let check = SchemaCheck::compile(&schema()).unwrap();
        assert!(
            check
                .check(&json!({"query": "rust", "tags": ["a"]}))
                .is_ok()
        );
        let secret = "s3cr3t-value-that-must-not-echo";
        let v = check
            .check(&json!({"limit": 0, "tags": ["ok", secret], "extra": true}))
            .unwrap_err();
        let paths: Vec<&str> = v.violations.iter().map(|v| v.path.as_str()).collect();
        for want in ["", "/limit", "/tags/1"] {
            assert!(paths.contains(&want), "{want} in {paths:?}");
        }
        assert!(!v.summary().contains(secret), "{}", v.summary());
        assert_eq!(v.total, v.violations.len());
    }

    #[test]
    fn many_violations_are_counted_not_listed() {
        let check =
            SchemaCheck::compile(&json!({"type": "array", "items": {"type": "string"}})).unwrap();
        let v = check
            .check(&json!((0..500).collect::<Vec<u32>>()))
            .unwrap_err();
        assert_eq!(v.violations.len(), MAX_REPORTED_VIOLATIONS);
        assert_eq!(v.total, 500);
        assert!(v.summary().ends_with("… and 490 more"));
    }

    #[test]
    fn a_snapshot_compiles_each_schema_once_and_checks_outputs_only_when_declared() {
        let id = ToolId::parse("ext/crm:lookup").unwrap();
        let with_output = ToolDescriptor::new(id.clone(), "d", schema())
            .unwrap()
            .with_output_schema(Some(json!({"type": "object", "required": ["n"]})))
            .unwrap();
        let mut s = SnapshotSchemas::default();
        assert!(
            s.check_arguments(&with_output, &json!({"query": "a"}))
                .is_ok()
        );
        assert!(s.check_arguments(&with_output, &json!({})).is_err());
        assert_eq!(s.input.len(), 1);
        assert!(s.check_structured(&with_output, &json!({"n": 1})).is_ok());
        assert!(s.check_structured(&with_output, &json!({"m": 1})).is_err());
        let without =
            ToolDescriptor::new(ToolId::parse("ext/crm:other").unwrap(), "d", schema()).unwrap();
        assert!(s.check_structured(&without, &json!("anything")).is_ok());
    }

    #[test]
    fn hostile_schemas_are_refused_or_harmless() {
        // Nothing outside the schema is fetched.
        for bad in [
            json!({"$ref": "https://169.254.169.254/latest/meta-data"}),
            json!({"$ref": "file:///etc/passwd"}),
            json!({"type": 12}),
            json!({"type": "string", "pattern": "a{1000}{1000}{1000}"}),
        ] {
            assert!(SchemaCheck::compile(&bad).is_err(), "{bad}");
        }
        // A pattern that backtracks exponentially elsewhere is linear here.
        let check = SchemaCheck::compile(&json!({"type": "string", "pattern": "^(a+)+$"})).unwrap();
        assert!(
            check
                .check(&json!(format!("{}!", "a".repeat(100_000))))
                .is_err()
        );
    }
}
