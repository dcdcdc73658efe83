//! Model-supplied paths and the roots that make them visible or writable. Owns the one parser of a
//! workspace path and the one answer to "may this invocation see / write this"; must never touch
//! the filesystem (the tree module checks what is actually there).
//!
//! A workspace path is `/`-separated and relative; it is refused (`workspace.invalid_path`, a
//! recoverable error) when it is empty, absolute, has `.`/`..` or empty segments, a backslash, a
//! `%` (no percent-decoding ambiguity such as `%2e%2e`), NUL or any control character, zero-width
//! or bidirectional formatting characters, characters that render like `.`, `/` or `\`, a segment
//! with leading or trailing whitespace, a segment over 255 bytes or a path over 1,024 bytes or 32
//! segments. What remains is compared byte for byte with the roots: `OUTPUT/x` is not under
//! `output/`.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use crate::error::WsError;

/// The model-visible and writable roots every run starts from.
pub const DEFAULT_ROOTS: [&str; 5] = ["output", "scratch", "plan", "summaries", "persist"];
/// Visible to every invocation, never writable, outside the profile's root universe.
pub const TOOL_RESULTS_ROOT: &str = "tool-results";
/// Results delegated tasks returned (`agent-results/<child invocation>.json`): like
/// `tool-results/`, visible to every invocation and never writable.
pub const AGENT_RESULTS_ROOT: &str = "agent-results";
/// The read-only roots every invocation sees.
pub const READ_ONLY_ROOTS: [&str; 2] = [TOOL_RESULTS_ROOT, AGENT_RESULTS_ROOT];
/// Hidden runtime storage: never visible to the model.
pub const HIDDEN_ROOTS: [&str; 4] = ["input", "tool-args", "model-responses", "journal"];
/// The projected chat-level persistent root.
pub const PERSIST_ROOT: &str = "persist";

/// Whether `path` (a parsed workspace path, `/`-separated) has the shape of an audit object's
/// path: `tool-args/<invocation>/call_<16 lowercase hex>.json`, `tool-results/<invocation>/…`,
/// `input/…`, `model-responses/…`, `agent-results/<invocation>.json` or
/// `summaries/<invocation>-result.md`. No other path ever holds one.
pub fn is_audit_path(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    match segments.first().copied() {
        Some("tool-args") => match segments.as_slice() {
            [_, _, name] => name
                .strip_prefix("call_")
                .and_then(|rest| rest.strip_suffix(".json"))
                .is_some_and(|hex| {
                    hex.len() == 16
                        && hex
                            .bytes()
                            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                }),
            _ => false,
        },
        Some("tool-results") => segments.len() >= 3,
        Some("input") | Some("model-responses") => segments.len() >= 2,
        // A returned task's result and its Markdown summary, named by the child invocation.
        Some("agent-results") => {
            matches!(segments.as_slice(), [_, name] if name.ends_with(".json"))
        }
        Some("summaries") => {
            matches!(segments.as_slice(), [_, name] if name.ends_with("-result.md"))
        }
        _ => false,
    }
}

/// Whether `path` may hold an audit object and also lies under a root a model may write
/// (`summaries/`): the one place where a tool's write and an audit object's put can meet.
pub fn is_writable_audit_path(path: &str) -> bool {
    path.split('/')
        .next()
        .is_some_and(|root| DEFAULT_ROOTS.contains(&root))
        && is_audit_path(path)
}

/// The proper ancestor of `path` that is a writable audit path, if any: such a path holds a
/// returned task's result (or will), so nothing may be written below it.
pub fn writable_audit_ancestor(path: &str) -> Option<&str> {
    path.match_indices('/')
        .filter_map(|(i, _)| path.get(..i))
        .find(|ancestor| is_writable_audit_path(ancestor))
}

/// The roots under which audit paths lie (see [`is_audit_path`]).
pub const AUDIT_ROOTS: [&str; 6] = [
    "tool-args",
    "tool-results",
    "input",
    "model-responses",
    "agent-results",
    "summaries",
];

/// Whether audit objects may lie under `prefix` (a path prefix; empty means everywhere).
pub fn may_hold_audit_paths(prefix: &str) -> bool {
    let root = prefix.split('/').next().unwrap_or("");
    root.is_empty() || AUDIT_ROOTS.contains(&root)
}

pub const MAX_PATH_BYTES: usize = 1024;
pub const MAX_SEGMENT_BYTES: usize = 255;
pub const MAX_SEGMENTS: usize = 32;

/// A validated relative path (no leading or trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WsPath(String);

