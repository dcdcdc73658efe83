//! The error taxonomy and the one table of stable error codes.
//!
//! Every error the plane can report carries a code `namespace.snake_case` from [`CODES`]. A code
//! belongs to exactly one [`ErrorClass`], and the class — not the message text — decides what
//! happens next: a recoverable error goes back to the model as a tool result, a policy denial is
//! handled as the policy says, a provider-contract violation fails the invocation, and a system
//! failure fails the run. `docs/errors.md` mirrors this table; a test keeps them in step.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What an error means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// A tool result the model can read and act on; the run goes on.
    Recoverable,
    /// The call was refused by policy; the policy decides whether it is a result or fails the run.
    PolicyDenied,
    /// The model (or its provider) broke the turn's contract: unknown alias, missing call id, …
    /// Fails the invocation; host-driven callers see `FAILED_PRECONDITION`.
    ProviderContract,
    /// The plane itself failed (storage, identity mismatch, serialisation); the run fails.
    System,
    /// Bad configuration or request input from an operator or host (a malformed profile, a
    /// forged tool id); refused before anything runs.
    InvalidInput,
}

impl ErrorClass {
    /// Stable lowercase name, as used on the wire and in the docs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Recoverable => "recoverable",
            ErrorClass::PolicyDenied => "policy_denied",
            ErrorClass::ProviderContract => "provider_contract",
            ErrorClass::System => "system",
            ErrorClass::InvalidInput => "invalid_input",
        }
    }
}

/// A stable error code with its class. Construct only through the constants in this module so that
/// every code in use appears in [`CODES`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode {
    code: &'static str,
    class: ErrorClass,
}

impl ErrorCode {
    const fn new(code: &'static str, class: ErrorClass) -> Self {
        ErrorCode { code, class }
    }

    /// The code string, e.g. `workspace.stale_file`.
    pub fn as_str(self) -> &'static str {
        self.code
    }

    /// What the error means for the run.
    pub fn class(self) -> ErrorClass {
        self.class
    }

    /// Looks a code up by its string; `None` for codes not in the table.
    pub fn lookup(code: &str) -> Option<ErrorCode> {
        CODES
            .iter()
            .find(|info| info.code.code == code)
            .map(|info| info.code)
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code)
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        ErrorCode::lookup(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code `{s}`")))
    }
}

