//! MCP server registrations: what the proxy stores about a server, how it is
//! validated, and the limits every registration runs under.
//!
//! A [`Registration`] is the durable, versioned record of one server: display name, transport,
//! state, limits, the default permission for newly discovered tools and each tool's permission.
//! This module owns validation of operator input (every string and collection has a limit) and the
//! permission lookup; it never connects to anything and never touches storage.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolplane_core::catalog::McpPermission;

use crate::error::{MCP_INVALID_REGISTRATION, MCP_INVALID_REQUEST, ProxyError};

/// Format version of the stored registration record.
pub const REGISTRATION_FORMAT: u32 = 1;
/// The cell used when a request leaves `cell_id` empty.
pub const DEFAULT_CELL: &str = "default";

/// What answers show in place of an inline environment or header value; an update that sends it
/// back keeps the stored value (see [`keep_redacted`]).
pub const REDACTED: &str = "<redacted>";

/// Longest display name, in bytes.
pub const MAX_DISPLAY_NAME_BYTES: usize = 64;
/// Longest command, argument, URL, header value or environment value, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;
/// Most arguments of a stdio command.
pub const MAX_ARGS: usize = 128;
/// Most environment variables, inherited variables, headers or header variables.
pub const MAX_MAP_ENTRIES: usize = 64;
/// Most per-tool permissions stored on one registration.
pub const MAX_TOOL_PERMISSIONS: usize = 20_000;

/// The administrative state of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    Active,
    Paused,
}

/// How the proxy reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TransportSpec {
    /// A child process speaking MCP over stdin/stdout; stderr goes to the proxy's logs.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default)]
        inherit_env: Vec<String>,
        #[serde(default)]
        cwd: Option<String>,
    },
    /// A remote server over streamable HTTP.
    StreamableHttp {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        #[serde(default)]
        header_env: BTreeMap<String, String>,
    },
}

impl TransportSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            TransportSpec::Stdio { .. } => "stdio",
            TransportSpec::StreamableHttp { .. } => "streamable_http",
        }
    }
}

/// Per-registration limits as requested; `0` means "use the proxy's default".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestedLimits {
    #[serde(default)]
    pub connect_timeout_ms: u64,
    #[serde(default)]
    pub call_timeout_ms: u64,
    #[serde(default)]
    pub max_concurrent_calls: u32,
    #[serde(default)]
    pub max_tools: u32,
    #[serde(default)]
    pub max_response_bytes: u64,
}

/// The proxy-wide defaults and ceilings for [`RequestedLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitDefaults {
    /// Start + initialize timeout (default 20 s).
    pub connect_timeout_ms: u64,
    /// Per-call timeout when neither the request nor the registration says (default 60 s).
    pub call_timeout_ms: u64,
    /// Calls in flight per server (default 16).
    pub max_concurrent_calls: u32,
    /// Tools kept in one server's cache (default 2,000; at most 50,000).
    pub max_tools: u32,
    /// Serialized bytes of one server's cached catalog (default 8 MiB).
    pub max_catalog_bytes: u64,
    /// Largest tool response accepted (default 4 MiB; at most 64 MiB).
    pub max_response_bytes: u64,
}

