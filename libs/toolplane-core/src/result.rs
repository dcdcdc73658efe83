//! `AgentToolResult`: what a tool call produced.
//!
//! `call_id` and `tool_id` must equal the original invocation's before the result is interpreted,
//! audited or put in a transcript ([`AgentToolResult::verify_identity`]). The model sees `content`
//! only — with a short `## Tool error` heading when `is_error` — while `structured`, `error_code`
//! and `resource_refs` stay internal facts for the runtime, the audit and timelines.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{CoreError, ErrorClass, ErrorCode, TOOL_RESULT_IDENTITY_MISMATCH};
use crate::id::ToolId;
use crate::invocation::ToolInvocation;

/// A pointer to a resource a result produced or read, e.g. `workspace:output/a.md#L1-L9`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentToolResult {
    pub call_id: String,
    pub tool_id: ToolId,
    /// Model-facing text or Markdown.
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    pub is_error: bool,
    /// A stable `namespace.snake_case` code when `is_error`; executors may use their own
    /// namespaces (an external host's `crm.not_found`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_refs: Vec<ResourceRef>,
}

impl AgentToolResult {
    /// A successful result for a call.
    pub fn ok(call: &ToolInvocation, content: impl Into<String>) -> Self {
        AgentToolResult {
            call_id: call.call_id.clone(),
            tool_id: call.tool_id.clone(),
            content: content.into(),
            structured: None,
            is_error: false,
            error_code: None,
            resource_refs: Vec::new(),
        }
    }

    /// An error result for a call, with a code from the table.
    pub fn error(call: &ToolInvocation, code: ErrorCode, message: impl Into<String>) -> Self {
        AgentToolResult {
            call_id: call.call_id.clone(),
            tool_id: call.tool_id.clone(),
            content: message.into(),
            structured: None,
            is_error: true,
            error_code: Some(code.as_str().to_owned()),
            resource_refs: Vec::new(),
        }
    }

    /// The recoverable or policy-denied result for a core error.
    pub fn from_error(call: &ToolInvocation, err: &CoreError) -> Self {
        AgentToolResult::error(call, err.code, err.message.clone())
    }

    pub fn with_structured(mut self, structured: Value) -> Self {
        self.structured = Some(structured);
        self
    }

    pub fn with_refs(mut self, refs: Vec<ResourceRef>) -> Self {
        self.resource_refs = refs;
        self
    }

    /// Checks that the result answers exactly this call. A mismatch is a system failure: the
    /// result must not reach effects, audit or the transcript.
    pub fn verify_identity(&self, call: &ToolInvocation) -> Result<(), CoreError> {
        if self.call_id == call.call_id && self.tool_id == call.tool_id {
            return Ok(());
        }
        Err(CoreError::new(
            TOOL_RESULT_IDENTITY_MISMATCH,
            format!(
                "result for ({}, {}) does not match call ({}, {})",
                self.call_id, self.tool_id, call.call_id, call.tool_id
            ),
        ))
    }

    /// The class of this result's error code, when the code is in the table.
    pub fn error_class(&self) -> Option<ErrorClass> {
        self.error_code
            .as_deref()
            .and_then(ErrorCode::lookup)
            .map(ErrorCode::class)
    }

    /// What the model reads: `content`, under a `## Tool error` heading when this is an error.
    pub fn model_content(&self) -> Cow<'_, str> {
        if self.is_error {
            Cow::Owned(format!("## Tool error\n\n{}", self.content))
        } else {
            Cow::Borrowed(&self.content)
        }
    }
}

/// Whether a string is a well-formed error code (`namespace.snake_case`), for codes that come from
/// outside the table.
pub fn is_well_formed_code(code: &str) -> bool {
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    code.len() <= 96
        && code
            .split_once('.')
            .is_some_and(|(ns, rest)| ok(ns) && rest.split('.').all(ok))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AGENT_TOOL_BUDGET_EXHAUSTED;
    use crate::invocation::ToolArguments;

    fn call(id: &str) -> ToolInvocation {
        ToolInvocation {
            call_id: id.into(),
            tool_id: ToolId::builtin("dice.roll").unwrap(),
            arguments: ToolArguments::from_text("{}"),
            provider_metadata: None,
        }
    }

    #[test]
    fn identity_is_verified() {
        let c = call("call_0");
        let r = AgentToolResult::ok(&c, "4");
        assert!(r.verify_identity(&c).is_ok());
        assert_eq!(
            r.verify_identity(&call("call_1")).unwrap_err().code,
            TOOL_RESULT_IDENTITY_MISMATCH
        );
        let mut other_tool = r.clone();
        other_tool.tool_id = ToolId::builtin("workspace.read_file").unwrap();
        assert!(other_tool.verify_identity(&c).is_err());
    }

    #[test]
    fn model_sees_content_only_with_error_heading() {
        let c = call("c");
        let ok =
            AgentToolResult::ok(&c, "rolled 4").with_structured(serde_json::json!({"total": 4}));
        assert_eq!(ok.model_content(), "rolled 4");
        let err = AgentToolResult::error(&c, AGENT_TOOL_BUDGET_EXHAUSTED, "no calls left");
        assert_eq!(err.model_content(), "## Tool error\n\nno calls left");
        assert_eq!(err.error_class(), Some(ErrorClass::Recoverable));
    }

    #[test]
    fn code_shape() {
        assert!(is_well_formed_code("crm.not_found"));
        assert!(is_well_formed_code("a.b.c"));
        for bad in ["", "x", ".x", "x.", "X.y", "a.b-c", "a b.c"] {
            assert!(!is_well_formed_code(bad), "{bad}");
        }
    }
}