/// One row of the code table.
#[derive(Debug, Clone, Copy)]
pub struct CodeInfo {
    pub code: ErrorCode,
    /// One line for people: when the code is used.
    pub meaning: &'static str,
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $name:ident = ($code:literal, $class:ident, $meaning:literal); )*) => {
        $( $(#[$doc])* pub const $name: ErrorCode = ErrorCode::new($code, ErrorClass::$class); )*
        /// Every stable error code, in documentation order.
        pub const CODES: &[CodeInfo] = &[
            $( CodeInfo { code: $name, meaning: $meaning }, )*
        ];
    };
}

codes! {
    // Tool identity and descriptors.
    TOOL_INVALID_ID = ("tool.invalid_id", InvalidInput,
        "a tool id is not `<provider>:<native>` with a known provider and a valid native name");
    TOOL_RESERVED_PROVIDER = ("tool.reserved_provider", InvalidInput,
        "a registration claims a provider reserved for the plane (`builtin`, `mcp/…`, `agent/…`)");
    TOOL_DUPLICATE_ID = ("tool.duplicate_id", InvalidInput,
        "two sources contribute the same tool id; the error names both sources");
    TOOL_INVALID_SCHEMA = ("tool.invalid_schema", InvalidInput,
        "a descriptor's input schema is not a JSON object schema (`type` must be `object`)");
    TOOL_INVALID_DESCRIPTOR = ("tool.invalid_descriptor", InvalidInput,
        "a descriptor field is empty or over its limit");
    TOOL_INVALID_ARGUMENTS = ("tool.invalid_arguments", Recoverable,
        "the model's arguments are not valid JSON, not an object, over the size limit, or do not match the tool's input schema");
    TOOL_INVALID_RESULT = ("tool.invalid_result", Recoverable,
        "an MCP tool's structured result does not match the output schema it declared");
    TOOL_OUTCOME_UNKNOWN = ("tool.outcome_unknown", Recoverable,
        "the call was running when the runtime driving the run stopped; whether it took effect is unknown, and it is not run again (a tool marked idempotent or read-only is)");
    TOOL_RESULT_IDENTITY_MISMATCH = ("tool.result_identity_mismatch", System,
        "an executor answered with a call id or tool id other than the call's own");
    TOOL_EXECUTOR_UNAVAILABLE = ("tool.executor_unavailable", Recoverable,
        "an external host or the mcp-proxy could not be reached; nothing was sent, or the outcome is unknown (never retried)");
    TOOL_TIMEOUT = ("tool.timeout", Recoverable,
        "the executor did not answer before the call's deadline");
    TOOL_CANCELLED = ("tool.cancelled", Recoverable,
        "the call was cancelled before it completed");

    // Profiles and policy.
    PROFILE_INVALID = ("profile.invalid", InvalidInput,
        "a profile is not valid JSON, has an unknown field, or misses a required one");
    PROFILE_INVALID_LIMIT = ("profile.invalid_limit", InvalidInput,
        "a profile limit is zero or over its maximum");
    PROFILE_INVALID_SELECTOR = ("profile.invalid_selector", InvalidInput,
        "a tool selector in a profile or policy cannot be parsed");
    PROFILE_RUNTIME_ONLY_TOOL = ("profile.runtime_only_tool", InvalidInput,
        "a profile allows a tool the runtime injects itself (`builtin:task.return`)");
    POLICY_DENIED = ("policy.denied", PolicyDenied,
        "the call was refused by governance or a policy layer; the result names the reason");
    POLICY_APPROVAL_DENIED = ("policy.approval_denied", Recoverable,
        "a call held for approval was denied by a person, or its approval expired with the deny outcome; the result names who and why");
    TOOL_QUESTION_TIMEOUT = ("tool.question_timeout", Recoverable,
        "`ask_user` got no answer before its timeout");

    // The snapshot and the turn contract.
    SNAPSHOT_TOOL_OMITTED = ("snapshot.tool_omitted", Recoverable,
        "diagnostic: an allowed tool was left out of a snapshot (paused server, permission off, not cached, …)");
    MODEL_UNKNOWN_TOOL_ALIAS = ("model.unknown_tool_alias", ProviderContract,
        "the model called a name this turn did not advertise (also another invocation's alias)");
    MODEL_CANONICAL_TOOL_NAME = ("model.canonical_tool_name", ProviderContract,
        "the model called a tool by its canonical id or native name instead of its alias");
    MODEL_MISSING_CALL_ID = ("model.missing_call_id", ProviderContract,
        "a tool call came without a call id (Gemini calls get synthesised ids instead)");
    MODEL_DUPLICATE_CALL_ID = ("model.duplicate_call_id", ProviderContract,
        "two tool calls of one turn share a call id");
    MODEL_TOOL_CHOICE_VIOLATED = ("model.tool_choice_violated", ProviderContract,
        "the calls break the turn's tool choice (a call under `none`, another tool under `specific`)");
    MODEL_TOOL_CALL_REQUIRED = ("model.tool_call_required", ProviderContract,
        "the turn required a tool call and the model made none");
    MODEL_MALFORMED_RESPONSE = ("model.malformed_response", ProviderContract,
        "provider-native tool calls could not be parsed in the declared provider format");

    // The request gate and the loop.
    AGENT_TOOL_BUDGET_EXHAUSTED = ("agent.tool_budget_exhausted", Recoverable,
        "the invocation's total or this tool's call budget is used up");
    AGENT_RUN_BUDGET_EXHAUSTED = ("agent.run_budget_exhausted", Recoverable,
        "the run's tool-call or model-token budget, shared by all its invocations and children, is used up");
    AGENT_TOOL_AFTER_FINISH = ("agent.tool_after_finish", Recoverable,
        "a terminal tool (finish, handoff, task.return) was not the last call of its turn, or a call followed one");
    AGENT_MAX_TOOL_ROUNDS_EXCEEDED = ("agent.max_tool_rounds_exceeded", System,
        "the invocation used all its model rounds without finishing");
    AGENT_CYCLE_DETECTED = ("agent.cycle_detected", Recoverable,
        "the same tool was called in a streak long enough to look like a loop (warning, then stop)");
    AGENT_UNAVAILABLE = ("agent.unavailable", Recoverable,
        "an agent-control tool cannot run in this invocation (no target, not allowed, or not offered)");
    AGENT_NOT_ALLOWED = ("agent.not_allowed", Recoverable,
        "the target agent is not offered to this caller: not among its targets, not callable, not a handoff target, or the caller is not an allowed caller");
    AGENT_NO_MODEL = ("agent.no_model", Recoverable,
        "the target agent's profile has no model endpoint, so it cannot run delegated work");
    AGENT_HANDOFF_DEPTH_EXCEEDED = ("agent.handoff_depth_exceeded", Recoverable,
        "the handoff would make the chain longer than the target's `maxHandoffDepth`");
    AGENT_CHILDREN_UNFINISHED = ("agent.children_unfinished", Recoverable,
        "a handoff while tasks this agent delegated are still queued or running; await them first");
    AGENT_UNKNOWN_TASK = ("agent.unknown_task", Recoverable,
        "`agent.await` named a task id this agent did not delegate");
    AGENT_TASK_LIMIT = ("agent.task_limit", Recoverable,
        "the run already holds the most delegated tasks it may (1,000)");
    WORKSPACE_COMMIT_REQUIRED = ("workspace.commit_required", Recoverable,
        "`workspace.finish` in a foreground run before any explicit `workspace.commit`");

    // Request conventions every service shares.
    REQUEST_INVALID_PAGE_TOKEN = ("request.invalid_page_token", InvalidInput,
        "a `page_token` is not one this listing issued (altered, from another listing, or from an older format); start again with an empty token");
    REQUEST_IDEMPOTENCY_MISMATCH = ("request.idempotency_mismatch", InvalidInput,
        "a creating request reused a `request_id` that an earlier, different request of the same cell used; nothing was created");

    // The runtime.
    RUNTIME_NOT_FOUND = ("runtime.not_found", InvalidInput,
        "no run, invocation or snapshot with that id");
    RUNTIME_INVOCATION_NOT_OPEN = ("runtime.invocation_not_open", InvalidInput,
        "tool calls for an invocation that is finished, handed off, returned, failed or closed");
    RUNTIME_STALE_TURN = ("runtime.stale_turn", ProviderContract,
        "tool calls sent for a turn that is not the invocation's current turn");
    RUNTIME_STALE_EPOCH = ("runtime.stale_epoch", InvalidInput,
        "a request carried an older lease epoch than the run's current one");
    RUNTIME_INTERRUPTED = ("runtime.interrupted", System,
        "the run was in progress when the runtime stopped; it is failed and may be retried");
    RUNTIME_DEPENDENCY_UNAVAILABLE = ("runtime.dependency_unavailable", System,
        "the workspace service or the catalog could not be reached or refused a required step");
    RUNTIME_JOURNAL_FAILED = ("runtime.journal_failed", System,
        "a journal record could not be appended; the run cannot go on without its journal");
    RUNTIME_IDLE_TIMEOUT = ("runtime.idle_timeout", System,
        "a host-driven invocation saw no request for longer than the idle timeout and was closed");
    RUNTIME_CANCELLED = ("runtime.cancelled", System,
        "the run was cancelled by a `CancelRun` request");
    RUNTIME_LEASE_LOST = ("runtime.lease_lost", System,
        "this runtime lost the run's lease to another holder (a newer epoch); it stopped driving the run and writes nothing more for it");
    RUNTIME_NOT_OWNER = ("runtime.not_owner", InvalidInput,
        "a change to a run that another runtime over the same store drives and that advertises no address to forward it to; send it to that runtime (reads are answered by any)");
    RUNTIME_DRAINING = ("runtime.draining", System,
        "the runtime is stopping and takes no new runs; send the request to another replica");
    RUNTIME_APPROVAL_DECIDED = ("runtime.approval_decided", InvalidInput,
        "a decision or answer for an approval or question that is already approved, denied, answered or expired");
    RUNTIME_APPROVAL_PENDING = ("runtime.approval_pending", InvalidInput,
        "new tool calls for a host-driven turn whose held calls are not collected yet (`CollectToolResults`)");
    RUNTIME_INVALID_REQUEST = ("runtime.invalid_request", InvalidInput,
        "a runtime request is missing a field or has a malformed one (run spec, provider format, epoch)");
    RUNTIME_INTERNAL = ("runtime.internal", System,
        "the runtime failed in a way no other code describes (a snapshot it cannot serialise); its log has the cause");
    MODEL_CALL_FAILED = ("model.call_failed", System,
        "the model endpoint failed after its retries (timeouts, 429 and 5xx are retried with backoff); retryable");
    MODEL_EGRESS_DENIED = ("model.egress_denied", PolicyDenied,
        "a model endpoint's URL, an address its host resolves to, or a redirect it answers with is refused by the runtime's egress policy: the profile has no usable model, or the call fails");
    RUNTIME_PATH_NOT_ALLOWED = ("runtime.path_not_allowed", PolicyDenied,
        "a scripted model endpoint's script is not under the runtime's `script_roots`: the profile has no usable model");
    WORKSPACE_COMMIT_FAILED = ("workspace.commit_failed", Recoverable,
        "the workspace service refused `workspace.commit` without a code of its own");
}

/// The error type of the core: a stable code and a human-readable message.
///
/// `Display` renders `"<code>: <message>"` so that logs and statuses always start with the code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CoreError {
    pub code: ErrorCode,
    pub message: String,
}

