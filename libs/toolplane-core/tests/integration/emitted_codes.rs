//! Every error code a service writes as a literal is a row of a code table in `docs/` (the
//! tables there mirror the code's tables, whose own tests keep them in step): a code that reaches a
//! client or a model without a row is a code nobody can look up. Written means at the start of a
//! message (`"model.egress_denied: …"`, `#[error("mcp.serve_failed: …")]`), as a constant
//! (`const X: &str = "…"`), a field (`code: "…"`) or an argument (`unwrap_or("…")`); a comparison
//! with another crate's code (`e.code() == "store.conflict"`) is not a write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The namespaces of error codes; other dotted literals (`error.type`, `catalog.json`,
/// `limits.max_cells`) are not codes.
const NAMESPACES: &[&str] = &[
    "tool",
    "profile",
    "policy",
    "snapshot",
    "model",
    "agent",
    "runtime",
    "workspace",
    "chat",
    "skill",
    "worldinfo",
    "catalog",
    "mcp",
    "cli",
    "plane",
    "auth",
    "config",
    "serve",
    "store",
];

/// Dotted literals in a code namespace that are not codes.
const NOT_CODES: &[&str] = &[
    // The `object` of an OpenAI Chat Completions response the scripted provider writes.
    "chat.completion",
    // The file a registration's cached catalog is stored in.
    "catalog.json",
    // The listings an opaque page token names (docs/errors.md, "Page tokens").
    "catalog.hosts",
    "catalog.profiles",
    "catalog.tools",
    "mcp.servers",
    "mcp.tools",
    "workspace.chat_messages",
    "workspace.objects",
    "workspace.skills",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The codes written in the services' sources (not their tests), with a file each is in.
fn emitted() -> BTreeMap<String, String> {
    let literal = Regex::new(
        r#"(?:"([a-z]+\.[a-z][a-z0-9_]*): |(?:[^=!<>]= |code: |unwrap_or\(|\()"([a-z]+\.[a-z][a-z0-9_]*)")"#,
    )
    .unwrap();
    let mut files = Vec::new();
    for service in std::fs::read_dir(repo().join("services")).unwrap() {
        let src = service.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "services' sources not found");
    let mut out = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for m in literal.captures_iter(line) {
                let found = m.get(1).or_else(|| m.get(2)).unwrap().as_str();
                let namespace = found.split('.').next().unwrap_or_default();
                if NAMESPACES.contains(&namespace) && !NOT_CODES.contains(&found) {
                    out.entry(found.to_owned())
                        .or_insert_with(|| file.display().to_string());
                }
            }
        }
    }
    out
}

/// Every `| `code` |` row of a table in `docs/`.
fn documented() -> BTreeSet<String> {
    let row = Regex::new(r"(?m)^\| `([a-z]+\.[a-z0-9_]+)` \|").unwrap();
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.extend(row.captures_iter(&text).map(|c| c[1].to_owned()));
        }
    }
    out
}

#[test]
fn every_code_a_service_writes_is_in_a_table() {
    let documented = documented();
    let emitted = emitted();
    assert!(
        emitted.contains_key("model.egress_denied") && emitted.contains_key("workspace.io"),
        "the scan finds codes: {emitted:?}"
    );
    let missing: Vec<String> = emitted
        .iter()
        .filter(|(code, _)| !documented.contains(*code))
        .map(|(code, file)| format!("{code} ({file})"))
        .collect();
    assert!(
        missing.is_empty(),
        "codes without a row in docs/: {missing:#?}"
    );
}
