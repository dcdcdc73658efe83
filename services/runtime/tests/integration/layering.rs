//! The runtime's modules form layers that import one way, down (ARCHITECTURE.md, "services/runtime").
//! This test reads every module file under `src/`, finds its `crate::…` paths and fails on any that
//! names a module of a higher layer than the file's own. A module that needs something from above
//! must have it moved down or passed in as a trait (as `context::TaskLauncher` is).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, bottom to top: each top-level module of `src/` and the layer it belongs to. A
/// module may use modules of its own layer and of the layers below.
const LAYERS: &[(&str, u32)] = &[
    // Leaves: configuration, errors, metrics, the model endpoints and their HTTP client.
    ("config", 0),
    ("error", 0),
    ("metrics", 0),
    ("model", 0),
    // The run and invocation book: data and transitions, no IO.
    ("state", 1),
    // The ports (traits) and the Runtime over them.
    ("context", 2),
    // Run and invocation lifecycles.
    ("lifecycle", 3),
    // Executing one call: control tools, agent tools, tool hosts.
    ("tools", 4),
    // admit → govern → execute → record, turn ends, host-driven turns.
    ("pipeline", 5),
    // The runtime-driven loop.
    ("runloop", 6),
    // Delegated tasks, driven by the loop.
    ("children", 7),
    // Protobuf conversions, then the tonic adapters of the ports.
    ("convert", 8),
    ("peers", 9),
    // gRPC handlers, the MCP face (`/mcp`) and the web console (`/console`).
    ("service", 10),
    ("mcp", 10),
    ("console", 10),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn layer_of(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`None` for the crate roots).
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (name != "lib" && name != "main").then_some(name)
}

/// The top-level modules a file's code names through `crate::` (comments left out): plain paths
/// (`crate::state::Run`) and groups (`crate::{state, context::Runtime}`).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" //").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `toolplane_crate::…`, not this crate
        }
        let names: Vec<String> = match rest.strip_prefix('{') {
            // A group, possibly over several lines: the first segment of each path in it.
            Some(group) => group[..group.find('}').unwrap_or(group.len())]
                .split(',')
                .map(|part| ident(part.trim()))
                .collect(),
            None => vec![ident(rest)],
        };
        out.extend(names.into_iter().filter(|n| !n.is_empty()));
    }
    out
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Every reference against the layer order, as `file → module (layer a → layer b)`.
fn upward_references() -> Vec<String> {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut bad = Vec::new();
    for file in all {
        let Some(module) = module_of(&file) else {
            continue;
        };
        let own = layer_of(&module).unwrap_or_else(|| {
            panic!("`{module}` is not in the layer table of tests/integration/layering.rs: give it a layer")
        });
        let text = std::fs::read_to_string(&file).unwrap();
        for used in crate_refs(&text) {
            let Some(theirs) = layer_of(&used) else {
                continue; // a re-export of the crate root (`crate::RuntimeConfig`) or a macro
            };
            if theirs > own {
                bad.push(format!(
                    "{} uses crate::{used} (layer {own} → {theirs})",
                    file.strip_prefix(src()).unwrap().display()
                ));
            }
        }
    }
    bad
}

#[test]
fn modules_import_only_from_their_own_layer_and_below() {
    let bad = upward_references();
    assert!(
        bad.is_empty(),
        "imports against the layer order:\n{}",
        bad.join("\n")
    );
}

/// Where protobuf and tonic may appear below the edges: `error` maps runtime errors to gRPC statuses
/// (the one table of the service), and `model/endpoint.rs` reads a run spec's model endpoint.
const PROTOBUF_BELOW_THE_EDGES: &[&str] = &["error.rs", "model/endpoint.rs"];

#[test]
fn protobuf_and_tonic_stay_in_convert_peers_and_service() {
    let edge = layer_of("convert").unwrap();
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut bad = Vec::new();
    for file in all {
        let Some(module) = module_of(&file) else {
            continue;
        };
        let rel = file.strip_prefix(src()).unwrap().display().to_string();
        if layer_of(&module).unwrap() >= edge || PROTOBUF_BELOW_THE_EDGES.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let named = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .any(|l| l.contains("toolplane_proto") || l.contains("tonic::"));
        if named {
            bad.push(rel);
        }
    }
    assert!(
        bad.is_empty(),
        "protobuf or tonic below convert/peers/service: {bad:?}"
    );
}

#[test]
fn every_module_of_the_crate_has_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_owned())
        .collect();
    assert!(!declared.is_empty());
    for m in declared {
        assert!(layer_of(&m).is_some(), "`{m}` has no layer in LAYERS");
    }
}

#[test]
fn the_scanner_sees_plain_paths_groups_and_skips_comments() {
    let text = "use crate::state::Run;\nuse crate::{\n    context::Runtime,\n    tools,\n};\n// crate::service in a comment\nlet x = crate::pipeline::run_turn(a); // crate::peers\nuse toolplane_crate::x;\n";
    let refs: Vec<String> = crate_refs(text).into_iter().collect();
    assert_eq!(refs, ["context", "pipeline", "state", "tools"]);
}
