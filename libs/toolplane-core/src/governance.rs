//! Governance: Hardline → Sandbox → Zone, checked for every call
//! after the gate and before the executor.
//!
//! - **Hardline**: rules from the plane's configuration that nothing overrides — paths that may never
//!   be touched and argument fragments that may never be sent (e.g. `rm -rf /`).
//! - **Sandbox**: the run's manifest (visible and writable workspace roots) and the `ToolContext`'s
//!   allow / deny paths. Workspace tools take workspace-relative paths; other tools' path-like
//!   arguments are host paths checked against allow / deny paths.
//! - **Zone**: the cell boundary — a call acts only for the cell of its run.
//!
//! A denial is a `policy.denied` outcome; the snapshot's `DeniedCallMode` decides whether it becomes
//! a tool result or fails the run. The workspace service enforces its roots again on its side: this
//! check is the plane's, not the only one.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::id::ToolId;

/// Argument keys whose string values are treated as paths.
const PATH_KEYS: [&str; 12] = [
    "path",
    "file",
    "filename",
    "file_path",
    "filepath",
    "dir",
    "directory",
    "source",
    "destination",
    "target",
    "cwd",
    "root",
];

/// Configured rules nothing overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HardlineRules {
    /// Path globs no call may name (`*` matches within a segment, `**` across segments), e.g.
    /// `/etc/**`, `**/.ssh/**`, `persist/secrets/**`.
    #[serde(default)]
    pub never_paths: Vec<String>,
    /// Fragments no string argument may contain, compared case-insensitively, e.g. `rm -rf /`.
    #[serde(default)]
    pub never_argument_fragments: Vec<String>,
}

/// Which layer refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GovernanceLayer {
    Hardline,
    Sandbox,
    Zone,
}

/// A refusal with its reason, for the `policy.denied` result and the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Denial {
    pub layer: GovernanceLayer,
    pub reason: String,
}

/// What governance reads about the call's surroundings.
#[derive(Debug, Clone, Copy)]
pub struct GovernanceContext<'a> {
    /// The cell of the run and the cell the call acts for.
    pub run_cell: &'a str,
    pub call_cell: &'a str,
    /// Workspace roots of the invocation.
    pub visible_roots: &'a [String],
    pub writable_roots: &'a [String],
    /// The `ToolContext`'s allow / deny paths (host paths for external tools, workspace paths for
    /// workspace tools).
    pub allow_paths: &'a [String],
    pub deny_paths: &'a [String],
    /// The `ToolContext`'s working directory, for relative host paths.
    pub work_dir: &'a str,
}

