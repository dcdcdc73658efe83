//! Tool identity: `ToolId = <provider>:<native>`, split at the first `:`.
//!
//! A `ToolId` is the one stable identity of a tool across sources; it never carries a model alias
//! or display name. It is opaque to everything but this module: once parsed, nothing re-splits it.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, TOOL_INVALID_ID, TOOL_RESERVED_PROVIDER};

/// Longest native tool name accepted, in bytes.
pub const MAX_NATIVE_LEN: usize = 128;
/// Longest host id (`ext/<host-id>`) or profile id (`agent/<profile-id>`), in bytes.
pub const MAX_SEGMENT_LEN: usize = 64;

/// Where a tool comes from. Each provider has exactly one executor family.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    /// Declared in code by toolplane (`builtin`).
    Builtin,
    /// A tool of an MCP registration (`mcp/<registration-uuid>`).
    Mcp(String),
    /// A tool of an external host: SDK tools, plugins, extensions, per-run tools (`ext/<host-id>`).
    Ext(String),
    /// A sub-agent offered as a tool (`agent/<profile-id>`).
    Agent(String),
}

impl Provider {
    /// Parses the provider part of a tool id.
    pub fn parse(s: &str) -> Result<Provider, CoreError> {
        if s == "builtin" {
            return Ok(Provider::Builtin);
        }
        let Some((kind, rest)) = s.split_once('/') else {
            return Err(invalid(
                s,
                "unknown provider; expected builtin, mcp/<uuid>, ext/<host-id> or agent/<profile-id>",
            ));
        };
        match kind {
            "mcp" if is_uuid(rest) => Ok(Provider::Mcp(rest.to_owned())),
            "mcp" => Err(invalid(
                s,
                "an mcp provider needs a lowercase registration uuid",
            )),
            "ext" => valid_segment(rest)
                .map(|()| Provider::Ext(rest.to_owned()))
                .map_err(|why| invalid(s, why)),
            "agent" => valid_segment(rest)
                .map(|()| Provider::Agent(rest.to_owned()))
                .map_err(|why| invalid(s, why)),
            _ => Err(invalid(
                s,
                "unknown provider; expected builtin, mcp/<uuid>, ext/<host-id> or agent/<profile-id>",
            )),
        }
    }

    /// Short name of the provider family: `builtin`, `mcp`, `ext` or `agent`.
    pub fn kind(&self) -> &'static str {
        match self {
            Provider::Builtin => "builtin",
            Provider::Mcp(_) => "mcp",
            Provider::Ext(_) => "ext",
            Provider::Agent(_) => "agent",
        }
    }

    /// Whether only the plane itself may contribute tools under this provider. External hosts
    /// register under `ext/…` only.
    pub fn is_reserved(&self) -> bool {
        !matches!(self, Provider::Ext(_))
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Builtin => f.write_str("builtin"),
            Provider::Mcp(id) => write!(f, "mcp/{id}"),
            Provider::Ext(id) => write!(f, "ext/{id}"),
            Provider::Agent(id) => write!(f, "agent/{id}"),
        }
    }
}

/// The canonical identity of a tool: provider plus native name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolId {
    provider: Provider,
    native: String,
}

impl ToolId {
    /// Parses `<provider>:<native>`, splitting at the first `:` (native names may contain `:`).
    pub fn parse(s: &str) -> Result<ToolId, CoreError> {
        let Some((provider, native)) = s.split_once(':') else {
            return Err(invalid(s, "missing `:` between provider and native name"));
        };
        let provider = Provider::parse(provider)?;
        ToolId::new(provider, native)
    }

    /// Builds an id from parts, validating the native name.
    pub fn new(provider: Provider, native: &str) -> Result<ToolId, CoreError> {
        validate_native(native).map_err(|why| invalid(&format!("{provider}:{native}"), why))?;
        Ok(ToolId {
            provider,
            native: native.to_owned(),
        })
    }

    /// A builtin id; for names declared in code.
    pub fn builtin(native: &str) -> Result<ToolId, CoreError> {
        ToolId::new(Provider::Builtin, native)
    }

