//! Core benchmarks against the bare tonic unary echo on loopback, measured in the same run:
//! - compiling a snapshot of 200 allowed tools out of a 5,000-tool catalog costs less than one echo;
//! - decoding and gating one call costs less than 1/20 of one echo (both from core tool calls and
//!   from an OpenAI Chat Completions assistant message).
//!
//! Run with `cargo bench -p toolplane-bench --bench core`; the ratio table prints at the end.

// A benchmark's set-up either works or the benchmark is meaningless: failing loudly is right here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::BatchSize;
use serde_json::json;
use toolplane_bench::{Ratio, report};
use toolplane_core::Profile;
use toolplane_core::builtin;
use toolplane_core::catalog::{CatalogEntry, McpPermission, ToolCatalog, ToolOrigin};
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_core::gate::ToolRequestGate;
use toolplane_core::id::ToolId;
use toolplane_core::policy::PolicyLayers;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::turn::{CallIdPolicy, RawArguments, RawToolCall, ToolChoice, ToolTurnContract};
use toolplane_model::ProviderFormat;

/// 19 builtins plus 50 MCP servers of 100 tools each (plus one external host): 5,019 tools.
fn catalog() -> ToolCatalog {
    let mut entries: Vec<CatalogEntry> = builtin::descriptors()
        .into_iter()
        .map(|d| CatalogEntry::usable(ToolOrigin::Builtin, d).unwrap())
        .collect();
    for server in 0..50 {
        let uuid = format!("0b6f3a52-6c1e-4f7a-9a7e-{server:012x}");
        let origin = ToolOrigin::Mcp {
            registration_id: uuid.clone(),
            server_name: format!("srv-{server}"),
            permission: McpPermission::Allow,
        };
        for tool in 0..100 {
            let id = ToolId::parse(&format!("mcp/{uuid}:tool_{tool}.action")).unwrap();
            let schema = json!({"type": "object", "properties": {"q": {"type": "string", "description": "query"}, "n": {"type": "integer"}}, "required": ["q"]});
            let d = ToolDescriptor::new(
                id,
                format!("Tool {tool} of server {server}: does one thing well."),
                schema,
            )
            .unwrap();
            entries.push(CatalogEntry::usable(origin.clone(), d).unwrap());
        }
    }
    ToolCatalog::new(entries).unwrap()
}

/// 200 allowed tools: `builtin:workspace.*` (7), all of one server (100) and 93 exact ids spread
/// over other servers.
fn profile() -> Profile {
    let mut allow = vec![json!("builtin:workspace.*"), json!("mcp:srv-10/*")];
    for i in 0..93 {
        let server = 20 + i % 30;
        let uuid = format!("0b6f3a52-6c1e-4f7a-9a7e-{server:012x}");
        allow.push(json!(format!("mcp/{uuid}:tool_{}.action", i * 7 % 100)));
    }
    Profile::from_json(&json!({"id": "bench", "tools": {"allow": allow, "deny": ["mcp:srv-11/*"], "maxCallsPerInvocation": 10000}}).to_string()).unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (addr, _server) = rt.block_on(toolplane_testkit::spawn_echo_server()).unwrap();
    let mut client = rt.block_on(toolplane_testkit::connect_echo(addr)).unwrap();

    let catalog = catalog();
    let profile = profile();
    let exit = ExitPolicy::Root;
    let compile = || {
        InvocationToolSnapshot::compile(CompileRequest {
            run_id: "run",
            invocation_id: "inv",
            profile: &profile,
            layers: PolicyLayers::default(),
            exit_policy: &exit,
            catalog: &catalog,
        })
        .unwrap()
    };
    let snapshot = compile();
    assert_eq!(snapshot.bindings.len(), 200, "the profile allows 200 tools");
    let turn = ToolTurnContract::all(&snapshot, 1, ToolChoice::Auto).unwrap();
    let gate = ToolRequestGate::new(&snapshot);
    let alias = snapshot.bindings[150].alias.to_string();
    let openai_message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_abc123", "type": "function", "function": {"name": alias, "arguments": "{\"q\":\"weather in Paris\",\"n\":3}"}}
    ]});

    let mut c = toolplane_bench::criterion();

    toolplane_bench::bench_echo(&mut c, &rt, &mut client);
    c.bench_function("core/compile_200_of_5000", |b| {
        b.iter_with_large_drop(|| black_box(compile()))
    });
    c.bench_function("core/decode_and_gate_one_call", |b| {
        b.iter_batched(
            || gate.clone(),
            |mut gate| {
                let call = RawToolCall {
                    call_id: Some("call_abc123".into()),
                    name: alias.clone(),
                    arguments: RawArguments::Text("{\"q\":\"weather in Paris\",\"n\":3}".into()),
                    provider_metadata: None,
                };
                let calls = turn.decode(vec![call], CallIdPolicy::Required).unwrap();
                let reserved = gate.check_and_reserve(&turn, &calls[0]).unwrap();
                // Returned, so that dropping them is not part of the measurement.
                (gate, calls, reserved)
            },
            BatchSize::SmallInput,
        )
    });
    c.bench_function("core/decode_openai_and_gate_one_call", |b| {
        b.iter_batched(
            || gate.clone(),
            |mut gate| {
                let decoded = toolplane_model::decode_calls(
                    ProviderFormat::OpenAiChat,
                    &turn,
                    &openai_message,
                )
                .unwrap();
                let reserved = gate
                    .check_and_reserve(&turn, &decoded.invocations[0])
                    .unwrap();
                (gate, decoded, reserved)
            },
            BatchSize::SmallInput,
        )
    });
    c.final_summary();

    let ok = report(&[
        Ratio {
            subject: "core/compile_200_of_5000",
            baseline: "baseline/tonic_echo",
            target: 1.0,
        },
        Ratio {
            subject: "core/decode_and_gate_one_call",
            baseline: "baseline/tonic_echo",
            target: 0.05,
        },
        Ratio {
            subject: "core/decode_openai_and_gate_one_call",
            baseline: "baseline/tonic_echo",
            target: 0.05,
        },
    ]);
    if !ok {
        std::process::exit(1);
    }
}
