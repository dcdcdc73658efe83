//! What guarding one call costs against the bare tonic unary echo on loopback, measured in the
//! same run: checking a 1 KiB argument object against its tool's compiled JSON Schema, then
//! governance (Hardline rules over every string, as for an MCP or external tool, then the sandbox
//! and zone rules), must cost at most 1/20 of one echo.
//!
//! Run with `cargo bench -p toolplane-bench --bench guard` (add `--profile release` for a build
//! without whole-program optimisation, much shorter to build); the ratio table prints at the end.

// A benchmark's set-up either works or the benchmark is meaningless: failing loudly is right here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::Criterion;
use serde_json::{Map, Value, json};
use toolplane_bench::{Ratio, report};
use toolplane_core::governance::{self, GovernanceContext};
use toolplane_core::hardline::{HardlineRules, HardlineSpec, NamedRule};
use toolplane_core::id::ToolId;
use toolplane_core::schema::SchemaCheck;

/// A tool's input schema: typed fields, a pattern, an enum, nested objects and arrays.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "maxLength": 1024},
            "query": {"type": "string", "minLength": 1},
            "mode": {"enum": ["fast", "thorough"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            "labels": {"type": "array", "items": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"}},
            "options": {
                "type": "object",
                "properties": {
                    "case_sensitive": {"type": "boolean"},
                    "include": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": "string"}
                },
                "additionalProperties": false
            }
        },
        "required": ["path", "query"],
        "additionalProperties": false
    })
}

/// Arguments that pass the schema and every rule, 1 KiB of JSON.
fn arguments() -> Map<String, Value> {
    let args = json!({
        "path": "src/services/billing/invoices/2026/report.md",
        "query": "quarterly revenue by region, excluding refunds and internal transfers",
        "mode": "thorough",
        "limit": 250,
        "labels": ["finance", "q3", "regional", "draft", "needs-review", "eu", "us", "apac"],
        "options": {
            "case_sensitive": false,
            "include": ["docs/finance/*.md", "reports/2026/q3/", "data/regions.csv", "notes/meeting-2026-09-30.txt"],
            "note": "Compare against the same quarter last year; flag every region whose revenue moved by more than five percent, and list the three largest customers of each such region with their contract renewal dates. Keep the summary under one page so that it fits the board pack, and cite the source document of every figure that appears in it; numbers without a source are dropped. Where two documents disagree, prefer the audited statement over the management draft, and record the disagreement in an appendix with both figures, their dates, and who signed each one off, so that the board can see every one of them at a glance."
        }
    });
    let Value::Object(map) = args else {
        unreachable!()
    };
    map
}

/// A deployment's Hardline rules: never-paths, fragments and two named rules with patterns.
fn rules() -> HardlineRules {
    HardlineRules::compile(HardlineSpec {
        never_paths: vec![
            "/etc/**".into(),
            "**/.ssh/**".into(),
            "**/*.pem".into(),
            "persist/secrets/**".into(),
            "/var/run/docker.sock".into(),
        ],
        never_argument_fragments: vec!["rm -rf /".into(), "mkfs".into(), ":(){ :|:& };:".into()],
        rules: vec![
            NamedRule {
                name: "no-cloud-keys".into(),
                paths: vec!["**/.aws/**".into()],
                argument_patterns: vec![r"AKIA[0-9A-Z]{16}".into()],
            },
            NamedRule {
                name: "no-private-keys".into(),
                paths: vec![],
                argument_patterns: vec![r"-----BEGIN [A-Z ]*PRIVATE KEY-----".into()],
            },
        ],
    })
    .unwrap()
}

/// Governance split into its parts, each a rule set holding only that part of [`rules`]: the
/// sandbox and zone alone (no Hardline rules), the argument patterns alone, the never-path globs
/// alone, and those globs without the ones that can match an absolute path (so relative
/// candidates are not also matched against the working directory).
fn split(c: &mut Criterion, ctx: &GovernanceContext<'_>, tool: &ToolId, args: &Map<String, Value>) {
    let full = rules().spec().clone();
    let parts = [
        ("guard/part/sandbox_and_zone", HardlineSpec::default()),
        (
            "guard/part/argument_patterns",
            HardlineSpec {
                never_paths: vec![],
                never_argument_fragments: full.never_argument_fragments.clone(),
                rules: full
                    .rules
                    .iter()
                    .map(|r| NamedRule {
                        paths: vec![],
                        ..r.clone()
                    })
                    .collect(),
            },
        ),
        (
            "guard/part/never_path_globs",
            HardlineSpec {
                never_paths: full.never_paths.clone(),
                never_argument_fragments: vec![],
                rules: full
                    .rules
                    .iter()
                    .map(|r| NamedRule {
                        argument_patterns: vec![],
                        ..r.clone()
                    })
                    .collect(),
            },
        ),
        (
            "guard/part/relative_globs_only",
            HardlineSpec {
                never_paths: vec!["persist/secrets/**".into(), "src/secret/*.key".into()],
                ..HardlineSpec::default()
            },
        ),
    ];
    for (name, spec) in parts {
        let part = HardlineRules::compile(spec).unwrap();
        c.bench_function(name, |b| {
            b.iter(|| black_box(governance::check(&part, ctx, tool, black_box(args))))
        });
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (addr, _server) = rt.block_on(toolplane_testkit::spawn_echo_server()).unwrap();
    let mut client = rt.block_on(toolplane_testkit::connect_echo(addr)).unwrap();

    let check = SchemaCheck::compile(&schema()).unwrap();
    let rules = rules();
    let args = arguments();
    let size = serde_json::to_string(&args).unwrap().len();
    assert!(
        (1000..1100).contains(&size),
        "the arguments are {size} bytes"
    );
    let tool = ToolId::parse("mcp/0b6f3a52-6c1e-4f7a-9a7e-000000000001:search.reports").unwrap();
    let roots = ["/".to_owned()];
    let ctx = GovernanceContext {
        run_cell: "default",
        call_cell: "default",
        visible_roots: &roots,
        writable_roots: &roots,
        allow_paths: &[],
        deny_paths: &[],
        work_dir: "/srv/agent",
    };
    let value = Value::Object(args.clone());
    check.check(&value).unwrap();
    governance::check(&rules, &ctx, &tool, &args).unwrap();

    let mut c = toolplane_bench::criterion();

    toolplane_bench::bench_echo(&mut c, &rt, &mut client);
    c.bench_function("guard/schema_1kib", |b| {
        b.iter(|| black_box(check.check(black_box(&value))))
    });
    c.bench_function("guard/governance_1kib", |b| {
        b.iter(|| black_box(governance::check(&rules, &ctx, &tool, black_box(&args))))
    });
    split(&mut c, &ctx, &tool, &args);
    c.bench_function("guard/schema_and_governance_1kib", |b| {
        b.iter(|| {
            let checked = check.check(black_box(&value));
            let governed = governance::check(&rules, &ctx, &tool, black_box(&args));
            black_box((checked, governed))
        })
    });
    c.final_summary();

    let ok = report(&[
        Ratio {
            subject: "guard/schema_1kib",
            baseline: "baseline/tonic_echo",
            target: 0.05,
        },
        Ratio {
            subject: "guard/governance_1kib",
            baseline: "baseline/tonic_echo",
            target: 0.05,
        },
        Ratio {
            subject: "guard/schema_and_governance_1kib",
            baseline: "baseline/tonic_echo",
            target: 0.05,
        },
    ]);
    if !ok {
        std::process::exit(1);
    }
}
