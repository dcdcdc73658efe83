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

pub use crate::hardline::{HardlineRules, HardlineSpec, NamedRule};
use crate::hardline::{PathScope, is_path_key};
use crate::id::{Provider, ToolId};
use crate::lexpath;

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
    /// The Hardline rule that refused the call (its name, or the glob or fragment it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
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
    hardline(rules, ctx, tool, args)?;
    let mut paths = Vec::new();
    collect_paths(args, &mut paths);
    if is_workspace_path_tool(tool) {
        paths
            .iter()
            .try_for_each(|p| sandbox_workspace(ctx, tool, p))?;
    } else {
        paths.iter().try_for_each(|p| sandbox_host(ctx, p))?;
    }
    zone(ctx)
}

fn hardline(
    rules: &HardlineRules,
    ctx: &GovernanceContext<'_>,
    tool: &ToolId,
    args: &Map<String, Value>,
) -> Result<(), Denial> {
    // Builtin tools name their paths in path-named keys; every other tool's arguments are opaque
    // to toolplane, so every string of them is read as a possible path.
    let (scope, work_dir) = match tool.provider() {
        Provider::Builtin if is_workspace_path_tool(tool) => (PathScope::PathKeys, ""),
        Provider::Builtin => (PathScope::PathKeys, ctx.work_dir),
        _ => (PathScope::Everything, ctx.work_dir),
    };
    match rules.find_violation(args, scope, work_dir) {
        None => Ok(()),
        Some(v) => Err(Denial {
            layer: GovernanceLayer::Hardline,
            reason: format!("{} (rule `{}`)", v.reason, v.rule),
            rule: Some(v.rule),
        }),
    }
}

/// A workspace tool's path against the invocation's roots and the run's deny paths. Paths that do
/// not parse as workspace paths are left to the workspace, which refuses them with its own
/// recoverable errors; `..` is resolved here so it cannot walk out of a root unseen.
fn sandbox_workspace(ctx: &GovernanceContext<'_>, tool: &ToolId, path: &str) -> Result<(), Denial> {
    let writes = is_workspace_write(tool);
    let roots = if writes {
        ctx.writable_roots
    } else {
        ctx.visible_roots
    };
    let normalized = match lexpath::normalize(path) {
        n if n == "." => String::new(),
        n => n,
    };
    let in_roots = normalized.is_empty()
        || roots
            .iter()
            .any(|r| normalized.starts_with(r.as_str()) || format!("{normalized}/") == *r)
        || (!writes && normalized.starts_with("tool-results/"));
    if !in_roots {
        let kind = if writes { "writable" } else { "visible" };
        return Err(denial(
            GovernanceLayer::Sandbox,
            format!(
                "`{}` is outside this invocation's {kind} roots ({})",
                lexpath::shown(path),
                roots.join(" ")
            ),
        ));
    }
    if let Some(deny) = ctx
        .deny_paths
        .iter()
        .find(|d| lexpath::is_under(&normalized, d))
    {
        return Err(denial(
            GovernanceLayer::Sandbox,
            format!(
                "`{}` is under the denied path `{deny}`",
                lexpath::shown(path)
            ),
        ));
    }
    Ok(())
}

/// Another tool's host path against the run's allow and deny paths, resolved against its working
/// directory first.
fn sandbox_host(ctx: &GovernanceContext<'_>, path: &str) -> Result<(), Denial> {
    let full = lexpath::absolutize(path, ctx.work_dir);
    if let Some(deny) = ctx.deny_paths.iter().find(|d| lexpath::is_under(&full, d)) {
        return Err(denial(
            GovernanceLayer::Sandbox,
            format!(
                "`{}` is under the denied path `{deny}`",
                lexpath::shown(path)
            ),
        ));
    }
    if !ctx.allow_paths.is_empty()
        && full.starts_with('/')
        && !ctx.allow_paths.iter().any(|a| lexpath::is_under(&full, a))
    {
        return Err(denial(
            GovernanceLayer::Sandbox,
            format!(
                "`{}` is not under an allowed path ({})",
                lexpath::shown(path),
                ctx.allow_paths.join(" ")
            ),
        ));
    }
    Ok(())
}

fn zone(ctx: &GovernanceContext<'_>) -> Result<(), Denial> {
    if ctx.run_cell != ctx.call_cell {
        return Err(denial(
            GovernanceLayer::Zone,
            format!(
                "the call acts for cell `{}` but the run belongs to cell `{}`",
                ctx.call_cell, ctx.run_cell
            ),
        ));
    }
    Ok(())
}

fn denial(layer: GovernanceLayer, reason: String) -> Denial {
    Denial {
        layer,
        reason,
        rule: None,
    }
}

fn is_workspace_path_tool(tool: &ToolId) -> bool {
    matches!(tool.provider(), Provider::Builtin) && tool.native().starts_with("workspace.")
}

