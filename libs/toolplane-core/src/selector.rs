//! Tool selectors: how profiles and policy layers name tools.
//!
//! - `*` — every tool;
//! - an exact id, `builtin:workspace.read_file`, `ext/crm:lookup`, `mcp/<uuid>:search`;
//! - a provider prefix ending in `*`, `builtin:workspace.*`, `ext/crm:*`;
//! - an MCP tool by server display name, `mcp:<server name>/<tool>`, `mcp:<server name>/<prefix>*`
//!   or `mcp:<server name>/*` — so a profile can name MCP tools before their registration's UUID
//!   is known; `mcp:<server name>` alone is `mcp:<server name>/*` (and is written back that way);
//! - every MCP tool of every server, `mcp:*`;
//! - every tool whose descriptor sets a side-effect hint to true, `annotation:readOnly`,
//!   `annotation:destructive`, `annotation:idempotent` or `annotation:openWorld` (MCP's
//!   `readOnlyHint`, …), so "ask before any destructive tool" is one selector.
//!
//! A selector matches catalog entries; expanding a selector follows catalog order.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::catalog::CatalogEntry;
use crate::descriptor::ToolAnnotations;
use crate::error::{CoreError, PROFILE_INVALID_SELECTOR};
use crate::id::{Provider, ToolId};

/// Longest selector accepted, in bytes.
pub const MAX_SELECTOR_LEN: usize = 300;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolSelector {
    All,
    Exact(ToolId),
    /// Tools of one provider whose native name starts with `prefix` (empty prefix: all of them).
    Prefix {
        provider: Provider,
        prefix: String,
    },
    /// Every MCP tool, whatever its server.
    AllMcp,
    /// MCP tools of the server with this display name; `tool` is an exact name or a prefix.
    McpServer {
        server: String,
        tool: NamePattern,
    },
    /// Tools whose descriptor sets this side-effect hint to true.
    Annotation(Hint),
}

/// A tool's side-effect hint, as MCP's tool annotations name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hint {
    ReadOnly,
    Destructive,
    Idempotent,
    OpenWorld,
}

