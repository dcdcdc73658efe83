//! Model aliases: validating a name a model sent (`ModelAlias::new`), normalising name parts and
//! assigning aliases to tool ids parsed from arbitrary text.
//!
//! Invariants: an accepted alias matches `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`; a normalised part
//! holds alias characters only, has no `__` and normalises to itself; every assigned alias is a
//! valid alias and the aliases of one list are distinct.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolplane_core::alias::{self, MAX_ALIAS_LEN, normalize_part};
use toolplane_core::{ModelAlias, ToolId};

fn alias_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fuzz_target!(|data: &str| {
    // The first line is a name a model sent; every line is also a tool id, optionally followed by
    // a tab and an MCP server's display name.
    let name = data.lines().next().unwrap_or("");
    let tools: Vec<(&str, Option<&str>)> = data
        .lines()
        .map(|l| match l.split_once('\t') {
            Some((id, server)) => (id, Some(server)),
            None => (l, None),
        })
        .collect();
    if let Ok(a) = ModelAlias::new(name) {
        let s = a.as_str();
        assert!(!s.is_empty() && s.len() <= MAX_ALIAS_LEN, "{s:?}");
        assert!(s.chars().all(alias_char), "{s:?}");
        assert!(
            !s.starts_with(|c: char| c.is_ascii_digit() || c == '-'),
            "{s:?}"
        );
    }
    let part = normalize_part(name, "x");
    assert!(
        part.chars().all(alias_char) && !part.contains("__"),
        "{part:?}"
    );
    assert_eq!(normalize_part(&part, "x"), part);

    let ids: Vec<(ToolId, Option<&str>)> = tools
        .iter()
        .take(64)
        .filter_map(|(id, server)| ToolId::parse(id).ok().map(|id| (id, *server)))
        .collect();
    let aliases = alias::assign(ids.iter().map(|(id, s)| (id, *s)));
    assert_eq!(aliases.len(), ids.len());
    let mut seen = std::collections::HashSet::new();
    for a in &aliases {
        assert!(ModelAlias::new(a.as_str()).is_ok(), "{a}");
        assert!(seen.insert(a.as_str()), "alias {a} assigned twice");
    }
});
