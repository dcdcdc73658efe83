//! The catalog's one error type and its table of codes.
//!
//! Owns the `catalog.*`, `profile.*` and `policy.*` codes this service adds to the core's table,
//! the diagnostic codes its listings carry, and the one mapping from an error to a gRPC status
//! and an HTTP status. It must never decide by message text: the code decides.

use toolplane_core::error::{CoreError, ErrorClass};
use toolplane_store::StoreError;

/// A code this service adds to the core's table (`docs/errors.md`, section "catalog").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CatalogCode {
    InvalidRequest,
    ToolNotFound,
    HostNotFound,
    GenerationConflict,
    InvalidRegistration,
    LimitExceeded,
    CorruptRecord,
    ConfigInvalid,
    Io,
    ProfileNotFound,
    ProfileVersionConflict,
    ProfileFileInvalid,
    PolicyInvalid,
    PolicyVersionConflict,
}

/// One row of the catalog's code table.
#[derive(Debug, Clone, Copy)]
pub struct CodeRow {
    pub code: CatalogCode,
    pub meaning: &'static str,
}

/// Every error code the catalog adds, in documentation order. `docs/errors.md` has one row for
/// each (a test keeps them in step).
pub const CODES: &[CodeRow] = &[
    CodeRow {
        code: CatalogCode::InvalidRequest,
        meaning: "a request field is malformed or over its limit (cell or actor id, page size or token, filter, query)",
    },
    CodeRow {
        code: CatalogCode::ToolNotFound,
        meaning: "`GetTool` or `DescribeTools` named a tool id the cell's catalog does not have",
    },
    CodeRow {
        code: CatalogCode::HostNotFound,
        meaning: "`DeregisterTools` named an external tool host that is not registered",
    },
    CodeRow {
        code: CatalogCode::GenerationConflict,
        meaning: "a registration's `expected_generation` is not the host's current generation; nothing was changed",
    },
    CodeRow {
        code: CatalogCode::InvalidRegistration,
        meaning: "a tool host registration is malformed: host id, display name, endpoint URL or headers, or too many tools or bytes",
    },
    CodeRow {
        code: CatalogCode::LimitExceeded,
        meaning: "the cell already has the most hosts, profiles or cells the catalog is configured for, or a response would be too large",
    },
    CodeRow {
        code: CatalogCode::CorruptRecord,
        meaning: "a stored profile, policy or registration could not be read back; the store holds something the catalog did not write",
    },
    CodeRow {
        code: CatalogCode::ConfigInvalid,
        meaning: "the service configuration (file, flags, environment) is invalid; the service does not start",
    },
    CodeRow {
        code: CatalogCode::Io,
        meaning: "a listener could not be bound or a server failed while serving",
    },
    CodeRow {
        code: CatalogCode::ProfileNotFound,
        meaning: "the named profile does not exist in the cell",
    },
    CodeRow {
        code: CatalogCode::ProfileVersionConflict,
        meaning: "a profile write's `expected_version` is not the stored version (0: the profile already exists); nothing was changed",
    },
    CodeRow {
        code: CatalogCode::ProfileFileInvalid,
        meaning: "a profile file in the start-up directory cannot be read or is not a valid profile; the service does not start",
    },
    CodeRow {
        code: CatalogCode::PolicyInvalid,
        meaning: "a platform or user policy document is not valid JSON, has an unknown field or a bad selector",
    },
    CodeRow {
        code: CatalogCode::PolicyVersionConflict,
        meaning: "a policy write's `expected_version` is not the stored version; nothing was changed",
    },
];

