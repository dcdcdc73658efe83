//! Runtime benchmarks with durable audit and journal on, over real loopback gRPC, the whole plane
//! in this process (as `toolplane up` runs it), each figure a ratio against a baseline measured in
//! the same run:
//! - `ExecuteToolCalls` of one `workspace.read_file` vs a bare tonic echo (target ≤ 6×);
//! - `ExecuteToolCalls` of one `dice.roll` vs the echo (target ≤ 4×);
//! - throughput of turns (alternately `dice.roll` and `workspace.read_file`) at 1, 16 and 64
//!   concurrent invocations (64 ≥ 8× of 1; `TOOLPLANE_BENCH_LEVELS=1,64,128` measures others);
//!   before them, the same levels of a bare echo and of an echo reached through a relay, how far
//!   servers that do nothing scale on this machine;
//! - RSS of 1,000 open invocations above idle (target < 100 MiB);
//! - only with `TOOLPLANE_BENCH_ONLY=auth`: `ExecuteToolCalls` on a plane with authentication on
//!   (an agent token on every call) vs the same on a plane with it off (target ≤ 1.05×; `auth.rs`);
//! - only with `TOOLPLANE_BENCH_ONLY=mcp`: an MCP `tools/call` of `dice.roll` through `/mcp` vs
//!   the same call through `ExecuteToolCalls` (target ≤ 1.3×; `mcp.rs`);
//! - only with `TOOLPLANE_BENCH_ONLY=cluster`: `ExecuteToolCalls` through a runtime in cluster
//!   mode (PostgreSQL store, run leases on) vs the plane's local runtime, and calls/s of 32
//!   invocations on one replica vs split over two over one store, with the CPU per call
//!   (`cluster.rs`).
//!
//! Run with `cargo bench -p toolplane --bench runtime`.

// A benchmark's set-up either works or the benchmark is meaningless.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use tonic::transport::Channel;
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_proto::v1::workspace_service_client::WorkspaceServiceClient;

#[path = "runtime/auth.rs"]
mod auth;
#[path = "runtime/cluster.rs"]
mod cluster;
#[path = "runtime/mcp.rs"]
mod mcp;

/// The allocator the shipped binaries use (BENCHMARKS.md, "Allocator"), so that the plane in this
/// process runs as `toolplane up` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SAMPLES: usize = 2000;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap()
}

/// CPU time of this process (every thread: the plane and the benchmark's clients), in ms.
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line (11 and 12 after the name); 100 ticks/s.
    (ticks(11) + ticks(12)) * 10.0
}

/// Turns a throughput client takes in one invocation, below the bench profile's `maxRounds`.
const ROUNDS_PER_INVOCATION: usize = 900;

struct Inv {
    id: String,
    turn: String,
}

/// What a runtime client's transport must be: a plain channel, or one that adds a credential.
trait Transport:
    tonic::client::GrpcService<
        tonic::body::Body,
        Error: Into<tonic::codegen::StdError>,
        ResponseBody: tonic::codegen::Body<
            Data = tonic::codegen::Bytes,
            Error: Into<tonic::codegen::StdError> + Send,
        > + Send
                          + 'static,
    >
{
}

impl<T> Transport for T where
    T: tonic::client::GrpcService<
            tonic::body::Body,
            Error: Into<tonic::codegen::StdError>,
            ResponseBody: tonic::codegen::Body<
                Data = tonic::codegen::Bytes,
                Error: Into<tonic::codegen::StdError> + Send,
            > + Send
                              + 'static,
        >
{
}

