//! The mcp-proxy's error codes (one table, [`CODES`], mirrored by `docs/errors.md`) and its one
//! error type, [`ProxyError`].
//!
//! A code's class decides what a failure means: `recoverable` and `policy_denied` codes end an
//! `Execute` call as a `ToolResult` with `is_error = true`; `invalid_input` and `system` codes are
//! gRPC statuses whose message starts with the code. Codes borrowed from `toolplane-core`
//! (`tool.invalid_arguments`, `tool.timeout`, `tool.cancelled`, `tool.invalid_id`) keep their core
//! class. This module never decides *when* an error happens, only what it is called.

use tonic::Code;
use toolplane_core::ErrorClass;

/// One code of the mcp-proxy's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyCode {
    pub code: &'static str,
    pub class: ErrorClass,
    /// When the code is used, for people.
    pub meaning: &'static str,
}

macro_rules! codes {
    ($( $name:ident = ($code:literal, $class:ident, $meaning:literal); )*) => {
        $( pub const $name: ProxyCode = ProxyCode { code: $code, class: ErrorClass::$class, meaning: $meaning }; )*
        /// Every code the mcp-proxy defines, in documentation order.
        pub const CODES: &[ProxyCode] = &[$($name),*];
    };
}

codes! {
    MCP_INVALID_REGISTRATION = ("mcp.invalid_registration", InvalidInput,
        "an UpsertServer request is malformed: empty or over-long display name, no transport, a bad command, URL, header or environment entry, a bad server id");
    MCP_DUPLICATE_DISPLAY_NAME = ("mcp.duplicate_display_name", InvalidInput,
        "another registration of the cell already uses this display name");
    MCP_GENERATION_MISMATCH = ("mcp.generation_mismatch", InvalidInput,
        "an upsert named an `expected_generation` that is not the registration's current one");
    MCP_TOO_MANY_SERVERS = ("mcp.too_many_servers", InvalidInput,
        "the cell already has the most registrations the proxy accepts");
    MCP_ENV_NOT_ALLOWED = ("mcp.env_not_allowed", InvalidInput,
        "an `inherit_env` or `header_env` entry names a variable that is not on the proxy's `env_allow` list");
    MCP_COMMAND_NOT_ALLOWED = ("mcp.command_not_allowed", PolicyDenied,
        "with authentication on, a stdio registration by a caller who is not an admin, or of a command not on the proxy's `allowed_commands` list");
    MCP_EGRESS_DENIED = ("mcp.egress_denied", PolicyDenied,
        "a streamable HTTP URL, an address its host resolves to, or a redirect it answers with is refused by the proxy's egress policy (a registration answers PERMISSION_DENIED; a connection is not made)");
    MCP_INVALID_REQUEST = ("mcp.invalid_request", InvalidInput,
        "a request field is malformed: a cell id, an unset state or permission, a tool name");
    MCP_SERVER_NOT_FOUND = ("mcp.server_not_found", Recoverable,
        "no registration has this id in the cell (an admin RPC answers NOT_FOUND; a call is not sent)");
    MCP_TOOL_NOT_FOUND = ("mcp.tool_not_found", Recoverable,
        "the registration's cached catalog has no tool of this name; the call is not sent");
    MCP_SERVER_PAUSED = ("mcp.server_paused", PolicyDenied,
        "the registration is paused; its tools are unusable and calls are not sent");
    MCP_PERMISSION_OFF = ("mcp.permission_off", PolicyDenied,
        "the tool's permission is off; it is unusable and calls are not sent");
    MCP_PERMISSION_ASK = ("mcp.permission_ask", Recoverable,
        "diagnostic: the tool's permission is ask: the runtime holds each call for approval");
    MCP_NO_CACHE = ("mcp.no_cache", Recoverable,
        "diagnostic: a permission is stored for a tool that is not in the cached catalog");
    MCP_TOOL_UNUSABLE = ("mcp.tool_unusable", Recoverable,
        "the cached tool cannot be offered (non-object input schema, over-long description); the call is not sent");
    MCP_TASK_REQUIRED = ("mcp.task_required", Recoverable,
        "the server lists the tool as runnable only as an MCP task (`execution.taskSupport: \"required\"`), which the proxy does not run: it is unusable and calls are not sent");
    MCP_INVALID_TOOL = ("mcp.invalid_tool", Recoverable,
        "diagnostic: a discovered tool was left out of the cache (its name cannot be a tool id, or it repeats an earlier name)");
    MCP_CATALOG_TRUNCATED = ("mcp.catalog_truncated", Recoverable,
        "diagnostic: discovery stopped at the registration's tool-count or catalog-byte limit");
    MCP_CONNECTION_FAILED = ("mcp.connection_failed", Recoverable,
        "the server could not be started, reached or initialized (or is waiting out a reconnect backoff); nothing was sent");
    MCP_CONNECTION_LOST = ("mcp.connection_lost", Recoverable,
        "the connection closed while the call was in flight (outcome unknown) or before it could be written (not sent)");
    MCP_SERVER_BUSY = ("mcp.server_busy", Recoverable,
        "the server's concurrent-call limit stayed full until the call's deadline; nothing was sent");
    MCP_MALFORMED_RESPONSE = ("mcp.malformed_response", Recoverable,
        "the server sent bytes that are not JSON-RPC, or a response that is not a tool result; outcome unknown");
    MCP_RESPONSE_TOO_LARGE = ("mcp.response_too_large", Recoverable,
        "the server's response is over the registration's response-size limit");
    MCP_PROTOCOL_ERROR = ("mcp.protocol_error", Recoverable,
        "the server answered the call with a JSON-RPC error (unknown tool, invalid params, internal error)");
    MCP_TOOL_ERROR = ("mcp.tool_error", Recoverable,
        "the MCP tool ran and reported an error (`isError: true`)");
    MCP_DISCOVERY_FAILED = ("mcp.discovery_failed", Recoverable,
        "listing the server's tools failed; the previous cache, if any, is kept");
    MCP_STORE_FAILED = ("mcp.store_failed", System,
        "the proxy's storage failed or holds a record it cannot read");
    MCP_SHUTTING_DOWN = ("mcp.shutting_down", System,
        "the proxy is shutting down and accepts no new calls");
    MCP_STALE_EPOCH = ("mcp.stale_epoch", System,
        "an `Execute`'s `ToolContext.epoch` is older than the newest epoch the proxy has seen for the run: another runtime drives the run; the call is not sent (FAILED_PRECONDITION, with `run_id`, `epoch` and `newest_epoch` in the ErrorInfo)");
    MCP_INVALID_CONFIG = ("mcp.invalid_config", InvalidInput,
        "the proxy's configuration file cannot be read or is invalid; the proxy does not start");
    MCP_SERVE_FAILED = ("mcp.serve_failed", System,
        "the proxy could not bind its addresses or its server failed while serving");
}

