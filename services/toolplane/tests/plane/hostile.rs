//! The hostile-input suite: every case of the corpus under `tests/hostile/` (one file per tool,
//! plus `turns.json` for whole assistant turns) sent through `ExecuteToolCalls` in all four
//! provider formats to a `toolplane up` process, as an agent host would. Each case must end with
//! its documented recoverable `error_code` or gRPC status, a cheap call must succeed after it, no
//! message may name the data directory, the binary's path or a loopback address, and the plane's
//! peak resident memory (VmHWM) may grow by less than 256 MiB over the whole suite
//! (docs/limits.md, "Hostile-input suite").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_support;
#[path = "hostile/corpus.rs"]
mod corpus;

use std::path::Path;
use std::time::{Duration, Instant};

use cli_support::{Up, bin};
use corpus::{Args, Call, Case, Expect, corpus, turn_json};
use serde_json::{Value, json};
use tonic::transport::Channel;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;

/// Growth of the plane's peak resident memory the whole suite may cause.
const MAX_HWM_GROWTH_KIB: u64 = 256 * 1024;

const FORMATS: [(pb::ProviderFormat, &str); 4] = [
    (pb::ProviderFormat::OpenaiChat, "openai_chat"),
    (pb::ProviderFormat::OpenaiResponses, "openai_responses"),
    (pb::ProviderFormat::AnthropicMessages, "anthropic"),
    (pb::ProviderFormat::Gemini, "gemini"),
];