impl Default for LimitDefaults {
    fn default() -> LimitDefaults {
        LimitDefaults {
            connect_timeout_ms: 20_000,
            call_timeout_ms: 60_000,
            max_concurrent_calls: 16,
            max_tools: 2_000,
            max_catalog_bytes: 8 * 1024 * 1024,
            max_response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Ceilings no registration may exceed.
const MAX_TIMEOUT_MS: u64 = 3_600_000;
const MAX_CONCURRENT_CALLS: u32 = 1_024;
const MAX_TOOLS: u32 = 50_000;
const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// The limits a registration runs under, after defaults are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    pub max_concurrent_calls: u32,
    pub max_tools: u32,
    pub max_catalog_bytes: u64,
    pub max_response_bytes: u64,
}

impl RequestedLimits {
    /// Refuses values over the ceilings.
    pub fn validate(&self) -> Result<(), ProxyError> {
        let bad = |what: &str, max: u64| {
            Err(ProxyError::new(
                MCP_INVALID_REGISTRATION,
                format!("limit {what} is over its maximum of {max}"),
            ))
        };
        if self.connect_timeout_ms > MAX_TIMEOUT_MS {
            return bad("connect_timeout_ms", MAX_TIMEOUT_MS);
        }
        if self.call_timeout_ms > MAX_TIMEOUT_MS {
            return bad("call_timeout_ms", MAX_TIMEOUT_MS);
        }
        if self.max_concurrent_calls > MAX_CONCURRENT_CALLS {
            return bad("max_concurrent_calls", u64::from(MAX_CONCURRENT_CALLS));
        }
        if self.max_tools > MAX_TOOLS {
            return bad("max_tools", u64::from(MAX_TOOLS));
        }
        if self.max_response_bytes > MAX_RESPONSE_BYTES {
            return bad("max_response_bytes", MAX_RESPONSE_BYTES);
        }
        Ok(())
    }

    /// The effective limits: each `0` replaced by the default.
    pub fn resolve(&self, defaults: &LimitDefaults) -> Limits {
        let pick = |v: u64, d: u64| if v == 0 { d } else { v };
        let pick32 = |v: u32, d: u32| if v == 0 { d } else { v };
        Limits {
            connect_timeout: Duration::from_millis(pick(
                self.connect_timeout_ms,
                defaults.connect_timeout_ms,
            )),
            call_timeout: Duration::from_millis(pick(
                self.call_timeout_ms,
                defaults.call_timeout_ms,
            )),
            max_concurrent_calls: pick32(self.max_concurrent_calls, defaults.max_concurrent_calls)
                .max(1),
            max_tools: pick32(self.max_tools, defaults.max_tools).max(1),
            max_catalog_bytes: defaults.max_catalog_bytes.max(1),
            max_response_bytes: pick(self.max_response_bytes, defaults.max_response_bytes).max(1),
        }
    }
}

/// One server registration as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub format: u32,
    pub cell_id: String,
    pub server_id: String,
    pub display_name: String,
    pub transport: TransportSpec,
    pub state: ServerState,
    pub limits: RequestedLimits,
    pub default_permission: McpPermission,
    /// Per-tool permissions by native name; tools without an entry use `default_permission`.
    pub tool_permissions: BTreeMap<String, McpPermission>,
    pub generation: u64,
    pub created_at_unix_ms: i64,
    pub updated_at_unix_ms: i64,
}

impl Registration {
    /// The permission a tool runs under.
    pub fn permission_of(&self, native: &str) -> McpPermission {
        self.tool_permissions
            .get(native)
            .copied()
            .unwrap_or(self.default_permission)
    }
}

/// Validates a cell id (empty selects [`DEFAULT_CELL`]) and returns the one to use.
pub fn cell_or_default(cell_id: &str) -> Result<String, ProxyError> {
    cell_ref(cell_id).map(str::to_owned)
}

/// [`cell_or_default`] without the copy, for the call path.
pub fn cell_ref(cell_id: &str) -> Result<&str, ProxyError> {
    if cell_id.is_empty() {
        return Ok(DEFAULT_CELL);
    }
    toolplane_core::id::valid_segment(cell_id)
        .map(|()| cell_id)
        .map_err(|why| {
            ProxyError::new(
                MCP_INVALID_REQUEST,
                format!("cell id `{}`: {why}", shown(cell_id)),
            )
        })
}

/// Validates a registration id: a lowercase hyphenated UUID.
pub fn parse_server_id(server_id: &str) -> Result<String, ProxyError> {
    match uuid::Uuid::parse_str(server_id) {
        Ok(u) if u.hyphenated().to_string() == server_id => Ok(server_id.to_owned()),
        _ => Err(ProxyError::new(
            MCP_INVALID_REQUEST,
            format!(
                "server id `{}` is not a lowercase hyphenated uuid",
                shown(server_id)
            ),
        )),
    }
}

/// Validates a display name: 1–64 bytes, no control characters, no `/` (it separates the server
/// from the tool in `mcp:<server name>/<tool>` selectors), no leading or trailing whitespace.
pub fn validate_display_name(name: &str) -> Result<(), ProxyError> {
    let why = if name.is_empty() {
        Some("is empty")
    } else if name.len() > MAX_DISPLAY_NAME_BYTES {
        Some("is longer than 64 bytes")
    } else if name.chars().any(char::is_control) {
        Some("contains control characters")
    } else if name.contains('/') {
        Some("contains `/`, which separates server and tool in selectors")
    } else if name.trim() != name {
        Some("starts or ends with whitespace")
    } else {
        None
    };
    match why {
        Some(why) => Err(ProxyError::new(
            MCP_INVALID_REGISTRATION,
            format!("display name `{}` {why}", shown(name)),
        )),
        None => Ok(()),
    }
}

fn check_value(what: &str, value: &str) -> Result<(), ProxyError> {
    if value.len() > MAX_VALUE_BYTES || value.contains('\0') {
        return Err(ProxyError::new(
            MCP_INVALID_REGISTRATION,
            format!("{what} is over {MAX_VALUE_BYTES} bytes or contains NUL"),
        ));
    }
    Ok(())
}

fn check_env_name(what: &str, name: &str) -> Result<(), ProxyError> {
    let ok = !name.is_empty()
        && name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ProxyError::new(
            MCP_INVALID_REGISTRATION,
            format!(
                "{what} `{}` is not a valid environment variable name",
                shown(name)
            ),
        ))
    }
}