fn is_workspace_write(tool: &ToolId) -> bool {
    tool.is_builtin(crate::builtin::WORKSPACE_WRITE_FILE)
        || tool.is_builtin(crate::builtin::WORKSPACE_APPLY_PATCH)
}

/// The values of path-named keys, at any depth (arrays keep their key).
fn collect_paths(args: &Map<String, Value>, out: &mut Vec<String>) {
    fn walk(v: &Value, path_key: bool, out: &mut Vec<String>) {
        match v {
            Value::String(s) if path_key => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|i| walk(i, path_key, out)),
            Value::Object(map) => map.iter().for_each(|(k, v)| walk(v, is_path_key(k), out)),
            _ => {}
        }
    }
    args.iter().for_each(|(k, v)| walk(v, is_path_key(k), out));
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
    fn a_refusal_names_a_long_path_without_repeating_it_whole() {
        let rules = HardlineRules::default();
        let (v, none) = (roots(), Vec::<String>::new());
        let deny = vec!["/srv".to_owned()];
        let c = ctx(&v, &v, &none, &deny);
        let read = ToolId::builtin("workspace.read_file").unwrap();
        let ext = ToolId::parse("ext/fs:read").unwrap();
        let long = "a".repeat(900 * 1024);
        for (tool, path) in [(&read, long.clone()), (&ext, format!("/srv/{long}"))] {
            let d = check(&rules, &c, tool, &args(json!({ "path": path }))).unwrap_err();
            assert_eq!(d.layer, GovernanceLayer::Sandbox);
            assert!(
                d.reason.len() < 400 && d.reason.contains("aaaa…"),
                "{} bytes: {}",
                d.reason.len(),
                &d.reason[..200]
            );
        }
    }

    #[test]
    fn layers_in_order() {
        let rules: HardlineRules = serde_json::from_value(json!({
            "neverPaths": ["output/secret/**"],
            "neverArgumentFragments": ["RM -RF /"],
        }))
        .unwrap();
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
        // Climbing out of an allowed path, or into a denied one, is seen through.
        for escape in [
            json!({"path": "/srv/work/../../etc/passwd"}),
            json!({"path": "../../etc/passwd"}),
            json!({"path": "notes/../private/k"}),
            json!({"opts": {"target": "/srv/work/./private//k"}}),
        ] {
            assert_eq!(
                check(&rules, &c, &ext, &args(escape.clone()))
                    .unwrap_err()
                    .layer,
                GovernanceLayer::Sandbox,
                "{escape}"
            );
        }
    }

    #[test]
    fn workspace_paths_cannot_climb_out_of_their_roots() {
        let (v, w) = (roots(), vec!["output/".to_owned()]);
        let deny = vec!["output/private".to_owned()];
        let c = ctx(&v, &w, &[], &deny);
        let write = ToolId::builtin("workspace.write_file").unwrap();
        let rules = HardlineRules::default();
        let denied =
            |p: &str| check(&rules, &c, &write, &args(json!({"path": p, "content": ""}))).err();
        assert!(denied("output/a.md").is_none());
        assert!(
            denied("output/privateer.md").is_none(),
            "deny paths are segment-wise"
        );
        for p in [
            "output/../plan/a.md",
            "output/private/../private/k",
            "./output/private/k",
        ] {
            assert_eq!(
                denied(p).map(|d| d.layer),
                Some(GovernanceLayer::Sandbox),
                "{p}"
            );
        }
    }

    #[test]
    fn hardline_reads_every_string_of_tools_it_cannot_read() {
        let rules: HardlineRules =
            serde_json::from_value(json!({"neverPaths": ["/etc/**", "output/secret/**"]})).unwrap();
        let none: Vec<String> = vec![];
        let c = ctx(&none, &none, &none, &none);
        let mcp = ToolId::parse("mcp/0f8e2c1a-5b7d-4e3f-9a1b-2c3d4e5f6a7b:run_command").unwrap();
        let d = check(
            &rules,
            &c,
            &mcp,
            &args(json!({"command": "cat /srv/../etc/shadow"})),
        )
        .unwrap_err();
        assert_eq!(d.layer, GovernanceLayer::Hardline);
        assert_eq!(d.rule.as_deref(), Some("/etc/**"));
        // A builtin's free text is not a path: only its path-named keys are.
        let write = ToolId::builtin("workspace.write_file").unwrap();
        let (v, w) = (roots(), vec!["output/".to_owned()]);
        let c = ctx(&v, &w, &none, &none);
        assert!(
            check(
                &rules,
                &c,
                &write,
                &args(json!({"path": "output/a.md", "content": "see /etc/hosts"}))
            )
            .is_ok()
        );
        let d = check(
            &rules,
            &c,
            &write,
            &args(json!({"path": "output/x/../secret/k", "content": ""})),
        )
        .unwrap_err();
        assert_eq!(d.layer, GovernanceLayer::Hardline);
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