/// Codes from `toolplane-core` the proxy reports, with the classes core gives them (a test keeps
/// them equal to core's table).
pub const TOOL_INVALID_ARGUMENTS: ProxyCode = ProxyCode {
    code: "tool.invalid_arguments",
    class: ErrorClass::Recoverable,
    meaning: "see the core table",
};
pub const TOOL_TIMEOUT: ProxyCode = ProxyCode {
    code: "tool.timeout",
    class: ErrorClass::Recoverable,
    meaning: "see the core table",
};
pub const TOOL_CANCELLED: ProxyCode = ProxyCode {
    code: "tool.cancelled",
    class: ErrorClass::Recoverable,
    meaning: "see the core table",
};
pub const TOOL_INVALID_ID: ProxyCode = ProxyCode {
    code: "tool.invalid_id",
    class: ErrorClass::InvalidInput,
    meaning: "see the core table",
};

/// A page token the proxy did not issue (the code every service shares for this).
pub const REQUEST_INVALID_PAGE_TOKEN: ProxyCode = ProxyCode {
    code: "request.invalid_page_token",
    class: ErrorClass::InvalidInput,
    meaning: "see the core table",
};

/// The error type of the mcp-proxy: a code and a lowercase message. `Display` starts with the
/// code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.code)]
pub struct ProxyError {
    pub code: ProxyCode,
    pub message: String,
    /// Extra `google.rpc.ErrorInfo` metadata of the status (beside `service`).
    pub meta: Vec<(&'static str, String)>,
}

impl ProxyError {
    pub fn new(code: ProxyCode, message: impl Into<String>) -> ProxyError {
        ProxyError {
            code,
            message: message.into(),
            meta: Vec::new(),
        }
    }