impl Hint {
    /// The hint's name in selectors (`readOnly`, `destructive`, `idempotent`, `openWorld`).
    pub fn as_str(self) -> &'static str {
        match self {
            Hint::ReadOnly => "readOnly",
            Hint::Destructive => "destructive",
            Hint::Idempotent => "idempotent",
            Hint::OpenWorld => "openWorld",
        }
    }

    fn parse(s: &str) -> Option<Hint> {
        [
            Hint::ReadOnly,
            Hint::Destructive,
            Hint::Idempotent,
            Hint::OpenWorld,
        ]
        .into_iter()
        .find(|h| h.as_str() == s)
    }

    /// Whether `annotations` set this hint to true (an unset hint does not match).
    pub fn is_set(self, annotations: &ToolAnnotations) -> bool {
        let v = match self {
            Hint::ReadOnly => annotations.read_only_hint,
            Hint::Destructive => annotations.destructive_hint,
            Hint::Idempotent => annotations.idempotent_hint,
            Hint::OpenWorld => annotations.open_world_hint,
        };
        v == Some(true)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NamePattern {
    Exact(String),
    Prefix(String),
}

impl NamePattern {
    fn parse(s: &str) -> NamePattern {
        match s.strip_suffix('*') {
            Some(prefix) => NamePattern::Prefix(prefix.to_owned()),
            None => NamePattern::Exact(s.to_owned()),
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(n) => n == name,
            NamePattern::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

impl ToolSelector {
    pub fn parse(s: &str) -> Result<ToolSelector, CoreError> {
        let err = |why: &str| {
            let shown: String = s.chars().take(120).collect();
            CoreError::new(PROFILE_INVALID_SELECTOR, format!("`{shown}`: {why}"))
        };
        if s.len() > MAX_SELECTOR_LEN {
            return Err(err("selector longer than 300 bytes"));
        }
        if s == "*" {
            return Ok(ToolSelector::All);
        }
        if s == "mcp:*" {
            return Ok(ToolSelector::AllMcp);
        }
        if let Some(hint) = s.strip_prefix("annotation:") {
            return Hint::parse(hint).map(ToolSelector::Annotation).ok_or_else(|| {
                err("expected `annotation:readOnly`, `destructive`, `idempotent` or `openWorld`")
            });
        }
        if let Some(rest) = s.strip_prefix("mcp:") {
            let (server, tool) = rest.split_once('/').unwrap_or((rest, "*"));
            if server.is_empty() || tool.is_empty() {
                return Err(err("server name and tool must not be empty"));
            }
            // Not `tool[..len - 1]`: the last character may be wider than one byte.
            if server.contains('*') || tool.strip_suffix('*').unwrap_or(tool).contains('*') {
                return Err(err("`*` may only end a selector"));
            }
            return Ok(ToolSelector::McpServer {
                server: server.to_owned(),
                tool: NamePattern::parse(tool),
            });
        }
        if let Some(head) = s.strip_suffix('*') {
            if head.contains('*') {
                return Err(err("`*` may only end a selector"));
            }
            let Some((provider, prefix)) = head.split_once(':') else {
                return Err(err("expected `<provider>:<prefix>*`"));
            };
            let provider = Provider::parse(provider).map_err(|e| err(&e.message))?;
            return Ok(ToolSelector::Prefix {
                provider,
                prefix: prefix.to_owned(),
            });
        }
        if s.contains('*') {
            return Err(err("`*` may only end a selector"));
        }
        ToolId::parse(s)
            .map(ToolSelector::Exact)
            .map_err(|e| err(&e.message))
    }

    /// Whether this selector names exactly one tool (usable as an override key).
    pub fn is_single_tool(&self) -> bool {
        matches!(
            self,
            ToolSelector::Exact(_)
                | ToolSelector::McpServer {
                    tool: NamePattern::Exact(_),
                    ..
                }
        )
    }

    pub fn matches(&self, entry: &CatalogEntry) -> bool {
        let none = ToolAnnotations::default();
        let annotations = entry.descriptor().map_or(&none, |d| d.annotations());
        self.matches_tool(entry.id(), entry.origin().server_name(), annotations)
    }

    /// Whether this selector matches a tool given by its id, its MCP server's display name (for
    /// MCP tools) and its annotations: what a snapshot's binding still knows of its catalog entry.
    pub fn matches_tool(
        &self,
        id: &ToolId,
        server_name: Option<&str>,
        annotations: &ToolAnnotations,
    ) -> bool {
        match self {
            ToolSelector::All => true,
            ToolSelector::AllMcp => matches!(id.provider(), Provider::Mcp(_)),
            ToolSelector::Exact(want) => want == id,
            ToolSelector::Prefix { provider, prefix } => {
                id.provider() == provider && id.native().starts_with(prefix.as_str())
            }
            ToolSelector::McpServer { server, tool } => {
                server_name == Some(server.as_str()) && tool.matches(id.native())
            }
            ToolSelector::Annotation(hint) => hint.is_set(annotations),
        }
    }
}

impl fmt::Display for ToolSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolSelector::All => f.write_str("*"),
            ToolSelector::AllMcp => f.write_str("mcp:*"),
            ToolSelector::Exact(id) => write!(f, "{id}"),
            ToolSelector::Prefix { provider, prefix } => write!(f, "{provider}:{prefix}*"),
            ToolSelector::McpServer {
                server,
                tool: NamePattern::Exact(t),
            } => write!(f, "mcp:{server}/{t}"),
            ToolSelector::McpServer {
                server,
                tool: NamePattern::Prefix(p),
            } => write!(f, "mcp:{server}/{p}*"),
            ToolSelector::Annotation(hint) => write!(f, "annotation:{}", hint.as_str()),
        }
    }
}

impl Serialize for ToolSelector {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolSelector {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        ToolSelector::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The first selector of a list that matches an entry.
pub fn first_match<'a>(
    selectors: &'a [ToolSelector],
    entry: &CatalogEntry,
) -> Option<&'a ToolSelector> {
    selectors.iter().find(|s| s.matches(entry))
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::{McpPermission, ToolOrigin};
    use crate::descriptor::ToolDescriptor;

    const UUID: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";

    fn mcp_entry(server: &str, native: &str) -> CatalogEntry {
        let id = ToolId::parse(&format!("mcp/{UUID}:{native}")).unwrap();
        let d = ToolDescriptor::new(id, "d", json!({"type": "object"})).unwrap();
        CatalogEntry::usable(
            ToolOrigin::Mcp {
                registration_id: UUID.into(),
                server_name: server.into(),
                permission: McpPermission::Allow,
            },
            d,
        )
        .unwrap()
    }

    fn builtin(native: &str) -> CatalogEntry {
        let d = ToolDescriptor::new(
            ToolId::builtin(native).unwrap(),
            "d",
            json!({"type": "object"}),
        )
        .unwrap();
        CatalogEntry::usable(ToolOrigin::Builtin, d).unwrap()
    }

    #[test]
    fn parse_and_match() {
        let read = builtin("workspace.read_file");
        let dice = builtin("dice.roll");
        let gh = mcp_entry("github", "create_issue");
        let cases = [
            ("*", [true, true, true]),
            ("builtin:workspace.*", [true, false, false]),
            ("builtin:*", [true, true, false]),
            ("builtin:dice.roll", [false, true, false]),
            ("mcp:github/*", [false, false, true]),
            ("mcp:github/create_*", [false, false, true]),
            ("mcp:github/create_issue", [false, false, true]),
            ("mcp:gitlab/*", [false, false, false]),
            ("mcp:*", [false, false, true]),
        ];
        for (s, expect) in cases {
            let sel = ToolSelector::parse(s).unwrap();
            assert_eq!(sel.to_string(), s);
            let got = [sel.matches(&read), sel.matches(&dice), sel.matches(&gh)];
            assert_eq!(got, expect, "{s}");
        }
        // A server's name alone selects all its tools, and is written back in the long form.
        let server = ToolSelector::parse("mcp:github").unwrap();
        assert!(server.matches(&gh) && !server.matches(&read));
        assert_eq!(server.to_string(), "mcp:github/*");
        assert!(!ToolSelector::parse("mcp:gitlab").unwrap().matches(&gh));
        let exact = ToolSelector::parse(&format!("mcp/{UUID}:create_issue")).unwrap();
        assert!(exact.matches(&gh) && exact.is_single_tool());
    }

    #[test]
    fn annotation_selectors_match_hints_set_to_true() {
        let hinted = |native: &str, annotations: Value| {
            let id = ToolId::parse(&format!("mcp/{UUID}:{native}")).unwrap();
            let annotations: ToolAnnotations = serde_json::from_value(annotations).unwrap();
            let d = ToolDescriptor::new(id, "d", json!({"type": "object"}))
                .unwrap()
                .with_annotations(annotations);
            CatalogEntry::usable(
                ToolOrigin::Mcp {
                    registration_id: UUID.into(),
                    server_name: "github".into(),
                    permission: McpPermission::Allow,
                },
                d,
            )
            .unwrap()
        };
        let delete = hinted(
            "delete_repo",
            json!({"destructiveHint": true, "openWorldHint": true}),
        );
        let read = hinted(
            "get_repo",
            json!({"readOnlyHint": true, "destructiveHint": false}),
        );
        let bare = builtin("dice.roll");
        let cases = [
            ("annotation:destructive", [true, false, false]),
            ("annotation:readOnly", [false, true, false]),
            ("annotation:openWorld", [true, false, false]),
            ("annotation:idempotent", [false, false, false]),
        ];
        for (s, expect) in cases {
            let sel = ToolSelector::parse(s).unwrap();
            assert_eq!(sel.to_string(), s, "written back as read");
            let got = [sel.matches(&delete), sel.matches(&read), sel.matches(&bare)];
            assert_eq!(got, expect, "{s}");
            assert!(!sel.is_single_tool());
        }
        for bad in [
            "annotation:",
            "annotation:destructiveHint",
            "annotation:Destructive",
            "annotation:*",
        ] {
            let e = ToolSelector::parse(bad).unwrap_err();
            assert_eq!(e.code, PROFILE_INVALID_SELECTOR, "{bad}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused() {
        for bad in [
            "",
            "**",
            "a*b",
            "builtin:*x*",
            "mcp:",
            "mcp:/x",
            "mcp:**",
            "mcp:git*",
            "mcp:git*/x",
            "mcp:g/",
            "nope:*",
            "workspace.read_file",
            "mcp:g/a*b",
        ] {
            let err = ToolSelector::parse(bad).unwrap_err();
            assert_eq!(err.code, PROFILE_INVALID_SELECTOR, "{bad:?}");
        }
    }

    #[test]
    fn a_server_tool_may_end_in_a_wide_character() {
        assert_eq!(
            ToolSelector::parse("mcp:docs/überprüfƓ").unwrap(),
            ToolSelector::McpServer {
                server: "docs".into(),
                tool: NamePattern::Exact("überprüfƓ".into()),
            }
        );
        assert_eq!(
            ToolSelector::parse("mcp:docs/a*Ɠ").unwrap_err().code,
            PROFILE_INVALID_SELECTOR
        );
    }
}
