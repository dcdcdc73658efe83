//! The workspace service's one error type and its table of codes. Owns which failures the model
//! may recover from (a tool result with `is_error = true`) and which are system failures (a gRPC
//! status); must never decide that by matching message text.

use toolplane_core::ErrorClass;
use toolplane_store::StoreError;

/// Every code this crate reports, its class and when it happens; mirrored by `docs/errors.md`.
pub const CODES: &[(&str, ErrorClass, &str)] = &[
    (
        "workspace.invalid_path",
        ErrorClass::Recoverable,
        "a model-supplied path is empty, absolute, has `..`, `.`, empty segments, backslashes, `%`, control, zero-width or lookalike characters, or is too long",
    ),
    (
        "workspace.path_not_visible",
        ErrorClass::Recoverable,
        "the path is outside the invocation's visible roots (hidden runtime storage included)",
    ),
    (
        "workspace.path_not_writable",
        ErrorClass::Recoverable,
        "the path is visible but not under a writable root (`tool-results/` never is), or it is `summaries/<name>-result.md`, reserved for a returned task's summary, or lies below one",
    ),
    (
        "workspace.path_denied",
        ErrorClass::Recoverable,
        "governance's deny paths (or allow paths) of the call exclude the path",
    ),
    (
        "workspace.file_not_found",
        ErrorClass::Recoverable,
        "the file or folder does not exist",
    ),
    (
        "workspace.path_is_directory",
        ErrorClass::Recoverable,
        "a read, write or patch names a folder; use workspace_list_files",
    ),
    (
        "workspace.file_not_text",
        ErrorClass::Recoverable,
        "the file is not UTF-8 text (or holds NUL bytes)",
    ),
    (
        "workspace.file_too_large",
        ErrorClass::Recoverable,
        "the file, or the file a write or patch would produce, exceeds the size limit",
    ),
    (
        "workspace.read_required",
        ErrorClass::Recoverable,
        "a replace or patch of an existing file that this invocation has not read",
    ),
    (
        "workspace.stale_file",
        ErrorClass::Recoverable,
        "the file changed since this invocation last read or wrote it; read it again",
    ),
    (
        "workspace.full_read_required",
        ErrorClass::Recoverable,
        "`replace_all`, or a patch after a failed patch based on a partial read, needs a full read first",
    ),
    (
        "workspace.patch_not_read",
        ErrorClass::Recoverable,
        "`old_string` is not inside text this invocation has read",
    ),
    (
        "workspace.patch_no_match",
        ErrorClass::Recoverable,
        "`old_string` does not occur in the file",
    ),
    (
        "workspace.patch_ambiguous",
        ErrorClass::Recoverable,
        "`old_string` occurs more than once and `replace_all` is not set",
    ),
    (
        "workspace.patch_invalid",
        ErrorClass::Recoverable,
        "`old_string` is empty or equal to `new_string`",
    ),
    (
        "workspace.invalid_range",
        ErrorClass::Recoverable,
        "`start_line` / `line_count` is 0 or starts past the end",
    ),
    (
        "workspace.invalid_query",
        ErrorClass::Recoverable,
        "a search query is empty or too long",
    ),
    (
        "workspace.limit_exceeded",
        ErrorClass::Recoverable,
        "an argument is over its limit (content size, line length, files in a run)",
    ),
    (
        "workspace.invocation_closed",
        ErrorClass::Recoverable,
        "the invocation's workspace view was closed; its tool calls are refused",
    ),
    (
        "chat.message_not_found",
        ErrorClass::Recoverable,
        "a message index is past the end of the chat",
    ),
    (
        "chat.invalid_range",
        ErrorClass::Recoverable,
        "a message's line window or a search range is invalid",
    ),
    (
        "chat.invalid_query",
        ErrorClass::Recoverable,
        "a chat search query is empty or too long",
    ),
    (
        "skill.not_found",
        ErrorClass::Recoverable,
        "no visible installed skill has that name (denied skills look absent)",
    ),
    (
        "skill.file_not_found",
        ErrorClass::Recoverable,
        "the skill has no text file at that path (binary files are skipped at import)",
    ),
    (
        "skill.invalid_path",
        ErrorClass::Recoverable,
        "a path inside a skill is not a clean relative path",
    ),
    (
        "skill.invalid_range",
        ErrorClass::Recoverable,
        "a skill read's line window is invalid",
    ),
    (
        "skill.invalid_query",
        ErrorClass::Recoverable,
        "a skill search query is empty or too long",
    ),
    (
        "skill.budget_exhausted",
        ErrorClass::Recoverable,
        "the run's skill read budget (reads and search snippets) is used up",
    ),
    (
        "worldinfo.entry_not_found",
        ErrorClass::Recoverable,
        "an entry ref is not in this run's activation index",
    ),
    (
        "worldinfo.invalid_range",
        ErrorClass::Recoverable,
        "an entry's line window is invalid",
    ),
    (
        "workspace.invalid_request",
        ErrorClass::InvalidInput,
        "a storage RPC's fields are missing, malformed or over a limit (INVALID_ARGUMENT)",
    ),
    (
        "workspace.unknown_tool",
        ErrorClass::InvalidInput,
        "Execute named a tool the workspace service does not execute (INVALID_ARGUMENT)",
    ),
    (
        "workspace.run_not_found",
        ErrorClass::System,
        "no run workspace with that id in that cell (NOT_FOUND)",
    ),
    (
        "workspace.run_exists",
        ErrorClass::System,
        "CreateRunWorkspace for a run id that exists with another manifest (ALREADY_EXISTS)",
    ),
    (
        "workspace.run_finished",
        ErrorClass::System,
        "a mutation of a sealed run workspace (FAILED_PRECONDITION)",
    ),
    (
        "workspace.stale_epoch",
        ErrorClass::System,
        "a mutating request carries an older run lease epoch than the run's (FAILED_PRECONDITION)",
    ),
    (
        "workspace.lease_held",
        ErrorClass::System,
        "AcquireRunLease while another holder's lease on the run is live (FAILED_PRECONDITION)",
    ),
    (
        "workspace.lease_not_found",
        ErrorClass::System,
        "RenewRunLease for a run that has no lease (NOT_FOUND)",
    ),
    (
        "workspace.invocation_not_open",
        ErrorClass::System,
        "a tool call for an invocation without OpenInvocationWorkspace (FAILED_PRECONDITION)",
    ),
    (
        "workspace.audit_exists",
        ErrorClass::System,
        "a create-only audit object (put alone or carried by a journal append) already exists with other bytes, or collides with another object's path, or a file is at that `summaries/<invocation>-result.md` (written by a model before the name was reserved; never taken for the object, even with the same bytes); nothing was written (ALREADY_EXISTS)",
    ),
    (
        "workspace.journal_conflict",
        ErrorClass::System,
        "a journal append's sequence number is taken or not next (ABORTED)",
    ),
    (
        "workspace.persist_conflict",
        ErrorClass::System,
        "the chat's `persist/` changed since the run started; promotion refused (FAILED_PRECONDITION)",
    ),
    (
        "workspace.commit_source_invalid",
        ErrorClass::System,
        "CommitRunMessage's file is missing, a folder, not text, empty or changed (FAILED_PRECONDITION)",
    ),
    (
        "workspace.chat_conflict",
        ErrorClass::System,
        "AppendChatMessage's expected index does not match the chat (ABORTED)",
    ),
    (
        "workspace.not_found",
        ErrorClass::System,
        "GetObject / ReadFile / a chat or skill of a storage RPC does not exist (NOT_FOUND)",
    ),
    (
        "skill.exists",
        ErrorClass::System,
        "ImportSkill of an installed name without `replace` (ALREADY_EXISTS)",
    ),
    (
        "skill.import_failed",
        ErrorClass::InvalidInput,
        "the skill folder has no SKILL.md, is over a limit, or cannot be read (INVALID_ARGUMENT)",
    ),
    (
        "skill.path_not_allowed",
        ErrorClass::PolicyDenied,
        "ImportSkill of a folder outside the workspace's skill_import_roots (PERMISSION_DENIED)",
    ),
    (
        "workspace.escape",
        ErrorClass::System,
        "a symlink or special file inside the workspace store; never followed (INTERNAL)",
    ),
    (
        "workspace.journal_unavailable",
        ErrorClass::System,
        "the journal log failed to write or sync; appends are refused until restart (UNAVAILABLE)",
    ),
    (
        "workspace.io",
        ErrorClass::System,
        "the storage under the service failed (INTERNAL)",
    ),
    (
        "skill.missing_description",
        ErrorClass::Recoverable,
        "warning of ImportSkill: SKILL.md's front matter has no description; the skill is imported",
    ),
    (
        "skill.invalid_name",
        ErrorClass::Recoverable,
        "warning of ImportSkill: a file name in the skill folder is not UTF-8; the file is skipped",
    ),
    (
        "skill.symlink_refused",
        ErrorClass::Recoverable,
        "warning of ImportSkill: a symlink in the skill folder is never followed; it is skipped",
    ),
    (
        "skill.binary_skipped",
        ErrorClass::Recoverable,
        "warning of ImportSkill: a file is not UTF-8 text; it is skipped",
    ),
    (
        "config.unreadable",
        ErrorClass::InvalidInput,
        "the service's configuration file cannot be read; the service does not start",
    ),
    (
        "config.invalid",
        ErrorClass::InvalidInput,
        "the service's configuration (file or flags) is invalid; the service does not start",
    ),
];