/// Validates a transport: a non-empty command for stdio, an `http(s)://` URL for streamable HTTP,
/// valid header names and values, bounded sizes everywhere.
pub fn validate_transport(transport: &TransportSpec) -> Result<(), ProxyError> {
    match transport {
        TransportSpec::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => {
            if command.trim().is_empty() {
                return Err(ProxyError::new(
                    MCP_INVALID_REGISTRATION,
                    "stdio transport needs a command",
                ));
            }
            check_value("command", command)?;
            if args.len() > MAX_ARGS {
                return Err(ProxyError::new(
                    MCP_INVALID_REGISTRATION,
                    format!("more than {MAX_ARGS} arguments"),
                ));
            }
            for a in args {
                check_value("an argument", a)?;
            }
            if env.len() > MAX_MAP_ENTRIES || inherit_env.len() > MAX_MAP_ENTRIES {
                return Err(ProxyError::new(
                    MCP_INVALID_REGISTRATION,
                    format!("more than {MAX_MAP_ENTRIES} environment entries"),
                ));
            }
            for (k, v) in env {
                check_env_name("env", k)?;
                check_value("an environment value", v)?;
            }
            for k in inherit_env {
                check_env_name("inherit_env", k)?;
            }
            if let Some(cwd) = cwd {
                check_value("cwd", cwd)?;
            }
            Ok(())
        }
        TransportSpec::StreamableHttp {
            url,
            headers,
            header_env,
        } => {
            check_value("url", url)?;
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            let host_ok = url
                .split_once("://")
                .map(|(_, rest)| rest)
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
            if !scheme_ok || !host_ok || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(ProxyError::new(
                    MCP_INVALID_REGISTRATION,
                    format!("url `{}` is not an http:// or https:// URL", shown(url)),
                ));
            }
            if headers.len() > MAX_MAP_ENTRIES || header_env.len() > MAX_MAP_ENTRIES {
                return Err(ProxyError::new(
                    MCP_INVALID_REGISTRATION,
                    format!("more than {MAX_MAP_ENTRIES} headers"),
                ));
            }
            for (name, value) in headers {
                check_header(name)?;
                check_value("a header value", value)?;
                if http::HeaderValue::from_str(value).is_err() {
                    return Err(ProxyError::new(
                        MCP_INVALID_REGISTRATION,
                        format!("header `{name}` has a value that is not a valid header value"),
                    ));
                }
            }
            for (name, var) in header_env {
                check_header(name)?;
                check_env_name("header_env", var)?;
            }
            Ok(())
        }
    }
}

