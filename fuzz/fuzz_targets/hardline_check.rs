//! Hardline rules and governance over arbitrary argument objects: `governance::check` for a
//! builtin workspace tool, a builtin host tool and an MCP tool, and `HardlineRules::find_violation`
//! directly, with a few fixed rules (never-path globs, a case-insensitive fragment, a named rule
//! with a pattern).
//!
//! Invariants: a violation is never masked by the rest of the arguments — adding a key that names
//! `/etc/passwd` (or holds the forbidden fragment) to any object makes both the Hardline check and
//! the whole governance check refuse it, at the Hardline layer.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use toolplane_core::ToolId;
use toolplane_core::governance::{self, GovernanceContext, GovernanceLayer, HardlineRules};
use toolplane_core::hardline::PathScope;

fn rules() -> &'static HardlineRules {
    static RULES: OnceLock<HardlineRules> = OnceLock::new();
    RULES.get_or_init(|| {
        serde_json::from_value(json!({
            "neverPaths": ["/etc/**", "**/.ssh/**", "persist/secrets/**"],
            "neverArgumentFragments": ["rm -rf /"],
            "rules": [{
                "name": "no-curl-pipe",
                "paths": ["/root/**"],
                "argumentPatterns": ["curl[^|]*\\|\\s*(ba)?sh"]
            }]
        }))
        .unwrap_or_else(|e| panic!("the fixed rules: {e}"))
    })
}

fn tools() -> &'static [ToolId; 3] {
    static TOOLS: OnceLock<[ToolId; 3]> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let parse = |s: &str| ToolId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        [
            parse("builtin:workspace.read_file"),
            parse("builtin:dice.roll"),
            parse("mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:run"),
        ]
    })
}

fuzz_target!(|text: &str| {
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let roots = ["output/".to_owned(), "scratch/".to_owned()];
    let deny = ["output/private".to_owned()];
    let ctx = GovernanceContext {
        run_cell: "default",
        call_cell: "default",
        visible_roots: &roots,
        writable_roots: &roots,
        allow_paths: &[],
        deny_paths: &deny,
        work_dir: "/srv/work",
    };
    let rules = rules();
    for tool in tools() {
        let _ = governance::check(rules, &ctx, tool, &args);
    }
    for scope in [PathScope::PathKeys, PathScope::Everything] {
        let _ = rules.find_violation(&args, scope, "/srv/work");
    }

    for (key, value) in [("path", "/etc/passwd"), ("command", "RM -RF / now")] {
        let mut broken: Map<String, Value> = args.clone();
        broken.insert(key.to_owned(), Value::String(value.to_owned()));
        let scope = if key == "path" {
            PathScope::PathKeys
        } else {
            PathScope::Everything
        };
        assert!(
            rules.find_violation(&broken, scope, "").is_some(),
            "{key}={value} passed Hardline in {text}"
        );
        for tool in &tools()[1..] {
            match governance::check(rules, &ctx, tool, &broken) {
                Err(d) => assert_eq!(d.layer, GovernanceLayer::Hardline, "{tool}: {d:?}"),
                Ok(()) => panic!("{tool}: {key}={value} passed governance in {text}"),
            }
        }
    }
});