    /// The same error with one more ErrorInfo metadata entry.
    #[must_use]
    pub fn with_meta(mut self, key: &'static str, value: impl Into<String>) -> ProxyError {
        self.meta.push((key, value.into()));
        self
    }

    /// The gRPC status for this error when it fails an RPC (admin RPCs, or an `Execute` that cannot
    /// produce a result). The one place codes map to `tonic::Code`.
    pub fn to_status(&self) -> tonic::Status {
        let code = match self.code.code {
            "mcp.server_not_found" => Code::NotFound,
            "mcp.duplicate_display_name" => Code::AlreadyExists,
            "mcp.generation_mismatch" => Code::FailedPrecondition,
            "mcp.too_many_servers" => Code::ResourceExhausted,
            "mcp.shutting_down" => Code::Unavailable,
            "mcp.stale_epoch" => Code::FailedPrecondition,
            "mcp.command_not_allowed" | "mcp.egress_denied" => Code::PermissionDenied,
            "mcp.store_failed" => Code::Internal,
            _ => match self.code.class {
                ErrorClass::InvalidInput => Code::InvalidArgument,
                ErrorClass::System => Code::Internal,
                ErrorClass::ProviderContract => Code::FailedPrecondition,
                ErrorClass::Recoverable | ErrorClass::PolicyDenied => Code::FailedPrecondition,
            },
        };
        let mut details = toolplane_proto::status::Details::new().meta("service", "mcp-proxy");
        for (key, value) in &self.meta {
            details = details.meta(key, value.clone());
        }
        if self.code == MCP_SERVER_BUSY {
            details = details.retry_after(std::time::Duration::from_secs(1));
        }
        toolplane_proto::status::status(code, self.code.code, &self.message, details)
    }
}

impl From<ProxyError> for tonic::Status {
    fn from(e: ProxyError) -> tonic::Status {
        e.to_status()
    }
}

impl From<toolplane_store::StoreError> for ProxyError {
    fn from(e: toolplane_store::StoreError) -> ProxyError {
        ProxyError::new(MCP_STORE_FAILED, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn codes_are_unique_namespaced_and_documented() {
        let doc = include_str!("../../../docs/errors.md");
        let mut seen = std::collections::HashSet::new();
        for c in CODES {
            assert!(seen.insert(c.code), "duplicate {}", c.code);
            assert!(c.code.starts_with("mcp."), "{}", c.code);
            assert!(
                toolplane_core::result::is_well_formed_code(c.code),
                "{}",
                c.code
            );
            let row = format!("| `{}` | {} |", c.code, c.class.as_str());
            assert!(doc.contains(&row), "docs/errors.md misses `{row}`");
        }
    }

    #[test]
    fn borrowed_core_codes_match_core() {
        for c in [
            TOOL_INVALID_ARGUMENTS,
            TOOL_TIMEOUT,
            TOOL_CANCELLED,
            TOOL_INVALID_ID,
            REQUEST_INVALID_PAGE_TOKEN,
        ] {
            let core = toolplane_core::ErrorCode::lookup(c.code).unwrap();
            assert_eq!(core.class(), c.class, "{}", c.code);
        }
    }

    #[test]
    fn display_and_status_start_with_the_code() {
        let e = ProxyError::new(MCP_SERVER_NOT_FOUND, "no server x");
        assert_eq!(e.to_string(), "mcp.server_not_found: no server x");
        let s = e.to_status();
        assert_eq!(s.code(), Code::NotFound);
        assert!(s.message().starts_with("mcp.server_not_found: "));
        let stale = ProxyError::new(MCP_STALE_EPOCH, "epoch 1 is old")
            .with_meta("newest_epoch", "2")
            .to_status();
        assert_eq!(stale.code(), Code::FailedPrecondition);
        assert_eq!(
            toolplane_proto::status::error_code(&stale).as_deref(),
            Some("mcp.stale_epoch")
        );
        assert_eq!(
            ProxyError::new(MCP_INVALID_REGISTRATION, "x")
                .to_status()
                .code(),
            Code::InvalidArgument
        );
    }
}