impl CoreError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CoreError {
            code,
            message: message.into(),
        }
    }

    pub fn class(&self) -> ErrorClass {
        self.code.class()
    }
}

/// An error and its causes, `error: cause: root cause`, for messages a person reads: clients such
/// as an HTTP client say why ("Connection refused") only in their causes. A layer that repeats its
/// cause's text is not repeated.
pub fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    with_causes_by(err, |e| e.source())
}

/// [`with_causes`] with the step from an error to its cause given, for errors that hold a cause
/// without naming it as their `source`.
pub fn with_causes_by(
    err: &(dyn std::error::Error + 'static),
    cause_of: impl for<'a> Fn(
        &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut text = err.to_string();
    let mut source = cause_of(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause_of(cause);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn codes_are_unique_and_namespaced_snake_case() {
        let mut seen = HashSet::new();
        for info in CODES {
            let code = info.code.as_str();
            assert!(seen.insert(code), "duplicate code {code}");
            let (ns, name) = code.split_once('.').expect("namespace.name");
            for part in [ns, name] {
                assert!(!part.is_empty(), "{code}");
                assert!(
                    part.chars()
                        .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
                    "{code} is not snake_case"
                );
            }
            assert!(!info.meaning.is_empty(), "{code} has no meaning");
        }
    }

    #[test]
    fn display_starts_with_code() {
        let err = CoreError::new(TOOL_INVALID_ID, "bad");
        assert_eq!(err.to_string(), "tool.invalid_id: bad");
        assert_eq!(ErrorCode::lookup("tool.invalid_id"), Some(TOOL_INVALID_ID));
        assert_eq!(ErrorCode::lookup("nope.nope"), None);
    }

    /// `docs/errors.md` lists every code of the table with its class, so the one table of codes
    /// people read cannot drift from the code.
    #[test]
    fn docs_errors_md_lists_every_code() {
        let doc = include_str!("../../../docs/errors.md");
        for info in CODES {
            let row = format!(
                "| `{}` | {} |",
                info.code.as_str(),
                info.code.class().as_str()
            );
            assert!(
                doc.contains(&row),
                "docs/errors.md misses the row starting `{row}`"
            );
        }
    }
}