/// Checks one call: Hardline, then Sandbox, then Zone.
pub fn check(
    rules: &HardlineRules,
    ctx: &GovernanceContext<'_>,
    tool: &ToolId,
    args: &Map<String, Value>,
) -> Result<(), Denial> {
    let workspace_tool = is_workspace_path_tool(tool);
    let mut paths = Vec::new();
    collect_paths(args, &mut paths);

    // Hardline.
    let mut strings = Vec::new();
    collect_strings(&Value::Object(args.clone()), &mut strings);
    for fragment in &rules.never_argument_fragments {
        let needle = fragment.to_lowercase();
        if !needle.is_empty() && strings.iter().any(|s| s.to_lowercase().contains(&needle)) {
            return Err(Denial {
                layer: GovernanceLayer::Hardline,
                reason: format!("arguments contain the forbidden fragment `{fragment}`"),
            });
        }
    }
    for path in &paths {
        if let Some(glob) = rules.never_paths.iter().find(|g| glob_match(g, path)) {
            return Err(Denial {
                layer: GovernanceLayer::Hardline,
                reason: format!("`{path}` matches the never-allowed path `{glob}`"),
            });
        }
    }

    // Sandbox.
    for path in &paths {
        if workspace_tool {
            let writes = is_workspace_write(tool);
            let roots = if writes {
                ctx.writable_roots
            } else {
                ctx.visible_roots
            };
            // Only check paths that are plausibly workspace paths; the workspace service refuses
            // malformed ones with its own recoverable errors.
            let normalized = path.trim_start_matches("./");
            let in_roots = normalized.is_empty()
                || roots
                    .iter()
                    .any(|r| normalized.starts_with(r.as_str()) || format!("{normalized}/") == *r)
                || (!writes && normalized.starts_with("tool-results/"));
            if !in_roots {
                let kind = if writes { "writable" } else { "visible" };
                return Err(Denial {
                    layer: GovernanceLayer::Sandbox,
                    reason: format!(
                        "`{path}` is outside this invocation's {kind} roots ({})",
                        roots.join(" ")
                    ),
                });
            }
            if let Some(deny) = ctx
                .deny_paths
                .iter()
                .find(|d| normalized.starts_with(d.trim_start_matches("./")))
            {
                return Err(Denial {
                    layer: GovernanceLayer::Sandbox,
                    reason: format!("`{path}` is under the denied path `{deny}`"),
                });
            }
        } else {
            let full = absolutize(path, ctx.work_dir);
            if let Some(deny) = ctx.deny_paths.iter().find(|d| under(&full, d)) {
                return Err(Denial {
                    layer: GovernanceLayer::Sandbox,
                    reason: format!("`{path}` is under the denied path `{deny}`"),
                });
            }
            if !ctx.allow_paths.is_empty()
                && full.starts_with('/')
                && !ctx.allow_paths.iter().any(|a| under(&full, a))
            {
                return Err(Denial {
                    layer: GovernanceLayer::Sandbox,
                    reason: format!(
                        "`{path}` is not under an allowed path ({})",
                        ctx.allow_paths.join(" ")
                    ),
                });
            }
        }
    }

    // Zone.
    if ctx.run_cell != ctx.call_cell {
        return Err(Denial {
            layer: GovernanceLayer::Zone,
            reason: format!(
                "the call acts for cell `{}` but the run belongs to cell `{}`",
                ctx.call_cell, ctx.run_cell
            ),
        });
    }
    Ok(())
}

fn is_workspace_path_tool(tool: &ToolId) -> bool {
    matches!(tool.provider(), crate::id::Provider::Builtin)
        && tool.native().starts_with("workspace.")
}

fn is_workspace_write(tool: &ToolId) -> bool {
    tool.is_builtin(crate::builtin::WORKSPACE_WRITE_FILE)
        || tool.is_builtin(crate::builtin::WORKSPACE_APPLY_PATCH)
}

fn collect_paths(args: &Map<String, Value>, out: &mut Vec<String>) {
    for (k, v) in args {
        if let Value::String(s) = v
            && PATH_KEYS.contains(&k.to_ascii_lowercase().as_str())
        {
            out.push(s.clone());
        }
    }
}

fn collect_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_strings(i, out)),
        _ => {}
    }
}

fn absolutize(path: &str, work_dir: &str) -> String {
    if path.starts_with('/') || work_dir.is_empty() {
        path.to_owned()
    } else {
        format!(
            "{}/{}",
            work_dir.trim_end_matches('/'),
            path.trim_start_matches("./")
        )
    }
}

/// Whether `path` is `base` or below it, segment-wise.
fn under(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
        || base.is_empty()
}

/// Glob matching on `/`-separated paths: `*` matches within one segment, `**` any number of
/// segments (including none).
pub fn glob_match(glob: &str, path: &str) -> bool {
    let g: Vec<&str> = glob.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    match_segments(&g, &p)
}

fn match_segments(g: &[&str], p: &[&str]) -> bool {
    match g.split_first() {
        None => p.is_empty(),
        Some((&"**", rest)) => (0..=p.len()).any(|i| match_segments(rest, &p[i..])),
        Some((seg, rest)) => p
            .split_first()
            .is_some_and(|(ps, prest)| match_segment(seg, ps) && match_segments(rest, prest)),
    }
}