    /// Parses an id that an external host registers: any reserved provider is refused with
    /// `tool.reserved_provider`, so a host cannot forge builtin, MCP or sub-agent tools.
    pub fn parse_external(s: &str) -> Result<ToolId, CoreError> {
        let id = ToolId::parse(s)?;
        if id.provider.is_reserved() {
            return Err(CoreError::new(
                TOOL_RESERVED_PROVIDER,
                format!(
                    "`{s}` uses the reserved provider `{}`; external hosts register tools as `ext/<host-id>:<name>`",
                    id.provider
                ),
            ));
        }
        Ok(id)
    }

    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    pub fn native(&self) -> &str {
        &self.native
    }

    pub fn is_builtin(&self, native: &str) -> bool {
        self.provider == Provider::Builtin && self.native == native
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.native)
    }
}

impl Serialize for ToolId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        ToolId::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for ToolId {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolId::parse(s)
    }
}

fn invalid(s: &str, why: &str) -> CoreError {
    let shown: String = s.chars().take(160).collect();
    CoreError::new(TOOL_INVALID_ID, format!("`{shown}`: {why}"))
}

fn validate_native(native: &str) -> Result<(), &'static str> {
    if native.is_empty() {
        return Err("empty native name");
    }
    if native.len() > MAX_NATIVE_LEN {
        return Err("native name longer than 128 bytes");
    }
    if native.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("native name contains whitespace or control characters");
    }
    Ok(())
}

/// Host and profile ids: lowercase ASCII letters, digits, `-`, `_` and `.`, starting with a letter
/// or digit, at most 64 bytes. Shared with profile ids.
pub fn valid_segment(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("empty id");
    }
    if s.len() > MAX_SEGMENT_LEN {
        return Err("id longer than 64 bytes");
    }
    let mut chars = s.chars();
    if !chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Err("id must start with a lowercase letter or digit");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
    {
        return Err("id may only contain lowercase letters, digits, `-`, `_` and `.`");
    }
    Ok(())
}

/// A lowercase hyphenated UUID, `8-4-4-4-12` hex digits.
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, len)| {
            g.len() == len
                && g.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        })
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use super::*;

    const UUID: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";

    #[test]
    fn parses_every_provider_and_round_trips() {
        for s in [
            "builtin:workspace.read_file".to_owned(),
            format!("mcp/{UUID}:issue.create"),
            format!("mcp/{UUID}:ns:with:colons"),
            "ext/crm-host:lookup_customer".to_owned(),
            "agent/researcher:run".to_owned(),
        ] {
            let id = ToolId::parse(&s).unwrap();
            assert_eq!(id.to_string(), s);
        }
        let id = ToolId::parse(&format!("mcp/{UUID}:a:b")).unwrap();
        assert_eq!(id.native(), "a:b", "split at the first colon");
        assert_eq!(id.provider(), &Provider::Mcp(UUID.to_owned()));
    }

    #[test]
    fn malformed_ids_are_refused_with_a_code() {
        let long = format!("builtin:{}", "x".repeat(129));
        for bad in [
            "",
            "workspace.read_file",
            "builtin:",
            "builtin:has space",
            "builtin:tab\there",
            "Builtin:x",
            "mcp:x",
            "mcp/not-a-uuid:x",
            "mcp/0B6F3A52-6C1E-4F7A-9A7E-2F1D8C4B5E60:x",
            "ext/:x",
            "ext/Upper:x",
            "ext/a b:x",
            "agent/:x",
            "plugin/x:y",
            long.as_str(),
        ] {
            let err = ToolId::parse(bad).unwrap_err();
            assert_eq!(err.code, TOOL_INVALID_ID, "{bad:?} → {err}");
        }
    }

    #[test]
    fn external_registrations_cannot_forge_reserved_providers() {
        for forged in [
            "builtin:workspace.write_file",
            &format!("mcp/{UUID}:x"),
            "agent/root:run",
        ] {
            let err = ToolId::parse_external(forged).unwrap_err();
            assert_eq!(err.code, TOOL_RESERVED_PROVIDER, "{forged}");
        }
        assert!(ToolId::parse_external("ext/host:x").is_ok());
    }

    #[test]
    fn serde_uses_the_canonical_string() {
        let id = ToolId::parse("ext/h:t").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"ext/h:t\"");
        let back: ToolId = serde_json::from_str("\"ext/h:t\"").unwrap();
        assert_eq!(back, id);
        assert!(serde_json::from_str::<ToolId>("\"nope\"").is_err());
    }
}
