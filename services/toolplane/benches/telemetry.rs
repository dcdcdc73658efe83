//! Tracing overhead: tool-call throughput of the whole plane (in one process, as `toolplane up`
//! runs it) with every span exported over OTLP to a local receiver, against the same with export
//! off (`OTEL_SDK_DISABLED=true`: spans are still created for logs, nothing leaves the process).
//! Target: export on costs under 10% of the throughput.
//!
//! The process-wide tracing subscriber can be installed once per process, so each measurement
//! runs in a child process (this benchmark re-executed); the parent runs the OTLP receiver
//! (`fake-opentelemetry-collector`) and alternates the two modes.
//!
//! Run with `cargo bench -p toolplane --bench telemetry` (`TOOLPLANE_BENCH_ROUNDS`, default 3).

// A benchmark's set-up either works or the benchmark is meaningless.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use tonic::transport::Channel;
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;

/// Set in a child: the OTLP endpoint to export to, or `off`.
const CHILD_ENV: &str = "TOOLPLANE_BENCH_TELEMETRY_CHILD";
const CONCURRENCY: usize = 16;
const TURNS_PER_WORKER: usize = 150;

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

async fn worker(url: String) {
    let mut rt = RuntimeServiceClient::new(channel(&url).await);
    let run = rt
        .create_run(pb::CreateRunRequest {
            profile_id: "bench".into(),
            mode: pb::RunMode::Background as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    let opened = rt
        .open_invocation(pb::OpenInvocationRequest {
            run_id: run.run_id,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut turn = opened.first_turn.unwrap().turn_id;
    for n in 0..TURNS_PER_WORKER {
        let (alias, args) = if n % 2 == 0 {
            ("dice_roll", json!({"notation": "d6"}))
        } else {
            ("workspace_read_file", json!({"path": "output/none.md"}))
        };
        let calls = json!({"role": "assistant", "tool_calls": [{"id": format!("c{n}"), "type": "function", "function": {"name": alias, "arguments": args.to_string()}}]});
        let r = rt
            .execute_tool_calls(pb::ExecuteToolCallsRequest {
                invocation_id: opened.invocation_id.clone(),
                turn_id: turn,
                provider_format: pb::ProviderFormat::OpenaiChat as i32,
                calls_json: calls.to_string(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        turn = r.next_turn.unwrap().turn_id;
    }
}

/// One measurement, in this (child) process: calls per second at 16 concurrent invocations.
fn child(endpoint: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut config =
            toolplane_telemetry::TelemetryConfig::new("toolplane").with_default_directive("warn");
        config = if endpoint == "off" {
            config.with_var("OTEL_SDK_DISABLED", "true")
        } else {
            config.with_var("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        };
        let telemetry = toolplane_telemetry::init(config).unwrap();
        assert_eq!(telemetry.is_exporting(), endpoint != "off");
        let dir = tempfile::tempdir().unwrap();
        let plane = Plane::up(PlaneConfig::ephemeral(dir.path().to_path_buf()))
            .await
            .unwrap();
        let mut profiles = ProfileServiceClient::new(channel(&plane.catalog_url()).await);
        profiles
            .put_profile(pb::PutProfileRequest {
                profile_id: "bench".into(),
                profile_json: json!({"id": "bench", "tools": {"allow": ["builtin:workspace.read_file", "builtin:dice.roll"], "maxCallsPerInvocation": 10000, "maxRounds": 1000}}).to_string(),
                ..Default::default()
            })
            .await
            .unwrap();
        // Warm-up.
        worker(plane.runtime_url()).await;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..CONCURRENCY {
            tasks.push(tokio::spawn(worker(plane.runtime_url())));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let took = started.elapsed();
        plane.shutdown().await;
        telemetry.shutdown().unwrap();
        let calls = (CONCURRENCY * TURNS_PER_WORKER) as f64;
        println!("{}", calls / took.as_secs_f64());
    });
}

fn measure(endpoint: &str) -> f64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, endpoint)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn main() {
    if let Ok(endpoint) = std::env::var(CHILD_ENV) {
        child(&endpoint);
        return;
    }
    let rounds: usize = std::env::var("TOOLPLANE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut collector = rt.block_on(async {
        fake_opentelemetry_collector::FakeCollectorServer::start()
            .await
            .unwrap()
    });
    let endpoint = collector.endpoint();
    // The receiver hands spans over through a bounded channel: keep draining it, as a collector
    // would, so exports are acknowledged at once.
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&received);
    rt.spawn(async move {
        loop {
            let got = collector
                .exported_spans(1, Duration::from_millis(1))
                .await
                .len();
            counted.fetch_add(got, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        off.push(measure("off"));
        on.push(measure(&endpoint));
    }
    let received = received.load(std::sync::atomic::Ordering::Relaxed);
    assert!(received > 0, "no span reached the receiver");
    off.sort_by(f64::total_cmp);
    on.sort_by(f64::total_cmp);
    let (a, b) = (off[off.len() / 2], on[on.len() / 2]);
    let loss = 1.0 - b / a;
    println!("rounds {rounds}, spans received {received}");
    println!("tool calls/s, export off: p50 {a:.0}");
    println!(
        "tool calls/s, every span exported over OTLP: p50 {b:.0} = {:.1}% lower (target < 10%) {}",
        loss * 100.0,
        if loss < 0.10 { "ok" } else { "MISSED" }
    );
}