/// Every failure of the workspace service. The `Display` text starts with the stable code.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    /// A failure the model can read and act on: answered as a tool result with `is_error`.
    #[error("{code}: {message}")]
    Tool { code: &'static str, message: String },
    /// A failure of a request that is not a tool call, or of the plane itself: a gRPC status.
    #[error("{code}: {message}")]
    Status {
        code: &'static str,
        status: tonic::Code,
        message: String,
    },
}

impl WsError {
    /// A recoverable tool error.
    pub fn tool(code: &'static str, message: impl Into<String>) -> WsError {
        WsError::Tool {
            code,
            message: message.into(),
        }
    }

    /// A status failure with an explicit gRPC code.
    pub fn status(code: &'static str, status: tonic::Code, message: impl Into<String>) -> WsError {
        WsError::Status {
            code,
            status,
            message: message.into(),
        }
    }

    pub fn invalid_request(message: impl Into<String>) -> WsError {
        WsError::status(
            "workspace.invalid_request",
            tonic::Code::InvalidArgument,
            message,
        )
    }

    pub fn io(message: impl Into<String>) -> WsError {
        WsError::status("workspace.io", tonic::Code::Internal, message)
    }

    pub fn escape(message: impl Into<String>) -> WsError {
        WsError::status("workspace.escape", tonic::Code::Internal, message)
    }

