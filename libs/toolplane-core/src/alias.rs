//! Model aliases: the names a model sees and calls.
//!
//! An alias exists only inside one invocation's snapshot. Rules:
//! - builtin tools: the native name with every character outside `[A-Za-z0-9_-]` turned into `_`
//!   (`workspace.read_file` → `workspace_read_file`);
//! - MCP tools: `mcp__<server>__<tool>`, both parts normalised (lowercase is *not* forced; runs of
//!   `_` collapse so that `__` stays a separator; `issue.create` on `my server` →
//!   `mcp__my_server__issue_create`);
//! - external host tools `ext__<host>__<tool>`, sub-agent tools `agent__<profile>__<tool>`, by the
//!   same rule;
//! - at most 64 bytes: the server part is shortened first, so the tool (action) part is kept whole
//!   where it fits, then the tool part is cut at its end;
//! - collisions get `__2`, `__3`, … deterministically in advertisement order, within the cap.
//!
//! Every alias matches `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`, which satisfies the name rules of OpenAI
//! (`^[a-zA-Z0-9_-]{1,64}$`), Anthropic (`^[a-zA-Z0-9_-]{1,128}$`) and Gemini (starts with a letter
//! or `_`, at most 64).
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, TOOL_INVALID_ID};
use crate::id::{Provider, ToolId};

/// Longest alias, in bytes.
pub const MAX_ALIAS_LEN: usize = 64;

/// A validated model-facing tool name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ModelAlias(String);