impl CatalogCode {
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogCode::InvalidRequest => "catalog.invalid_request",
            CatalogCode::ToolNotFound => "catalog.tool_not_found",
            CatalogCode::HostNotFound => "catalog.host_not_found",
            CatalogCode::GenerationConflict => "catalog.generation_conflict",
            CatalogCode::InvalidRegistration => "catalog.invalid_registration",
            CatalogCode::LimitExceeded => "catalog.limit_exceeded",
            CatalogCode::CorruptRecord => "catalog.corrupt_record",
            CatalogCode::ConfigInvalid => "catalog.config_invalid",
            CatalogCode::Io => "catalog.io",
            CatalogCode::ProfileNotFound => "profile.not_found",
            CatalogCode::ProfileVersionConflict => "profile.version_conflict",
            CatalogCode::ProfileFileInvalid => "profile.file_invalid",
            CatalogCode::PolicyInvalid => "policy.invalid",
            CatalogCode::PolicyVersionConflict => "policy.version_conflict",
        }
    }

    pub fn class(self) -> ErrorClass {
        match self {
            CatalogCode::CorruptRecord | CatalogCode::Io => ErrorClass::System,
            _ => ErrorClass::InvalidInput,
        }
    }

    fn grpc(self) -> tonic::Code {
        use tonic::Code;
        match self {
            CatalogCode::InvalidRequest
            | CatalogCode::InvalidRegistration
            | CatalogCode::ConfigInvalid
            | CatalogCode::ProfileFileInvalid
            | CatalogCode::PolicyInvalid => Code::InvalidArgument,
            CatalogCode::ToolNotFound
            | CatalogCode::HostNotFound
            | CatalogCode::ProfileNotFound => Code::NotFound,
            CatalogCode::GenerationConflict
            | CatalogCode::ProfileVersionConflict
            | CatalogCode::PolicyVersionConflict => Code::Aborted,
            CatalogCode::LimitExceeded => Code::ResourceExhausted,
            CatalogCode::CorruptRecord => Code::Internal,
            CatalogCode::Io => Code::Unavailable,
        }
    }
}

impl std::fmt::Display for CatalogCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Diagnostic codes: notes in listings and source states, never RPC failures.
pub mod diag {
    /// The mcp-proxy could not be reached or answered with an error; its last known tools stay.
    pub const MCP_UNAVAILABLE: &str = "catalog.mcp_unavailable";
    /// No mcp-proxy address is configured, so the catalog has no MCP tools.
    pub const MCP_NOT_CONFIGURED: &str = "catalog.mcp_not_configured";
    /// A source contributed an id another source already contributed; the later one is left out.
    pub const DUPLICATE_ID: &str = "tool.duplicate_id";
    /// A source gave a descriptor the catalog cannot use; the tool is left out.
    pub const INVALID_DESCRIPTOR: &str = "tool.invalid_descriptor";
    /// `builtin:task.return` is listed for reference; the runtime injects it, profiles cannot.
    pub const RUNTIME_ONLY: &str = "catalog.runtime_only";
    /// A profile or policy selector matches no tool of the catalog yet.
    pub const PROFILE_SELECTOR_MATCHES_NOTHING: &str = "profile.selector_matches_nothing";
    /// A policy selector matches no tool of the catalog yet.
    pub const POLICY_SELECTOR_MATCHES_NOTHING: &str = "policy.selector_matches_nothing";
    /// A registration's declared category differs from what its `readOnlyHint` suggests.
    pub const CATEGORY_DISAGREES_WITH_HINT: &str = "catalog.category_disagrees_with_hint";
    /// An MCP tool with permission ASK: each call is held for approval (the
    /// mcp-proxy's own code, added by the catalog when the proxy did not say so).
    pub const MCP_PERMISSION_ASK: &str = "mcp.permission_ask";
    /// A sub-agent tool whose profile has no model endpoint.
    pub const NO_MODEL_ENDPOINT: &str = "catalog.no_model_endpoint";
    /// A tool a profile names is not in the catalog (MCP selectors: `mcp.tool_missing`).
    pub const TOOL_MISSING: &str = "catalog.tool_missing";
    pub const MCP_TOOL_MISSING: &str = "mcp.tool_missing";
    pub const MCP_SERVER_PAUSED: &str = "mcp.server_paused";
    pub const MCP_PERMISSION_OFF: &str = "mcp.permission_off";
    pub const MCP_NO_CACHE: &str = "mcp.no_cache";
    pub const MCP_REGISTRATION_CORRUPT: &str = "mcp.registration_corrupt";
    pub const MCP_TASK_REQUIRED: &str = "mcp.task_required";
    pub const INVALID_SCHEMA: &str = "tool.invalid_schema";
    pub const POLICY_DENIED: &str = "policy.denied";
    pub const TOOL_OMITTED: &str = "snapshot.tool_omitted";