impl WsPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The first segment (the root it lives under).
    pub fn root(&self) -> &str {
        self.0.split('/').next().unwrap_or("")
    }

    /// Joins a validated child segment.
    pub fn join(&self, segment: &str) -> WsPath {
        WsPath(format!("{}/{}", self.0, segment))
    }

    /// True when `self` equals `prefix` or lies below it.
    pub fn is_at_or_below(&self, prefix: &str) -> bool {
        let prefix = prefix.trim_end_matches('/');
        self.0 == prefix
            || (self.0.starts_with(prefix) && self.0.as_bytes().get(prefix.len()) == Some(&b'/'))
    }
}

impl std::fmt::Display for WsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_lookalike(c: char) -> bool {
    matches!(
        c,
        // dots
        '\u{2024}' | '\u{2025}' | '\u{2026}' | '\u{FE52}' | '\u{FF0E}' | '\u{00B7}' | '\u{2027}'
        // slashes and backslashes
        | '\u{2044}' | '\u{2215}' | '\u{29F8}' | '\u{FF0F}' | '\u{29F9}' | '\u{2216}' | '\u{FE68}'
        | '\u{FF3C}' | '\u{1735}' | '\u{2E4A}'
    )
}

fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

fn invalid(raw: &str, why: &str) -> WsError {
    let shown: String = raw
        .chars()
        .take(80)
        .collect::<String>()
        .escape_debug()
        .to_string();
    WsError::tool(
        "workspace.invalid_path",
        format!("invalid path \"{shown}\": {why}; use a relative path such as output/notes.md"),
    )
}

/// Parses a model-supplied workspace path. `allow_dir_slash` accepts one trailing `/` (folders in
/// list and search).
pub fn parse(raw: &str, allow_dir_slash: bool) -> Result<WsPath, WsError> {
    if raw.len() > MAX_PATH_BYTES {
        return Err(invalid(raw, "longer than 1024 bytes"));
    }
    let mut text = raw;
    if allow_dir_slash && text.len() > 1 {
        text = text.strip_suffix('/').unwrap_or(text);
    }
    if text.is_empty() {
        return Err(invalid(raw, "empty"));
    }
    if text.starts_with('/') {
        return Err(invalid(raw, "absolute paths are not allowed"));
    }
    for c in text.chars() {
        if c == '\\' {
            return Err(invalid(raw, "backslashes are not allowed"));
        }
        if c == '%' {
            return Err(invalid(raw, "percent signs are not allowed"));
        }
        if c.is_control() {
            return Err(invalid(raw, "control characters are not allowed"));
        }
        if is_invisible_format(c) {
            return Err(invalid(
                raw,
                "invisible formatting characters are not allowed",
            ));
        }
        if is_lookalike(c) {
            return Err(invalid(
                raw,
                "characters that look like '.', '/' or '\\' are not allowed",
            ));
        }
    }
    let bytes = text.as_bytes();
    if let [first, b':', ..] = bytes
        && first.is_ascii_alphabetic()
    {
        return Err(invalid(raw, "drive letters are not allowed"));
    }
    let mut count = 0usize;
    for segment in text.split('/') {
        count = count.saturating_add(1);
        if segment.is_empty() {
            return Err(invalid(raw, "empty path segment"));
        }
        if segment == "." || segment == ".." {
            return Err(invalid(raw, "'.' and '..' segments are not allowed"));
        }
        if segment.len() > MAX_SEGMENT_BYTES {
            return Err(invalid(raw, "a segment is longer than 255 bytes"));
        }
        if segment.trim() != segment {
            return Err(invalid(raw, "a segment starts or ends with whitespace"));
        }
    }
    if count > MAX_SEGMENTS {
        return Err(invalid(raw, "more than 32 segments"));
    }
    Ok(WsPath(text.to_owned()))
}

/// Normalises a root prefix (`output/`, `output`) to its bare name, refusing anything but a plain
/// single segment of the root universe.
pub fn normalize_root(raw: &str) -> Option<String> {
    let bare = raw.trim().trim_end_matches('/');
    DEFAULT_ROOTS.contains(&bare).then(|| bare.to_owned())
}

/// The roots of one invocation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Roots {
    pub visible: Vec<String>,
    pub writable: Vec<String>,
}

impl Default for Roots {
    fn default() -> Roots {
        let all: Vec<String> = DEFAULT_ROOTS.iter().map(|s| (*s).to_owned()).collect();
        Roots {
            visible: all.clone(),
            writable: all,
        }
    }
}