    pub fn not_found(message: impl Into<String>) -> WsError {
        WsError::status("workspace.not_found", tonic::Code::NotFound, message)
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            WsError::Tool { code, .. } | WsError::Status { code, .. } => code,
        }
    }

    /// True for errors the model should see as a tool result.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, WsError::Tool { .. })
    }

    /// The message without the code.
    pub fn message(&self) -> &str {
        match self {
            WsError::Tool { message, .. } | WsError::Status { message, .. } => message,
        }
    }

    /// The gRPC status of a non-tool failure (a tool error reaching here is an internal bug in
    /// routing, reported as such rather than hidden).
    pub fn to_status(&self) -> tonic::Status {
        let code = match self {
            WsError::Status { status, .. } => *status,
            WsError::Tool { .. } => tonic::Code::FailedPrecondition,
        };
        let details = toolplane_proto::status::Details::new().meta("service", "workspace");
        toolplane_proto::status::status(code, self.code(), self.message(), details)
    }
}

impl From<WsError> for tonic::Status {
    fn from(error: WsError) -> tonic::Status {
        error.to_status()
    }
}

impl From<StoreError> for WsError {
    fn from(error: StoreError) -> WsError {
        match &error {
            StoreError::Escape { what, .. } => {
                // The host path goes to the operator's log, never into a message.
                tracing::error!(%error, "the store refused to follow a path");
                WsError::escape(format!("the store found {what} and did not follow it"))
            }
            StoreError::TooLarge { size, limit, .. } => WsError::status(
                "workspace.invalid_request",
                tonic::Code::InvalidArgument,
                format!("{size} bytes exceed the store's limit of {limit} bytes"),
            ),
            // A backend's own words (a file path, an S3 URL, a database's message) go to the
            // operator's log; the message names the failed step and the IO error's kind.
            StoreError::Io { what, source } => {
                tracing::error!(%error, "the store failed");
                WsError::io(format!(
                    "the store's {} failed ({}); the workspace's log has the details",
                    what.split(' ').take(2).collect::<Vec<_>>().join(" "),
                    source.kind()
                ))
            }
            // The key (the store's layout, with the run's paths in it) goes to the log too.
            StoreError::InvalidKey { reason, .. } => {
                tracing::error!(%error, "the store refused a key");
                WsError::io(format!("the store refused a key ({reason})"))
            }
            _ => {
                tracing::error!(%error, "the store failed");
                WsError::io(format!(
                    "{}; the workspace's log has the details",
                    error.code()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_well_formed_and_documented() {
        let doc = include_str!("../../../docs/errors.md");
        let mut seen = std::collections::HashSet::new();
        for (code, _, _) in CODES {
            assert!(seen.insert(code), "duplicate {code}");
            let (ns, name) = code.split_once('.').unwrap();
            assert!(!ns.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            assert!(
                doc.contains(&format!("| `{code}` |")),
                "{code} missing in docs/errors.md"
            );
        }
    }
}