    /// Every diagnostic code with its meaning, as `docs/catalog.md` lists them.
    pub const ALL: &[(&str, &str)] = &[
        (
            MCP_UNAVAILABLE,
            "the mcp-proxy could not be read at the last refresh; the last known MCP tools stay listed",
        ),
        (MCP_NOT_CONFIGURED, "no mcp-proxy address is configured"),
        (
            DUPLICATE_ID,
            "a source contributed an id that another source already contributes; the message names both",
        ),
        (
            INVALID_DESCRIPTOR,
            "a source gave a descriptor the catalog cannot use",
        ),
        (
            RUNTIME_ONLY,
            "`builtin:task.return`: injected by the runtime into return-mode children, never allowed by a profile",
        ),
        (
            PROFILE_SELECTOR_MATCHES_NOTHING,
            "a profile selector matches no tool yet (tools may appear later)",
        ),
        (
            POLICY_SELECTOR_MATCHES_NOTHING,
            "a policy selector matches no tool yet",
        ),
        (
            CATEGORY_DISAGREES_WITH_HINT,
            "a registration declares a category that its `readOnlyHint` contradicts; the declaration wins",
        ),
        (
            MCP_PERMISSION_ASK,
            "permission ASK: each call is held for approval before it runs",
        ),
        (
            NO_MODEL_ENDPOINT,
            "a sub-agent tool whose profile has no `model` endpoint: it cannot run delegated work",
        ),
        (
            TOOL_MISSING,
            "a tool the profile names is not in the catalog",
        ),
        (
            MCP_TOOL_MISSING,
            "an MCP tool the profile names is not in any server's cache",
        ),
        (MCP_SERVER_PAUSED, "the MCP server is paused"),
        (MCP_PERMISSION_OFF, "the MCP tool's permission is OFF"),
        (MCP_NO_CACHE, "the MCP server has no cached tool list"),
        (
            MCP_REGISTRATION_CORRUPT,
            "the MCP registration could not be read by the mcp-proxy",
        ),
        (
            MCP_TASK_REQUIRED,
            "the MCP server runs the tool only as an MCP task (`execution.taskSupport: required`), which toolplane does not run",
        ),
        (
            INVALID_SCHEMA,
            "the tool's input schema is not an object schema",
        ),
        (
            POLICY_DENIED,
            "a user, platform, plan-node or profile rule leaves the tool out; the message names the layer and selector",
        ),
        (
            TOOL_OMITTED,
            "the tool is left out by the invocation's exit policy",
        ),
    ];
}

/// Everything the catalog can fail with. `Display` starts with the stable code.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A core rule refused the input (a tool id, a descriptor, a profile, a duplicate id).
    #[error("{0}")]
    Core(#[from] CoreError),
    /// The store failed or refused an operation.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// One of the catalog's own codes.
    #[error("{code}: {message}")]
    Coded { code: CatalogCode, message: String },
}

impl CatalogError {
    pub fn new(code: CatalogCode, message: impl Into<String>) -> Self {
        CatalogError::Coded {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        CatalogError::new(CatalogCode::InvalidRequest, message)
    }

    /// The stable code string.
    pub fn code(&self) -> &'static str {
        match self {
            CatalogError::Core(e) => e.code.as_str(),
            CatalogError::Store(e) => e.code(),
            CatalogError::Coded { code, .. } => code.as_str(),
        }
    }