/// Puts the stored values back where an update sent [`REDACTED`] for an inline environment or
/// header value of the same name, so a registration read, edited and written back keeps its
/// secrets. A redacted value with no stored counterpart stays as sent.
pub fn keep_redacted(new: &mut TransportSpec, old: &TransportSpec) {
    let restore = |new: &mut BTreeMap<String, String>, old: &BTreeMap<String, String>| {
        for (k, v) in new.iter_mut() {
            if v == REDACTED
                && let Some(stored) = old.get(k)
            {
                v.clone_from(stored);
            }
        }
    };
    match (new, old) {
        (TransportSpec::Stdio { env: new, .. }, TransportSpec::Stdio { env: old, .. }) => {
            restore(new, old)
        }
        (
            TransportSpec::StreamableHttp { headers: new, .. },
            TransportSpec::StreamableHttp { headers: old, .. },
        ) => restore(new, old),
        _ => {}
    }
}

fn check_header(name: &str) -> Result<(), ProxyError> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(ProxyError::new(
            MCP_INVALID_REGISTRATION,
            format!("`{}` is not a valid header name", shown(name)),
        ));
    }
    Ok(())
}

/// A string cut to 80 characters for messages.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn display_names() {
        for ok in ["github", "My Server", "docs-v2", "ü"] {
            validate_display_name(ok).unwrap();
        }
        for bad in ["", " x", "x ", "a/b", "a\nb", &"x".repeat(65)] {
            let e = validate_display_name(bad).unwrap_err();
            assert_eq!(e.code, MCP_INVALID_REGISTRATION, "{bad:?}");
        }
    }

    #[test]
    fn transports() {
        let stdio = |command: &str| TransportSpec::Stdio {
            command: command.into(),
            args: vec![],
            env: BTreeMap::new(),
            inherit_env: vec![],
            cwd: None,
        };
        validate_transport(&stdio("node")).unwrap();
        assert!(validate_transport(&stdio(" ")).is_err());
        let http = |url: &str, header: (&str, &str)| TransportSpec::StreamableHttp {
            url: url.into(),
            headers: BTreeMap::from([(header.0.to_owned(), header.1.to_owned())]),
            header_env: BTreeMap::new(),
        };
        validate_transport(&http("http://127.0.0.1:3001/mcp", ("x-a", "b"))).unwrap();
        for (url, h) in [
            ("ftp://x", ("x-a", "b")),
            ("http://", ("x-a", "b")),
            ("http:///x", ("x-a", "b")),
            ("http://x y", ("x-a", "b")),
            ("http://x", ("bad header", "b")),
            ("http://x", ("x-a", "b\nc")),
        ] {
            assert!(validate_transport(&http(url, h)).is_err(), "{url} {h:?}");
        }
    }

    #[test]
    fn ids_and_cells() {
        assert_eq!(cell_or_default("").unwrap(), "default");
        assert!(cell_or_default("Bad Cell").is_err());
        parse_server_id("6f1c2a0e-3b1d-4c5e-9f00-0123456789ab").unwrap();
        assert!(parse_server_id("6F1C2A0E-3B1D-4C5E-9F00-0123456789AB").is_err());
        assert!(parse_server_id("nope").is_err());
    }

    #[test]
    fn limits_resolve_defaults_and_refuse_ceilings() {
        let d = LimitDefaults::default();
        let l = RequestedLimits::default().resolve(&d);
        assert_eq!(l.call_timeout, Duration::from_secs(60));
        assert_eq!(l.max_tools, 2000);
        let r = RequestedLimits {
            max_tools: 10,
            ..Default::default()
        };
        assert_eq!(r.resolve(&d).max_tools, 10);
        assert!(
            RequestedLimits {
                max_tools: 50_001,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
    }
}