impl ModelAlias {
    /// Validates an alias: `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`.
    pub fn new(s: impl Into<String>) -> Result<Self, CoreError> {
        let s = s.into();
        let first_ok = s
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || s.len() > MAX_ALIAS_LEN || !s.chars().all(is_alias_char) {
            return Err(CoreError::new(
                TOOL_INVALID_ID,
                format!("`{s}` is not a valid model alias"),
            ));
        }
        Ok(ModelAlias(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for ModelAlias {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ModelAlias::new(String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for ModelAlias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ModelAlias {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

fn is_alias_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Normalises a name part: characters outside `[A-Za-z0-9_-]` become `_`, runs of `_` collapse to
/// one, and `_` is trimmed from both ends. An empty result becomes `fallback`.
pub fn normalize_part(s: &str, fallback: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let c = if is_alias_char(c) { c } else { '_' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    let trimmed = out.trim_matches('_');
    if trimmed.is_empty() {
        fallback.to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// What an alias is built from: the family prefix, the qualifier (server, host or profile) and the
/// tool part. Builtins have no prefix or qualifier.
struct AliasParts {
    prefix: &'static str,
    qualifier: String,
    tool: String,
}

impl AliasParts {
    fn of(id: &ToolId, server_name: Option<&str>) -> AliasParts {
        let tool = normalize_part(id.native(), "tool");
        match id.provider() {
            Provider::Builtin => {
                // A builtin native name never starts with a digit in practice; keep the alias valid
                // for Gemini regardless.
                let tool = if tool.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
                    format!("_{tool}")
                } else {
                    tool
                };
                AliasParts {
                    prefix: "",
                    qualifier: String::new(),
                    tool,
                }
            }
            Provider::Mcp(reg) => AliasParts {
                prefix: "mcp",
                qualifier: normalize_part(server_name.unwrap_or(reg), "server"),
                tool,
            },
            Provider::Ext(host) => AliasParts {
                prefix: "ext",
                qualifier: normalize_part(host, "host"),
                tool,
            },
            Provider::Agent(profile) => AliasParts {
                prefix: "agent",
                qualifier: normalize_part(profile, "agent"),
                tool,
            },
        }
    }

    /// Renders the parts within `cap` bytes: the qualifier is shortened first (down to one byte),
    /// then the tool part.
    fn render(&self, cap: usize) -> String {
        if self.prefix.is_empty() {
            return cut(&self.tool, cap).to_owned();
        }
        let fixed = self.prefix.len().saturating_add(4); // `<prefix>__` + `__`
        let room = cap.saturating_sub(fixed);
        let tool_room = room.saturating_sub(1).min(self.tool.len());
        let tool = cut(&self.tool, tool_room);
        let qualifier = cut(&self.qualifier, room.saturating_sub(tool.len()));
        // Cutting may leave a trailing `_` that would merge with the separator; trim it.
        let qualifier = qualifier.trim_end_matches('_');
        let qualifier = if qualifier.is_empty() { "x" } else { qualifier };
        let tool = tool.trim_end_matches('_');
        let tool = if tool.is_empty() { "t" } else { tool };
        format!("{}__{}__{}", self.prefix, qualifier, tool)
    }
}

/// The longest prefix of a string within `max` bytes. Alias parts are ASCII after normalisation,
/// so any byte index is a char boundary; anything else is cut at the boundary before.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    s.get(..end).unwrap_or_default()
}

/// Assigns aliases to tools in advertisement order. `server_name` is the MCP registration's display
/// name for MCP tools. Deterministic: the same input always yields the same aliases, and they are
/// unique within the list.
pub fn assign<'a, I>(tools: I) -> Vec<ModelAlias>
where
    I: IntoIterator<Item = (&'a ToolId, Option<&'a str>)>,
{
    let tools = tools.into_iter();
    let mut taken: HashSet<String> = HashSet::with_capacity(tools.size_hint().0);
    let mut out = Vec::with_capacity(tools.size_hint().0);
    for (id, server_name) in tools {
        let parts = AliasParts::of(id, server_name);
        let mut candidate = parts.render(MAX_ALIAS_LEN);
        let mut n = 2u32;
        while taken.contains(&candidate) {
            let suffix = format!("__{n}");
            let base = parts.render(MAX_ALIAS_LEN.saturating_sub(suffix.len()));
            candidate = format!("{}{suffix}", base.trim_end_matches('_'));
            n = n.saturating_add(1);
        }
        // `render` builds aliases from alias characters only, starting with a letter or `_`, within
        // the cap (checked by the property tests), so no second validation pass is needed.
        debug_assert!(ModelAlias::new(candidate.clone()).is_ok(), "{candidate}");
        out.push(ModelAlias(candidate.clone()));
        taken.insert(candidate);
    }
    out
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const UUID_A: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
    const UUID_B: &str = "1c7e4b63-7d2f-4a8b-8b8f-3e2e9d5c6f71";

    fn mcp(uuid: &str, native: &str) -> ToolId {
        ToolId::parse(&format!("mcp/{uuid}:{native}")).unwrap()
    }

    fn one(id: &ToolId, server: Option<&str>) -> String {
        assign([(id, server)])[0].to_string()
    }

    #[test]
    fn seed_examples() {
        assert_eq!(
            one(&ToolId::builtin("workspace.read_file").unwrap(), None),
            "workspace_read_file"
        );
        assert_eq!(
            one(&mcp(UUID_A, "issue.create"), Some("my server")),
            "mcp__my_server__issue_create"
        );
        assert_eq!(
            one(&ToolId::parse("ext/crm-host:lookup").unwrap(), None),
            "ext__crm-host__lookup"
        );
        assert_eq!(
            one(&ToolId::parse("agent/researcher:run").unwrap(), None),
            "agent__researcher__run"
        );
    }

    #[test]
    fn separators_stay_unambiguous() {
        assert_eq!(
            one(&mcp(UUID_A, "a__b...c"), Some("__x  y__")),
            "mcp__x_y__a_b_c"
        );
        assert_eq!(
            one(&mcp(UUID_A, "日本語"), Some("サーバ")),
            "mcp__server__tool"
        );
    }

    #[test]
    fn collisions_get_numbered_suffixes_in_order() {
        let a = mcp(UUID_A, "search");
        let b = mcp(UUID_B, "search");
        let c = mcp(UUID_B, "search!");
        let aliases = assign([(&a, Some("docs")), (&b, Some("docs")), (&c, Some("docs"))]);
        let got: Vec<&str> = aliases.iter().map(ModelAlias::as_str).collect();
        assert_eq!(
            got,
            [
                "mcp__docs__search",
                "mcp__docs__search__2",
                "mcp__docs__search__3"
            ]
        );
    }

    #[test]
    fn cap_shortens_the_server_before_the_tool() {
        let id = mcp(UUID_A, "create_pull_request_review");
        let alias = one(&id, Some(&"very-long-server-name-".repeat(5)));
        assert!(alias.len() <= 64, "{alias}");
        assert!(alias.ends_with("__create_pull_request_review"), "{alias}");
        assert!(alias.starts_with("mcp__very-long"), "{alias}");
        let long_tool = mcp(UUID_A, &"t".repeat(120));
        let alias = one(&long_tool, Some("srv"));
        assert_eq!(alias.len(), 64);
        assert!(alias.starts_with("mcp__s__ttt"), "{alias}");
    }

    #[test]
    fn alias_validation() {
        for bad in ["", "1abc", "a b", "a.b", &"a".repeat(65), "-x"] {
            assert!(ModelAlias::new(bad).is_err(), "{bad:?}");
        }
        assert!(ModelAlias::new("_x-1").is_ok());
    }

    fn native_strategy() -> impl Strategy<Value = String> {
        // Printable names from many alphabets, with separators models and servers actually use.
        prop_oneof![
            proptest::string::string_regex("[a-zA-Z0-9_.:/@\\-]{1,128}").unwrap(),
            proptest::string::string_regex("[a-zA-Z0-9_.:/@\\-日本éß]{1,40}").unwrap(),
        ]
    }

    fn server_strategy() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[a-zA-Z0-9 _.\\-éサ]{0,90}").unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Tools from many servers: every alias is valid for every provider, unique within the
        /// snapshot, and the same input gives the same aliases.
        #[test]
        fn aliases_are_valid_unique_and_deterministic(
            tools in proptest::collection::vec((0usize..6, native_strategy()), 1..60),
            servers in proptest::collection::vec(server_strategy(), 6),
        ) {
            let uuids: Vec<String> = (0..6).map(|i| format!("0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e6{i}")).collect();
            let mut seen = HashSet::new();
            let mut ids = Vec::new();
            for (server, native) in &tools {
                let id = mcp(&uuids[*server], native);
                if seen.insert(id.clone()) { ids.push((id, servers[*server].clone())); }
            }
            ids.push((ToolId::builtin("workspace.read_file").unwrap(), String::new()));
            let input: Vec<(&ToolId, Option<&str>)> = ids.iter().map(|(id, s)| (id, Some(s.as_str()))).collect();
            let first = assign(input.clone());
            let second = assign(input);
            prop_assert_eq!(&first, &second);
            let mut unique = HashSet::new();
            for alias in &first {
                let s = alias.as_str();
                prop_assert!(!s.is_empty() && s.len() <= 64, "{}", s);
                prop_assert!(s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{}", s);
                prop_assert!(s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'), "{}", s);
                prop_assert!(unique.insert(s.to_owned()), "duplicate alias {}", s);
            }
        }

        /// The tool part is kept whole whenever it fits beside the shortest possible server part,
        /// and otherwise its head fills the alias to the cap.
        #[test]
        fn tool_part_is_kept_first(native in native_strategy(), server in server_strategy()) {
            let id = mcp(UUID_A, &native);
            let alias = one(&id, Some(&server));
            let tool = normalize_part(&native, "tool");
            if tool.len() <= 64 - "mcp__x__".len() {
                let expected_suffix = format!("__{tool}");
                prop_assert!(alias.ends_with(&expected_suffix), "{} should end with {}", alias, tool);
            } else {
                // Cutting may drop a trailing `_`, so the alias fills the cap to within a byte.
                prop_assert!(alias.len() >= 63 && alias.len() <= 64, "{}", alias);
                let head = &tool[..20];
                prop_assert!(alias.contains(head), "{} should keep the head of {}", alias, tool);
            }
        }
    }
}