    /// The gRPC status code this error maps to.
    pub fn grpc_code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            CatalogError::Core(e) => match e.class() {
                ErrorClass::InvalidInput => Code::InvalidArgument,
                ErrorClass::PolicyDenied => Code::PermissionDenied,
                ErrorClass::ProviderContract => Code::FailedPrecondition,
                ErrorClass::Recoverable | ErrorClass::System => Code::Internal,
            },
            CatalogError::Store(e) => match e {
                StoreError::TooLarge { .. } => Code::InvalidArgument,
                StoreError::Conflict { .. } | StoreError::AlreadyExists { .. } => Code::Aborted,
                StoreError::Io { .. } => Code::Unavailable,
                _ => Code::Internal,
            },
            CatalogError::Coded { code, .. } => code.grpc(),
        }
    }

    /// The HTTP status of the same error for the REST listing.
    pub fn http_status(&self) -> http::StatusCode {
        use http::StatusCode;
        match self.grpc_code() {
            // A limit hit by a read (a description text too large, too many cells) is fixed by
            // asking differently, like any other bad request; the code in the body says which.
            tonic::Code::InvalidArgument
            | tonic::Code::FailedPrecondition
            | tonic::Code::ResourceExhausted => StatusCode::BAD_REQUEST,
            tonic::Code::NotFound => StatusCode::NOT_FOUND,
            tonic::Code::Aborted => StatusCode::CONFLICT,
            tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
            tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<CatalogError> for tonic::Status {
    fn from(e: CatalogError) -> Self {
        if matches!(
            e.grpc_code(),
            tonic::Code::Internal | tonic::Code::Unavailable
        ) {
            tracing::error!(code = e.code(), error = %e, "request failed");
        }
        let code = e.grpc_code();
        let message = match &e {
            CatalogError::Core(core) => core.message.clone(),
            CatalogError::Coded { message, .. } => message.clone(),
            CatalogError::Store(store) => store.to_string(),
        };
        let mut details = toolplane_proto::status::Details::new().meta("service", "catalog");
        if let CatalogError::Store(StoreError::TooLarge { limit, .. }) = &e {
            details = details.meta("limit", limit.to_string());
        }
        toolplane_proto::status::status(code, e.code(), &message, details)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// `docs/errors.md` lists every catalog code with its class, and each code appears once.
    #[test]
    fn docs_errors_md_lists_every_catalog_code() {
        let doc = include_str!("../../../docs/errors.md");
        let mut seen = HashSet::new();
        for row in CODES {
            assert!(seen.insert(row.code.as_str()), "{} twice", row.code);
            let line = format!(
                "| `{}` | {} |",
                row.code.as_str(),
                row.code.class().as_str()
            );
            assert!(doc.contains(&line), "docs/errors.md misses `{line}`");
        }
    }

    /// `docs/catalog.md` lists every diagnostic code.
    #[test]
    fn docs_catalog_md_lists_every_diagnostic() {
        let doc = include_str!("../../../docs/catalog.md");
        for (code, _) in diag::ALL {
            assert!(
                doc.contains(&format!("| `{code}` |")),
                "docs/catalog.md misses `{code}`"
            );
        }
    }

    /// A core error whose text already starts with its code states it once.
    #[test]
    fn statuses_state_the_code_once_and_carry_it_as_error_info() {
        let core = CoreError::new(
            toolplane_core::error::PROFILE_INVALID_SELECTOR,
            "profile.invalid_selector: `mcp:` names no server",
        );
        let status = tonic::Status::from(CatalogError::Core(core));
        assert_eq!(
            status.message(),
            "profile.invalid_selector: `mcp:` names no server"
        );
        assert_eq!(
            toolplane_proto::status::error_code(&status).as_deref(),
            Some("profile.invalid_selector")
        );
        assert!(!status.details().is_empty());
    }

    #[test]
    fn statuses_start_with_the_code() {
        let e = CatalogError::new(
            CatalogCode::ProfileNotFound,
            "no profile `x` in cell `default`",
        );
        let status = tonic::Status::from(e);
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(status.message().starts_with("profile.not_found: "));
    }
}