impl Roots {
    /// Roots from a request: empty lists select `base`'s; unknown roots are refused; the result is
    /// narrowed to `base` (a request can never widen) and writable ⊆ visible.
    pub fn narrowed(
        visible: &[String],
        writable: &[String],
        base: &Roots,
    ) -> Result<Roots, WsError> {
        let pick = |list: &[String], from: &[String]| -> Result<Vec<String>, WsError> {
            if list.is_empty() {
                return Ok(from.to_vec());
            }
            let mut out = Vec::new();
            for raw in list {
                let root = normalize_root(raw).ok_or_else(|| {
                    WsError::invalid_request(format!(
                        "unknown workspace root {raw:?}: roots are output/, scratch/, plan/, summaries/, persist/"
                    ))
                })?;
                if from.contains(&root) && !out.contains(&root) {
                    out.push(root);
                }
            }
            Ok(out)
        };
        let visible = pick(visible, &base.visible)?;
        let writable: Vec<String> = pick(writable, &base.writable)?
            .into_iter()
            .filter(|r| visible.contains(r))
            .collect();
        Ok(Roots { visible, writable })
    }

    pub fn can_see(&self, path: &WsPath) -> bool {
        READ_ONLY_ROOTS.contains(&path.root()) || self.visible.iter().any(|r| r == path.root())
    }

    pub fn can_write(&self, path: &WsPath) -> bool {
        self.writable.iter().any(|r| r == path.root()) && path.segments().count() > 1
    }

    /// Visible root folders, the read-only `tool-results` and `agent-results` last.
    pub fn visible_roots(&self) -> Vec<String> {
        let mut roots = self.visible.clone();
        roots.extend(READ_ONLY_ROOTS.iter().map(|r| (*r).to_owned()));
        roots
    }
}