/// A background run of the bench profile.
async fn create_run<T: Transport>(rt: &mut RuntimeServiceClient<T>) -> pb::Run {
    rt.create_run(pb::CreateRunRequest {
        profile_id: "bench".into(),
        mode: pb::RunMode::Background as i32,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

async fn open<T: Transport>(rt: &mut RuntimeServiceClient<T>) -> Inv {
    let run = create_run(rt).await;
    let inv = rt
        .open_invocation(pb::OpenInvocationRequest {
            run_id: run.run_id,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    Inv {
        id: inv.invocation_id,
        turn: inv.first_turn.unwrap().turn_id,
    }
}

/// One side's latency samples: how many calls its current invocation has had, and the times of
/// its `read_file` and `dice.roll` calls.
struct Samples {
    n: usize,
    read: Vec<Duration>,
    dice: Vec<Duration>,
}

impl Samples {
    fn new() -> Samples {
        Samples {
            n: 1,
            read: Vec::new(),
            dice: Vec::new(),
        }
    }

    /// Whether the invocation has had its share of calls: the side opens a fresh one (and calls
    /// [`Samples::restart`]) before its next round.
    fn spent(&self) -> bool {
        self.n > 900
    }

    fn restart(&mut self) {
        self.n = 1;
    }

    /// One timed `read_file`, then one timed `dice.roll`, on `inv`; kept after the warm-up.
    async fn round<T: Transport>(
        &mut self,
        rt: &mut RuntimeServiceClient<T>,
        inv: &mut Inv,
        keep: bool,
    ) {
        let t = Instant::now();
        let path = json!({"path": "output/a.md"});
        call(rt, inv, self.n, "workspace_read_file", path).await;
        let read = t.elapsed();
        let t = Instant::now();
        call(
            rt,
            inv,
            self.n + 1,
            "dice_roll",
            json!({"notation": "3d6+4"}),
        )
        .await;
        let dice = t.elapsed();
        self.n += 2;
        if keep {
            self.read.push(read);
            self.dice.push(dice);
        }
    }
}

async fn call<T: Transport>(
    rt: &mut RuntimeServiceClient<T>,
    inv: &mut Inv,
    n: usize,
    alias: &str,
    args: serde_json::Value,
) {
    let calls = json!({"role": "assistant", "tool_calls": [{"id": format!("c{n}"), "type": "function", "function": {"name": alias, "arguments": args.to_string()}}]});
    let r = rt
        .execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: inv.id.clone(),
            turn_id: inv.turn.clone(),
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            calls_json: calls.to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.results[0].is_error, "{:?}", r.results[0]);
    inv.turn = r.next_turn.unwrap().turn_id;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `TOOLPLANE_BENCH_ONLY=latency`, `=throughput` or `=auth` runs one part (for profiling it
    // alone); the authentication part runs only when asked for, with planes of its own, and the
    // cluster part (`=cluster`) with runtimes of its own beside this plane.
    let only = std::env::var("TOOLPLANE_BENCH_ONLY").unwrap_or_default();
    if only == "auth" {
        auth::overhead().await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = PlaneConfig::ephemeral(dir.path().to_path_buf());
    cfg.runtime.invocation_idle_timeout = Duration::from_secs(3600);
    let plane = Plane::up(cfg).await.unwrap();
    put_bench_profile(&plane.catalog_url(), None).await;
    let mut rt = RuntimeServiceClient::new(channel(&plane.runtime_url()).await);

    let _warm = open(&mut rt).await;
    if only.is_empty() {
        memory(&mut rt).await;
        // A pause, as between two bursts: the workspace closes the quiet log segment and
        // checkpoints the 1,000 runs' records and objects now, not during the next part.
        tokio::time::sleep(Duration::from_secs(8)).await;
    }
    if only.is_empty() || only == "latency" {
        latency(&mut rt, &plane.workspace_url()).await;
    }
    if only.is_empty() || only == "throughput" {
        throughput(&mut rt).await;
    }
    if only == "mcp" {
        mcp::overhead(&mut rt, &plane.metrics_urls()[0]).await;
    }
    if only == "cluster" {
        cluster::overhead(&plane, &rt).await;
    }
    plane.shutdown().await;
}

/// Puts the bench profile, with `authorization` when given (an admin's `Bearer …`).
async fn put_bench_profile(catalog_url: &str, authorization: Option<&str>) {
    let mut profiles = ProfileServiceClient::new(channel(catalog_url).await);
    let profile = json!({"id": "bench", "tools": {"allow": ["builtin:workspace.read_file", "builtin:workspace.write_file", "builtin:dice.roll"], "maxCallsPerInvocation": 10000, "maxRounds": 1000}});
    let mut request = tonic::Request::new(pb::PutProfileRequest {
        profile_id: "bench".into(),
        profile_json: profile.to_string(),
        ..Default::default()
    });
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    profiles.put_profile(request).await.unwrap();
}

async fn memory(rt: &mut RuntimeServiceClient<Channel>) {
    // Memory: 1,000 open invocations above idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle = rss_kib();
    // Measured first, so that the idle figure is the plane's own (after one warm-up invocation),
    // not memory left over from the other measurements.
    let mut open_ones = Vec::new();
    for _ in 0..1000 {
        open_ones.push(open(rt).await);
    }
    let loaded = rss_kib();
    let mib = (loaded.saturating_sub(idle)) as f64 / 1024.0;
    println!(
        "RSS idle {} MiB, with 1000 open invocations {} MiB: +{mib:.1} MiB (target < 100) {}",
        idle / 1024,
        loaded / 1024,
        if mib < 100.0 { "ok" } else { "MISSED" }
    );
    drop(open_ones);
}

/// One tool call's journal append as the runtime sends it (four records, the two audit objects),
/// straight to the workspace service: the share of a call that is storage.
async fn append(ws: &mut WorkspaceServiceClient<Channel>, run_id: &str, seq: u64) {
    let record = |kind: &str| {
        pb::JournalEvent {
        r#type: kind.to_owned(),
        payload_json: json!({"invocationId": "bench", "callId": format!("c{seq}"), "toolId": "builtin:dice.roll", "alias": "dice_roll"}).to_string(),
        ..Default::default()
    }
    };
    let object = |dir: &str| {
        pb::AuditObjectWrite {
        path: format!("{dir}/bench/call_{seq:016x}.json"),
        content: json!({"callId": format!("c{seq}"), "arguments": {"notation": "3d6+4"}, "result": {"content": "3d6+4 = 15", "isError": false}}).to_string().into_bytes(),
        content_type: "application/json".into(),
    }
    };
    ws.append_journal(pb::AppendJournalRequest {
        run_id: run_id.to_owned(),
        expected_seq: seq,
        records: [
            "tool_call_requested",
            "tool_call_started",
            "tool_call_completed",
            "tool_result_stored",
        ]
        .into_iter()
        .map(record)
        .collect(),
        epoch: 1,
        objects: vec![object("tool-args"), object("tool-results")],
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn latency(rt: &mut RuntimeServiceClient<Channel>, workspace_url: &str) {
    let (echo_addr, _echo) = toolplane_testkit::spawn_echo_server().await.unwrap();
    let mut echo = toolplane_testkit::connect_echo(echo_addr).await.unwrap();
    // A run of its own for the direct appends, which the runtime never writes to.
    let mut ws = WorkspaceServiceClient::new(channel(workspace_url).await);
    let append_run = create_run(rt).await;
    let mut append_seq = append_run.last_seq + 1;
    let mut t_append = Vec::new();
    // Latency: interleave echo, read and dice so load changes hit all three alike.
    let mut inv = open(rt).await;
    call(
        rt,
        &mut inv,
        0,
        "workspace_write_file",
        json!({"path": "output/a.md", "content": "line one\nline two\n"}),
    )
    .await;
    let (mut t_echo, mut t_read, mut t_dice) = (Vec::new(), Vec::new(), Vec::new());
    let mut n = 1;
    for i in 0..SAMPLES + 200 {
        let t = Instant::now();
        echo.echo(EchoRequest {
            payload: vec![7; 64],
        })
        .await
        .unwrap();
        let e = t.elapsed();
        let t = Instant::now();
        call(
            rt,
            &mut inv,
            n,
            "workspace_read_file",
            json!({"path": "output/a.md"}),
        )
        .await;
        let r = t.elapsed();
        n += 1;
        let t = Instant::now();
        call(rt, &mut inv, n, "dice_roll", json!({"notation": "3d6+4"})).await;
        let d = t.elapsed();
        n += 1;
        let t = Instant::now();
        append(&mut ws, &append_run.run_id, append_seq).await;
        let a = t.elapsed();
        append_seq += 4;
        if i >= 200 {
            t_append.push(a);
            t_echo.push(e);
            t_read.push(r);
            t_dice.push(d);
        }
        if n > 900 {
            inv = open(rt).await;
            n = 1;
            call(
                rt,
                &mut inv,
                0,
                "workspace_write_file",
                json!({"path": "output/a.md", "content": "line one\nline two\n"}),
            )
            .await;
        }
    }
    let (echo_m, read_m, dice_m) = (median(t_echo), median(t_read), median(t_dice));
    let read_ratio = read_m.as_secs_f64() / echo_m.as_secs_f64();
    let dice_ratio = dice_m.as_secs_f64() / echo_m.as_secs_f64();
    println!("echo p50 {:?}", echo_m);
    println!(
        "ExecuteToolCalls read_file p50 {:?} = {read_ratio:.2}× echo (target ≤ 6) {}",
        read_m,
        if read_ratio <= 6.0 { "ok" } else { "MISSED" }
    );
    println!(
        "ExecuteToolCalls dice.roll p50 {:?} = {dice_ratio:.2}× echo (target ≤ 4) {}",
        dice_m,
        if dice_ratio <= 4.0 { "ok" } else { "MISSED" }
    );
    let append_m = median(t_append);
    println!(
        "of which storage: one call's AppendJournal straight to the workspace p50 {:?} = {:.2}× echo",
        append_m,
        append_m.as_secs_f64() / echo_m.as_secs_f64()
    );
}

/// An invocation ready for the throughput part: open, with `output/a.md` written.
async fn ready(rt: &mut RuntimeServiceClient<Channel>) -> Inv {
    let mut inv = open(rt).await;
    call(
        rt,
        &mut inv,
        10_000,
        "workspace_write_file",
        json!({"path": "output/a.md", "content": "x\n"}),
    )
    .await;
    inv
}

async fn throughput(rt: &mut RuntimeServiceClient<Channel>) {
    // Throughput at 1, 16 and 64 concurrent invocations, each a client doing turns back to back
    // for the same 4 s: a client whose invocation reaches the profile's round limit goes on in a
    // fresh one (the time to open it counts), so every level is measured over the same window,
    // checkpoints of the journal log included.
    // `TOOLPLANE_BENCH_LEVELS` (e.g. `1,64,128`) measures other levels; the first and the last
    // are compared.
    let levels: Vec<usize> = match std::env::var("TOOLPLANE_BENCH_LEVELS") {
        Ok(v) => v
            .split(',')
            .map(|n| n.trim().parse().ok().filter(|&n: &usize| n > 0))
            .collect::<Option<Vec<usize>>>()
            .filter(|l| l.len() >= 2)
            .expect("TOOLPLANE_BENCH_LEVELS: two or more positive counts, e.g. 1,64,128"),
        Err(_) => vec![1, 16, 64],
    };
    echo_throughput(&levels).await;
    let mut rates = Vec::new();
    for &conc in &levels {
        let mut invs = Vec::new();
        for _ in 0..conc {
            invs.push(ready(rt).await);
        }
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut tasks = Vec::new();
        for mut inv in invs {
            let mut client = rt.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0u64;
                let mut k = 0;
                while Instant::now() < deadline {
                    if k == ROUNDS_PER_INVOCATION {
                        inv = ready(&mut client).await;
                        // Its `write_file` is a call like the others.
                        done += 1;
                        k = 0;
                    }
                    // Alternating tools keeps the cycle detector (rightly) quiet.
                    if k % 2 == 0 {
                        call(
                            &mut client,
                            &mut inv,
                            k,
                            "dice_roll",
                            json!({"notation": "d6"}),
                        )
                        .await;
                    } else {
                        call(
                            &mut client,
                            &mut inv,
                            k,
                            "workspace_read_file",
                            json!({"path": "output/a.md"}),
                        )
                        .await;
                    }
                    done += 1;
                    k += 1;
                }
                done
            }));
        }
        let rate = calls_per_second(
            &format!("throughput at {conc:>2} concurrent invocations"),
            tasks,
        )
        .await;
        rates.push(rate);
    }
    let (first, last) = (levels[0], levels[levels.len() - 1]);
    let scale = rates[rates.len() - 1] / rates[0];
    if (first, last) == (1, 64) {
        println!(
            "64 vs 1: {scale:.2}× (target ≥ 8) {}",
            if scale >= 8.0 { "ok" } else { "MISSED" }
        );
    } else {
        println!("{last} vs {first}: {scale:.2}×");
    }
}

/// An echo server that answers each request by calling the next echo server: the shape of a
/// runtime call that the workspace serves (host → runtime → workspace), with no work at either.
#[derive(Clone)]
struct Relay {
    next: EchoServiceClient<Channel>,
}

#[tonic::async_trait]
impl EchoService for Relay {
    async fn echo(
        &self,
        request: tonic::Request<EchoRequest>,
    ) -> Result<tonic::Response<EchoResponse>, tonic::Status> {
        let mut next = self.next.clone();
        next.echo(request.into_inner()).await
    }
}

/// The baselines for the throughput levels, in this process: a bare tonic echo server, and the
/// same echo reached through a relay (one more hop, as a `workspace.read_file` call takes), their
/// clients sharing one channel as the plane's do, each calling back to back for 4 s. How far
/// servers that do nothing scale from one caller to many on this machine bounds what the plane's
/// ratio can be (BENCHMARKS.md, "Runtime").
async fn echo_throughput(levels: &[usize]) {
    let (echo_addr, _echo) = toolplane_testkit::spawn_echo_server().await.unwrap();
    let echo = toolplane_testkit::connect_echo(echo_addr).await.unwrap();
    let relay = Relay { next: echo.clone() };
    let relay_server =
        toolplane_testkit::spawn_routes(tonic::service::Routes::new(EchoServiceServer::new(relay)))
            .await
            .unwrap();
    let relayed = toolplane_testkit::connect_echo(relay_server.addr())
        .await
        .unwrap();
    for (name, client) in [("bare echo", echo), ("relayed echo", relayed)] {
        let mut rates = Vec::new();
        for &conc in levels {
            let deadline = Instant::now() + Duration::from_secs(4);
            let tasks: Vec<_> = (0..conc)
                .map(|_| {
                    let mut client = client.clone();
                    tokio::spawn(async move {
                        let mut done = 0u64;
                        while Instant::now() < deadline {
                            client
                                .echo(EchoRequest {
                                    payload: vec![7; 64],
                                })
                                .await
                                .unwrap();
                            done += 1;
                        }
                        done
                    })
                })
                .collect();
            let rate = calls_per_second(
                &format!("baseline: {name} at {conc:>2} concurrent callers"),
                tasks,
            )
            .await;
            rates.push(rate);
        }
        println!(
            "baseline: {name} {} vs {}: {:.2}×",
            levels[levels.len() - 1],
            levels[0],
            rates[rates.len() - 1] / rates[0]
        );
    }
}

/// Waits for clients that each return how many calls they made, and prints (after `label`) their
/// rate from now on, the process's CPU time per call and the cores it kept busy; returns the rate.
async fn calls_per_second(label: &str, clients: Vec<tokio::task::JoinHandle<u64>>) -> f64 {
    let started = Instant::now();
    let cpu_before = cpu_ms();
    let mut total = 0;
    for c in clients {
        total += c.await.unwrap();
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_ms() - cpu_before;
    let rate = total as f64 / wall;
    println!(
        "{label}: {rate:.0} calls/s ({:.3} ms of CPU per call, {:.2} cores busy)",
        cpu / total as f64,
        cpu / 1000.0 / wall
    );
    rate
}