fn match_segment(glob: &str, s: &str) -> bool {
    match glob.split_once('*') {
        None => glob == s,
        Some((head, tail)) => {
            s.starts_with(head) && {
                let rest = &s[head.len()..];
                (0..=rest.len())
                    .filter(|i| rest.is_char_boundary(*i))
                    .any(|i| match_segment(tail, &rest[i..]))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn roots() -> Vec<String> {
        vec!["output/".into(), "scratch/".into()]
    }

    fn ctx<'a>(
        visible: &'a [String],
        writable: &'a [String],
        allow: &'a [String],
        deny: &'a [String],
    ) -> GovernanceContext<'a> {
        GovernanceContext {
            run_cell: "c",
            call_cell: "c",
            visible_roots: visible,
            writable_roots: writable,
            allow_paths: allow,
            deny_paths: deny,
            work_dir: "/srv/work",
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn globs() {
        assert!(glob_match("/etc/**", "/etc/passwd"));
        assert!(glob_match("**/.ssh/**", "/home/a/.ssh/id_rsa"));
        assert!(glob_match("persist/*.key", "persist/a.key"));
        assert!(!glob_match("persist/*.key", "persist/x/a.key"));
        assert!(glob_match("**", "anything/at/all"));
    }

    #[test]
    fn layers_in_order() {
        let rules = HardlineRules {
            never_paths: vec!["output/secret/**".into()],
            never_argument_fragments: vec!["RM -RF /".into()],
        };
        let (v, w) = (roots(), vec!["output/".into()]);
        let none: Vec<String> = vec![];
        let write = ToolId::builtin("workspace.write_file").unwrap();
        let read = ToolId::builtin("workspace.read_file").unwrap();
        let ext = ToolId::parse("ext/fs:read").unwrap();
        let c = ctx(&v, &w, &none, &none);
        assert!(
            check(
                &rules,
                &c,
                &write,
                &args(json!({"path": "output/a.md", "content": "x"}))
            )
            .is_ok()
        );
        let d = check(
            &rules,
            &c,
            &write,
            &args(json!({"path": "output/secret/k", "content": "x"})),
        )
        .unwrap_err();
        assert_eq!(d.layer, GovernanceLayer::Hardline);
        let d = check(
            &rules,
            &c,
            &ext,
            &args(json!({"cmd": ["sh", "-c", "rm -rf / --no-preserve-root"]})),
        )
        .unwrap_err();
        assert_eq!(d.layer, GovernanceLayer::Hardline);
        let d = check(
            &rules,
            &c,
            &write,
            &args(json!({"path": "scratch/a.md", "content": "x"})),
        )
        .unwrap_err();
        assert_eq!(
            d.layer,
            GovernanceLayer::Sandbox,
            "scratch is visible, not writable"
        );
        assert!(check(&rules, &c, &read, &args(json!({"path": "scratch/a.md"}))).is_ok());
        assert!(
            check(
                &rules,
                &c,
                &read,
                &args(json!({"path": "tool-results/x.txt"}))
            )
            .is_ok()
        );
        assert_eq!(
            check(&rules, &c, &read, &args(json!({"path": "plan/a.md"})))
                .unwrap_err()
                .layer,
            GovernanceLayer::Sandbox
        );
    }

    #[test]
    fn host_paths_follow_allow_and_deny() {
        let none: Vec<String> = vec![];
        let allow = vec!["/srv/work".to_owned()];
        let deny = vec!["/srv/work/private".to_owned()];
        let c = ctx(&none, &none, &allow, &deny);
        let ext = ToolId::parse("ext/fs:read").unwrap();
        let rules = HardlineRules::default();
        assert!(
            check(&rules, &c, &ext, &args(json!({"path": "notes/a.txt"}))).is_ok(),
            "relative to work dir"
        );
        assert!(check(&rules, &c, &ext, &args(json!({"path": "/srv/work/a"}))).is_ok());
        assert!(
            check(&rules, &c, &ext, &args(json!({"path": "/srv/workshop/a"}))).is_err(),
            "segment-wise prefix"
        );
        assert!(
            check(
                &rules,
                &c,
                &ext,
                &args(json!({"file": "/srv/work/private/k"}))
            )
            .is_err()
        );
        assert!(check(&rules, &c, &ext, &args(json!({"path": "/etc/passwd"}))).is_err());
    }

    #[test]
    fn zone_is_the_cell_boundary() {
        let none: Vec<String> = vec![];
        let mut c = ctx(&none, &none, &none, &none);
        c.call_cell = "other";
        let d = check(
            &HardlineRules::default(),
            &c,
            &ToolId::builtin("dice.roll").unwrap(),
            &Map::new(),
        )
        .unwrap_err();
        assert_eq!(d.layer, GovernanceLayer::Zone);
    }
}
