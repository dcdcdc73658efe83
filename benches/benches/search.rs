//! Tool search on a 5,000-tool snapshot (the fixture of `toolplane_bench::tool_search`): what the
//! model is sent per turn with search on against advertising every tool (schema bytes, as a
//! ratio), and what one `tools.search` costs against the bare tonic unary echo on loopback,
//! measured in the same run; also the index build, paid once per invocation on its first search.
//!
//! Run with `cargo bench -p toolplane-bench --bench search --profile release`; the byte ratio and
//! the ratio table print at the end.

// A benchmark's set-up either works or the benchmark is meaningless: failing loudly is right here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use serde_json::{Map, Value, json};
use toolplane_bench::tool_search::{catalog, labelled};
use toolplane_bench::{Ratio, report};
use toolplane_core::Profile;
use toolplane_core::catalog::{CatalogEntry, ToolCatalog, ToolOrigin};
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_core::id::ToolId;
use toolplane_core::policy::PolicyLayers;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::tool_search::SnapshotToolSearch;
use toolplane_core::turn::{ToolChoice, ToolTurnContract};
use toolplane_model::ProviderFormat;

/// The fixture as external tools, one host per service, each with an object schema of its
/// parameters.
fn tool_catalog() -> ToolCatalog {
    let entries = catalog().into_iter().map(|t| {
        let (service, native) = t.name.split_once('/').unwrap();
        let id = ToolId::parse(&format!("ext/{service}:{native}")).unwrap();
        let properties: Map<String, Value> = t
            .params
            .split_whitespace()
            .map(|p| {
                (
                    p.to_owned(),
                    json!({"type": "string", "description": format!("The {p}.")}),
                )
            })
            .collect();
        let schema = json!({"type": "object", "properties": properties});
        let descriptor = ToolDescriptor::new(id, t.description, schema)
            .unwrap()
            .with_title(Some(t.title))
            .unwrap();
        let origin = ToolOrigin::External {
            host_id: service.to_owned(),
            endpoint: format!("http://{service}.tools.internal"),
        };
        CatalogEntry::usable(origin, descriptor).unwrap()
    });
    ToolCatalog::new(entries).unwrap()
}

fn snapshot(catalog: &ToolCatalog, search: bool) -> InvocationToolSnapshot {
    let mut tools = json!({"allow": ["*"], "maxCallsPerInvocation": 100});
    if search {
        tools["search"] = json!({"core": []});
    }
    let profile = Profile::from_json(&json!({"id": "agent", "tools": tools}).to_string()).unwrap();
    InvocationToolSnapshot::compile(CompileRequest {
        run_id: "run-1",
        invocation_id: "inv-1",
        profile: &profile,
        layers: PolicyLayers::default(),
        exit_policy: &ExitPolicy::Root,
        catalog,
    })
    .unwrap()
}

fn request_bytes(contract: &ToolTurnContract, snapshot: &InvocationToolSnapshot) -> usize {
    let fields =
        toolplane_model::encode_tools(ProviderFormat::OpenAiChat, contract, snapshot).unwrap();
    serde_json::to_string(&fields).unwrap().len()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (addr, _server) = rt.block_on(toolplane_testkit::spawn_echo_server()).unwrap();
    let mut client = rt.block_on(toolplane_testkit::connect_echo(addr)).unwrap();

    let catalog = tool_catalog();
    let all = snapshot(&catalog, false);
    let searched = snapshot(&catalog, true);
    assert_eq!(all.bindings.len(), 5_000);

    // Bytes per turn: every tool, against the core with five tools a search found.
    let every = ToolTurnContract::all(&all, 1, ToolChoice::Auto).unwrap();
    let index = SnapshotToolSearch::build(&searched);
    let first = ToolTurnContract::advertised(&searched, 1, ToolChoice::Auto, &[]).unwrap();
    let queries = labelled();
    let found: Vec<(ToolId, u32)> = index
        .search(&queries[0].query, 5, |id| first.contains(id))
        .unwrap()
        .into_iter()
        .map(|f| (f.tool_id, 1))
        .collect();
    let later = ToolTurnContract::advertised(&searched, 2, ToolChoice::Auto, &found).unwrap();
    let (all_bytes, first_bytes, later_bytes) = (
        request_bytes(&every, &all),
        request_bytes(&first, &searched),
        request_bytes(&later, &searched),
    );

    let mut c = toolplane_bench::criterion();

    toolplane_bench::bench_echo(&mut c, &rt, &mut client);
    let mut next = 0usize;
    c.bench_function("search/query_5000_tools", |b| {
        b.iter(|| {
            next = (next + 1) % queries.len();
            black_box(index.search(&queries[next].query, 5, |id| first.contains(id)))
        })
    });
    c.bench_function("search/index_5000_tools", |b| {
        b.iter(|| black_box(SnapshotToolSearch::build(black_box(&searched))))
    });
    c.final_summary();

    println!(
        "\nschema bytes per turn (OpenAI chat `tools`): every tool {all_bytes}; search on, first turn {first_bytes} ({:.4} of every tool); after one search of five {later_bytes} ({:.4})",
        first_bytes as f64 / all_bytes as f64,
        later_bytes as f64 / all_bytes as f64,
    );
    let ok = report(&[
        Ratio {
            subject: "search/query_5000_tools",
            baseline: "baseline/tonic_echo",
            target: 1.0,
        },
        Ratio {
            subject: "search/index_5000_tools",
            baseline: "baseline/tonic_echo",
            target: 200.0,
        },
    ]);
    if !ok {
        std::process::exit(1);
    }
}