/// Governance's allow / deny path prefixes from the call's `ToolContext`.
#[derive(Debug, Clone, Default)]
pub struct PathGuard {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl PathGuard {
    pub fn check(&self, path: &WsPath) -> Result<(), WsError> {
        let under = |prefix: &String| path.is_at_or_below(prefix.trim_start_matches("./"));
        if let Some(prefix) = self.deny.iter().find(|p| under(p)) {
            return Err(WsError::tool(
                "workspace.path_denied",
                format!("{path} is under a denied path ({prefix})"),
            ));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(under) {
            return Err(WsError::tool(
                "workspace.path_denied",
                format!("{path} is outside the allowed paths of this call"),
            ));
        }
        Ok(())
    }
}

/// Requires `path` to be visible to `roots`.
pub fn require_visible(roots: &Roots, path: &WsPath) -> Result<(), WsError> {
    if roots.can_see(path) {
        return Ok(());
    }
    Err(WsError::tool(
        "workspace.path_not_visible",
        format!(
            "{path} is not in your workspace; visible folders are {}",
            roots
                .visible_roots()
                .iter()
                .map(|r| format!("{r}/"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// Requires `path` to be a writable file path for `roots`.
pub fn require_writable(roots: &Roots, path: &WsPath) -> Result<(), WsError> {
    require_visible(roots, path)?;
    if roots.can_write(path) {
        return Ok(());
    }
    let writable = if roots.writable.is_empty() {
        "none".to_owned()
    } else {
        roots
            .writable
            .iter()
            .map(|r| format!("{r}/"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(WsError::tool(
        "workspace.path_not_writable",
        format!("{path} is not writable; writable folders are {writable}"),
    ))
}

/// Validates an opaque id (cell, run, invocation, chat, skill name): 1–128 characters of
/// `[A-Za-z0-9._:-]`, not starting with `.`.
pub fn valid_id(what: &str, id: &str) -> Result<(), WsError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok {
        Ok(())
    } else {
        Err(WsError::invalid_request(format!(
            "invalid {what} {:?}: use 1-128 characters of [A-Za-z0-9._:-], not starting with '.'",
            id.chars().take(80).collect::<String>()
        )))
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The hostile corpus: every entry must be refused as an invalid path.
    pub(crate) const HOSTILE: &[&str] = &[
        "",
        "/",
        "/etc/passwd",
        "../x",
        "output/../../etc/passwd",
        "output/./x",
        "output//x",
        "./output/x",
        "output/..",
        "..",
        ".",
        "output\\..\\x",
        "C:\\x",
        "c:/x",
        "output/%2e%2e/x",
        "%2e%2e/etc",
        "output/%2F",
        "output/a\0b",
        "output/\u{0007}",
        "output/\n",
        "output/x\r",
        "output/\u{2024}\u{2024}/x",
        "output/\u{FF0E}\u{FF0E}/x",
        "output\u{2215}x",
        "output\u{FF0F}x",
        "output/\u{202E}txt.exe",
        "output/\u{200B}",
        "output/\u{FEFF}a",
        " output/x",
        "output/ x",
        "output/x ",
        "output/\u{FF3C}x",
    ];

    #[test]
    fn hostile_paths_are_refused() {
        for raw in HOSTILE {
            let err = parse(raw, false).expect_err(raw);
            assert_eq!(err.code(), "workspace.invalid_path", "{raw:?}");
        }
        let long = format!("output/{}", "a".repeat(300));
        assert!(parse(&long, false).is_err());
        let deep = format!("output/{}", vec!["d"; 40].join("/"));
        assert!(parse(&deep, false).is_err());
        let huge = "o/".repeat(600);
        assert!(parse(&huge, false).is_err());
    }

    #[test]
    fn only_a_returned_task_summary_is_an_audit_path_a_model_may_also_write() {
        assert!(is_writable_audit_path("summaries/child-result.md"));
        assert_eq!(
            writable_audit_ancestor("summaries/child-result.md/notes.md"),
            Some("summaries/child-result.md")
        );
        assert_eq!(writable_audit_ancestor("summaries/child-result.md"), None);
        assert_eq!(writable_audit_ancestor("summaries/notes/a.md"), None);
        for path in [
            "summaries/notes.md",
            "summaries/a/child-result.md",
            "output/child-result.md",
            "tool-results/i/call_00000000000000aa.json",
            "agent-results/child.json",
        ] {
            assert!(!is_writable_audit_path(path), "{path}");
        }
    }

    #[test]
    fn hidden_and_lookalike_roots_are_not_visible() {
        let roots = Roots::default();
        for raw in [
            "input/x.json",
            "tool-args/i/call_1.json",
            "model-responses/a.json",
            "journal/x",
            "OUTPUT/x",
            "outputs/x",
            "output2/x",
            "events.jsonl",
            ".toolplane/x",
        ] {
            let path = parse(raw, false).unwrap();
            assert!(!roots.can_see(&path), "{raw}");
        }
        let tr = parse("tool-results/i/call_0.json", false).unwrap();
        assert!(roots.can_see(&tr) && !roots.can_write(&tr));
        assert!(
            !roots.can_write(&parse("output", false).unwrap()),
            "a root itself is a folder"
        );
        assert!(roots.can_write(&parse("output/日本語 notes.md", false).unwrap()));
    }

    #[test]
    fn roots_only_narrow() {
        let base = Roots::narrowed(
            &["output/".into(), "plan".into()],
            &["output".into()],
            &Roots::default(),
        )
        .unwrap();
        assert_eq!(base.visible, vec!["output", "plan"]);
        assert_eq!(base.writable, vec!["output"]);
        let child = Roots::narrowed(
            &["output".into(), "scratch".into()],
            &["plan".into(), "output".into()],
            &base,
        )
        .unwrap();
        assert_eq!(child.visible, vec!["output"], "scratch is not in the base");
        assert_eq!(child.writable, vec!["output"]);
        assert!(Roots::narrowed(&["input".into()], &[], &base).is_err());
    }

    #[test]
    fn guard_applies_deny_over_allow() {
        let guard = PathGuard {
            allow: vec!["output/".into()],
            deny: vec!["output/secret".into()],
        };
        assert!(guard.check(&parse("output/a.md", false).unwrap()).is_ok());
        assert!(
            guard
                .check(&parse("output/secret/a.md", false).unwrap())
                .is_err()
        );
        assert!(
            guard
                .check(&parse("output/secrets.md", false).unwrap())
                .is_ok()
        );
        assert!(guard.check(&parse("scratch/a.md", false).unwrap()).is_err());
    }

    proptest! {
        // Whatever the model sends, an accepted path has only clean segments.
        #[test]
        fn accepted_paths_are_clean(raw in "[a-z./\\\\%\u{2024} -]{0,30}") {
            if let Ok(path) = parse(&raw, true) {
                for seg in path.segments() {
                    prop_assert!(!seg.is_empty() && seg != "." && seg != "..");
                    let clean = !seg.contains('\\') && !seg.contains('%') && !seg.contains('\u{2024}');
                    prop_assert!(clean, "unclean segment {:?}", seg);
                }
                prop_assert!(!path.as_str().starts_with('/'));
            }
        }
    }
}