/// Every tool the corpus calls, with budgets and cycle thresholds out of the suite's way: the cheap
/// call after each case repeats itself hundreds of times on purpose.
fn profile() -> Value {
    json!({
        "id": "hostile",
        "description": "Receives the hostile-input suite.",
        "tools": {
            "allow": ["builtin:workspace.*", "builtin:dice.roll", "mcp:demo/*"],
            "maxCallsPerInvocation": 10000,
            "maxRounds": 1000,
            "cycle": {"identicalWarn": 10000, "identicalStop": 10000, "sameToolWarn": 10000, "sameToolStop": 10000}
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The plane and a host's session with it

struct Host {
    runtime: RuntimeServiceClient<Channel>,
    format: pb::ProviderFormat,
    invocation: String,
    turn: String,
    rounds: u32,
    next_id: u64,
    sessions: u32,
}

impl Host {
    async fn new(runtime: RuntimeServiceClient<Channel>, format: pb::ProviderFormat) -> Host {
        let mut h = Host {
            runtime,
            format,
            invocation: String::new(),
            turn: String::new(),
            rounds: 0,
            next_id: 0,
            sessions: 0,
        };
        h.reopen().await;
        h
    }

    /// A new run and its root invocation: after an invocation failed, or when its rounds run low.
    async fn reopen(&mut self) {
        let run = self
            .runtime
            .create_run(pb::CreateRunRequest {
                chat: Some(pb::ChatBinding {
                    chat_id: "hostile".into(),
                    message_id: None,
                }),
                mode: pb::RunMode::Background as i32,
                profile_id: "hostile".into(),
                ..Default::default()
            })
            .await
            .expect("the plane still creates runs")
            .into_inner()
            .run
            .unwrap();
        let inv = self
            .runtime
            .open_invocation(pb::OpenInvocationRequest {
                run_id: run.run_id,
                provider_format: self.format as i32,
                ..Default::default()
            })
            .await
            .expect("the plane still opens invocations")
            .into_inner();
        self.invocation = inv.invocation_id;
        self.turn = inv.first_turn.unwrap().turn_id;
        self.rounds = 0;
        self.sessions += 1;
    }

    fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        format!("call_{}", self.next_id)
    }

    /// Sends one turn; keeps the session usable for the next one.
    async fn send(&mut self, body: String) -> Result<pb::ExecuteToolCallsResponse, tonic::Status> {
        let out = self
            .runtime
            .execute_tool_calls(pb::ExecuteToolCallsRequest {
                invocation_id: self.invocation.clone(),
                turn_id: self.turn.clone(),
                provider_format: self.format as i32,
                calls_json: body,
                ..Default::default()
            })
            .await
            .map(tonic::Response::into_inner);
        self.rounds += 1;
        match &out {
            Ok(r) if r.state == pb::InvocationState::Open as i32 && self.rounds < 900 => {
                if let Some(t) = &r.next_turn {
                    self.turn = t.turn_id.clone();
                }
            }
            _ => self.reopen().await,
        }
        out
    }

    async fn call(
        &mut self,
        calls: &[(String, &Call)],
    ) -> Result<pb::ExecuteToolCallsResponse, tonic::Status> {
        let body = turn_json(self.format, calls);
        self.send(body).await
    }

    /// One call that must succeed.
    async fn ok(&mut self, call: &Call, what: &str) {
        let id = self.fresh_id();
        let r = self
            .call(&[(id, call)])
            .await
            .unwrap_or_else(|s| panic!("{what}: {s:?}"));
        assert!(
            r.results.len() == 1 && !r.results[0].is_error,
            "{what}: {:?}",
            r.results
        );
    }
}

/// CPU time a process has used, user and system, in seconds (at the usual 100 ticks a second).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// Peak resident memory of a process, in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

async fn channel(port: u16) -> Channel {
    Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Registers the binary's own demo MCP server (stdio, tools allowed), refreshes the catalog and
/// puts the suite's profile.
async fn prepare(up: &Up) {
    let mut mcp = McpProxyServiceClient::new(channel(up.ports.mcp_proxy).await);
    let server = mcp
        .upsert_server(pb::UpsertServerRequest {
            display_name: "demo".into(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                    command: bin().to_string_lossy().into_owned(),
                    args: vec!["demo-mcp-server".to_owned()],
                    ..Default::default()
                })),
            }),
            initial_state: pb::McpServerState::Active as i32,
            default_permission: pb::McpToolPermission::Allow as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    assert!(server.cached_tool_count > 0, "{server:?}");
    let catalog = channel(up.ports.catalog).await;
    CatalogServiceClient::new(catalog.clone())
        .refresh_sources(pb::RefreshSourcesRequest {
            cell_id: String::new(),
        })
        .await
        .unwrap();
    ProfileServiceClient::new(catalog)
        .put_profile(pb::PutProfileRequest {
            cell_id: String::new(),
            profile_id: "hostile".into(),
            profile_json: profile().to_string(),
            expected_version: None,
            validate_only: false,
            request_id: String::new(),
        })
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// The suite

/// What no message may contain: the data directory, the binary's path, an internal address.
struct Secrets(Vec<String>);

impl Secrets {
    fn check(&self, case: &str, what: &str, text: &str) -> Option<String> {
        self.0
            .iter()
            .find(|s| text.contains(s.as_str()))
            .map(|s| format!("{case}: {what} names `{s}`"))
    }
}

/// Whether `got` is what the case expects; a description of the difference otherwise.
fn judge(
    expect: &Expect,
    got: &Result<pb::ExecuteToolCallsResponse, tonic::Status>,
) -> Option<String> {
    let short = |s: &str| s.chars().take(300).collect::<String>();
    match (expect, got) {
        (Expect::Status(code, error), Err(s))
            if s.code() == *code && s.message().starts_with(error.as_str()) =>
        {
            None
        }
        (Expect::Ok, Ok(r)) if !r.results.is_empty() && r.results.iter().all(|x| !x.is_error) => {
            None
        }
        (Expect::Result(code), Ok(r))
            if !r.results.is_empty()
                && r.results
                    .iter()
                    .all(|x| x.is_error && x.error_code.as_deref() == Some(code.as_str())) =>
        {
            None
        }
        (_, Err(s)) => Some(format!(
            "expected {expect:?}, got status {:?} {}",
            s.code(),
            short(s.message())
        )),
        (_, Ok(r)) => Some(format!(
            "expected {expect:?}, got {:?}",
            r.results
                .iter()
                .map(|x| (x.error_code.clone(), short(&x.content)))
                .collect::<Vec<_>>()
        )),
    }
}

/// Longest error message a model or host may be handed: an error names what was wrong, it does
/// not repeat a megabyte of the input back.
const MAX_ERROR_MESSAGE_BYTES: usize = 8 * 1024;

fn long_error(got: &Result<pb::ExecuteToolCallsResponse, tonic::Status>) -> Option<String> {
    let longest = match got {
        Err(s) => s.message().len(),
        Ok(r) => r
            .results
            .iter()
            .filter(|x| x.is_error)
            .map(|x| x.content.len())
            .max()
            .unwrap_or(0),
    };
    (longest > MAX_ERROR_MESSAGE_BYTES)
        .then(|| format!("an error message of {longest} bytes, over {MAX_ERROR_MESSAGE_BYTES}"))
}

/// Runs every case in one format; returns the failures.
async fn run_format(
    host: &mut Host,
    format: &str,
    cases: &[Case],
    secrets: &Secrets,
    cheap: &Call,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut file = "";
    for case in cases {
        if case.file != file {
            file = &case.file;
            host.reopen().await;
        }
        let t0 = Instant::now();
        let name = format!("[{format}] {}", case.name);
        for s in &case.setup {
            host.ok(s, &format!("{name}: setup")).await;
        }
        let body = match &case.calls_json {
            Some(raw) => raw.clone(),
            None => {
                let ids = match &case.call_ids {
                    Some(ids) => ids.clone(),
                    None => vec![host.fresh_id()],
                };
                let calls: Vec<(String, &Call)> =
                    ids.into_iter().map(|id| (id, &case.call)).collect();
                turn_json(host.format, &calls)
            }
        };
        let got = host.send(body).await;
        failures.extend(judge(&case.expect(format), &got).map(|d| format!("{name}: {d}")));
        let seen = match &got {
            Ok(r) => format!("{r:?}"),
            Err(s) => format!("{:?} {}", s.code(), s.message()),
        };
        failures.extend(secrets.check(&name, "the answer", &seen));
        failures.extend(long_error(&got).map(|d| format!("{name}: {d}")));
        // The plane keeps serving.
        host.ok(cheap, &format!("{name}: the call after it")).await;
        if t0.elapsed() > Duration::from_secs(1) {
            println!("slow: {name}: {:?}", t0.elapsed());
        }
    }
    failures
}

/// A data directory in memory when the machine has one: the suite measures the plane, not the
/// disk's fsync.
fn data_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("toolplane-hostile-")
            .tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_inputs_in_every_format_get_their_documented_codes_and_cost_bounded_memory() {
    let started = Instant::now();
    let data = data_dir();
    let data_path = data.path().to_string_lossy().into_owned();
    let up = tokio::task::block_in_place(|| Up::start(&["--data-dir", &data_path]));
    let pid = up.child.as_ref().unwrap().id();
    prepare(&up).await;
    let runtime = RuntimeServiceClient::new(channel(up.ports.runtime).await)
        .max_decoding_message_size(64 << 20);
    // The call after each case: cheap, and independent of what the case left in the workspace.
    let cheap = Call {
        tool: "dice_roll".into(),
        args: Args::Value(json!({"notation": "d6"})),
    };
    let mut hosts = Vec::new();
    for (format, _) in FORMATS {
        let mut host = Host::new(runtime.clone(), format).await;
        host.ok(&cheap, "warm-up").await;
        hosts.push(host);
    }
    let idle = vm_hwm_kib(pid);
    let cpu_before = cpu_seconds(pid);

    let cases = std::sync::Arc::new(corpus());
    let binary = bin().parent().unwrap().to_string_lossy().into_owned();
    let secrets = std::sync::Arc::new(Secrets(vec![
        data_path,
        up.dir.path().to_string_lossy().into_owned(),
        binary,
        "127.0.0.1:".into(),
    ]));
    // The four formats at once, as four hosts would send them.
    let mut running = tokio::task::JoinSet::new();
    for (mut host, (_, format)) in hosts.into_iter().zip(FORMATS) {
        let (cases, secrets, cheap) = (cases.clone(), secrets.clone(), cheap.clone());
        running.spawn(async move {
            let failures = run_format(&mut host, format, &cases, &secrets, &cheap).await;
            (failures, host.sessions)
        });
    }
    let mut failures = Vec::new();
    let mut sessions = 0;
    while let Some(done) = running.join_next().await {
        let (f, s) = done.unwrap();
        failures.extend(f);
        sessions += s;
    }
    let peak = vm_hwm_kib(pid);
    println!(
        "hostile suite: {} cases x 4 formats, {sessions} runs, VmHWM {} MiB idle, {} MiB after (+{} MiB), the plane's CPU {:.1} s, {:.1} s in all",
        cases.len(),
        idle / 1024,
        peak / 1024,
        peak.saturating_sub(idle) / 1024,
        cpu_seconds(pid) - cpu_before,
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len() * 4,
        failures.join("\n")
    );
    assert!(
        peak.saturating_sub(idle) < MAX_HWM_GROWTH_KIB,
        "VmHWM grew from {idle} KiB to {peak} KiB"
    );

    let (status, stdout, stderr) = tokio::task::block_in_place(|| up.interrupt());
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
