//! `toolplane up` start-up and idle memory, measured on the real binary as a user starts it:
//! - time from spawning `toolplane up` (fresh data directory, free ports) until all four services
//!   answer `grpc.health.v1.Health/Check` with SERVING, against the time from spawning a bare
//!   tonic server process (this benchmark re-executed as the testkit echo server with gRPC health)
//!   until its health check passes, both measured here, interleaved (target < 2×). Both are
//!   measured the same way: read the process's output until it says it is listening (the bare
//!   server prints its address, `toolplane --json up` its `"event":"up"` line with the services'
//!   addresses), then check health
//!   (polling every 2 ms until SERVING should that first check fail);
//!   and, for reference, the bare server checked by four concurrent clients, as the four services
//!   are;
//! - resident memory (VmRSS) of the idle all-in-one process, a few seconds after it is up
//!   (target < 60 MiB).
//!
//! Run with `cargo bench -p toolplane --bench up` (`TOOLPLANE_BENCH_ROUNDS`, default 15). With
//! `TOOLPLANE_BENCH_AGAINST=<path of another toolplane binary>` each round also starts that build
//! on the same data directory, so two builds are compared interleaved, on the same baseline.
//! `TOOLPLANE_BENCH_SPENT=1` also prints what each kind of process spent (CPU over its threads,
//! minor page faults) up to its line and up to its passing health checks; reading `/proc` on the
//! way delays the checks, so the times of such a run are not the figures to record.

// A benchmark's set-up either works or the benchmark is meaningless.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Set in the child that serves the baseline.
const CHILD_ENV: &str = "TOOLPLANE_BENCH_BARE_TONIC";

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

/// Polls `addr` until its overall health is SERVING (connection refused counts as not yet).
async fn wait_healthy(addr: &str, deadline: Instant) {
    let url = format!("http://{addr}");
    loop {
        assert!(Instant::now() < deadline, "{addr} was not healthy in time");
        if let Ok(channel) = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .connect()
            .await
        {
            let mut health = HealthClient::new(channel);
            if let Ok(r) = health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                && r.into_inner().status == ServingStatus::Serving as i32
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What a process has spent so far: CPU over all its threads (from each thread's `schedstat`)
/// and minor page faults.
#[derive(Debug, Clone, Copy)]
struct Spent {
    cpu: Duration,
    faults: u64,
}

fn spent(pid: u32) -> Spent {
    let mut cpu_ns = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            cpu_ns += stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    // `/proc/<pid>/stat`: the fields after the command's closing parenthesis; minflt is the 8th.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let faults = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Spent {
        cpu: Duration::from_nanos(cpu_ns),
        faults,
    }
}

/// `TOOLPLANE_BENCH_SPENT=1`: each start also records what the process spent up to its line and
/// up to its passing health checks. Reading `/proc` delays the checks, so the times of such a run
/// are not comparable with a plain one.
static SPENT: std::sync::Mutex<Vec<(String, Spent, Spent)>> = std::sync::Mutex::new(Vec::new());

fn sampling() -> bool {
    std::env::var_os("TOOLPLANE_BENCH_SPENT").is_some()
}

/// Records what process `pid` spent by now, once healthy, next to what it had spent at its line.
fn record_spent(label: String, at_line: Spent, pid: u32) {
    SPENT.lock().unwrap().push((label, at_line, spent(pid)));
}

/// The baseline: one bare tonic server (echo + health) in a fresh process, health-checked by
/// `checks` concurrent clients (1 for the baseline; 4 shows what checking four services costs
/// the checker). Returns the time to its address line and the time to its health checks.
async fn bare_tonic(checks: u8) -> (Duration, Duration) {
    let start = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let listening = start.elapsed();
    let at_line = sampling().then(|| spent(child.id()));
    let (addr, deadline) = (line.trim(), start + Duration::from_secs(20));
    match checks {
        1 => wait_healthy(addr, deadline).await,
        4 => {
            tokio::join!(
                wait_healthy(addr, deadline),
                wait_healthy(addr, deadline),
                wait_healthy(addr, deadline),
                wait_healthy(addr, deadline),
            );
        }
        n => panic!("the bare server is checked by 1 or 4 clients, not {n}"),
    }
    let took = start.elapsed();
    if let Some(at_line) = at_line {
        record_spent(
            format!("bare server, {checks} check(s)"),
            at_line,
            child.id(),
        );
    }
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    (listening, took)
}

/// The subject: `toolplane up` with every service healthy; returns the time to its banner, the
/// time to all four health checks, and the process. Every port is 0 (the system picks free ones),
/// read back from the banner, so no port picked beforehand can be taken meanwhile.
async fn toolplane_up(dir: &std::path::Path) -> (Duration, Duration, Child) {
    toolplane_up_with(env!("CARGO_BIN_EXE_toolplane").as_ref(), dir).await
}

async fn toolplane_up_with(
    binary: &std::path::Path,
    dir: &std::path::Path,
) -> (Duration, Duration, Child) {
    let new = !dir.join(".toolplane").exists();
    let start = Instant::now();
    let mut child = Command::new(binary)
        .current_dir(dir)
        .args(["--json", "up", "--data-dir", ".toolplane"])
        .args(["--runtime-port", "0", "--catalog-port", "0"])
        .args(["--catalog-http-port", "0", "--workspace-port", "0"])
        .args(["--mcp-proxy-port", "0", "--runtime-http-port", "0"])
        .args(["--workspace-http-port", "0", "--mcp-proxy-http-port", "0"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // As for the baseline: wait for the process to say it is listening (its `"event":"up"` line,
    // which names the services' addresses), then check health.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    assert!(
        stdout.read_line(&mut line).unwrap() > 0,
        "toolplane up ended before saying it is up"
    );
    let banner = start.elapsed();
    let at_line = sampling().then(|| spent(child.id()));
    let up: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(up["event"], "up", "{line}");
    let addrs: Vec<String> = ["runtime", "catalog", "workspace", "mcpProxy"]
        .iter()
        .map(|k| {
            let url = up[k].as_str().expect("an address");
            url.trim_start_matches("http://").to_owned()
        })
        .collect();
    // Keep draining its output so the process never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let deadline = start + Duration::from_secs(30);
    // The four services are polled concurrently, as a client of each would.
    let [rt, cat, ws, mcp] = <[String; 4]>::try_from(addrs).unwrap();
    tokio::join!(
        wait_healthy(&rt, deadline),
        wait_healthy(&cat, deadline),
        wait_healthy(&ws, deadline),
        wait_healthy(&mcp, deadline),
    );
    let took = start.elapsed();
    if let Some(at_line) = at_line {
        let label = format!(
            "{}{}",
            binary.display(),
            if new { ", new data directory" } else { "" }
        );
        record_spent(label, at_line, child.id());
    }
    (banner, took, child)
}

fn serve_bare_tonic() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (addr, _server) = toolplane_testkit::spawn_echo_server().await.unwrap();
        println!("{addr}");
        // Serve until the parent closes stdin or kills this process.
        let _ = tokio::task::spawn_blocking(|| {
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())
        })
        .await;
    });
}

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        serve_bare_tonic();
        return;
    }
    let rounds: usize = std::env::var("TOOLPLANE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15)
        .max(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // One of each first, unmeasured: page cache and binaries warm for both.
        let _ = bare_tonic(1).await;
        let warm = tempfile::tempdir().unwrap();
        stop(toolplane_up(warm.path()).await.2);

        // `toolplane up` is usually started again on the data directory it used before; the very
        // first start also creates and fsyncs every store. Both are measured.
        let existing = tempfile::tempdir().unwrap();
        stop(toolplane_up(existing.path()).await.2);
        let (mut base, mut again, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
        let (mut base_line, mut again_banner) = (Vec::new(), Vec::new());
        let mut rss = Vec::new();
        let mut four_checks = Vec::new();
        let against = std::env::var_os("TOOLPLANE_BENCH_AGAINST").map(std::path::PathBuf::from);
        let (mut other, mut other_banner) = (Vec::new(), Vec::new());
        if let Some(bin) = &against {
            stop(toolplane_up_with(bin, warm.path()).await.2);
        }
        for i in 0..rounds {
            let (listening, took) = bare_tonic(1).await;
            base_line.push(listening);
            base.push(took);
            four_checks.push(bare_tonic(4).await.1);
            let (banner, took, child) = toolplane_up(existing.path()).await;
            again_banner.push(banner);
            again.push(took);
            if i < 3 {
                // Idle: nothing calls it for a few seconds (the catalog's refresher still runs).
                tokio::time::sleep(Duration::from_secs(3)).await;
                rss.push(rss_kib(child.id()));
            }
            stop(child);
            if let Some(bin) = &against {
                let (banner, took, child) = toolplane_up_with(bin, existing.path()).await;
                other_banner.push(banner);
                other.push(took);
                stop(child);
            }
            let dir = tempfile::tempdir().unwrap();
            let (_, took, child) = toolplane_up(dir.path()).await;
            fresh.push(took);
            stop(child);
        }
        let (b, a, f) = (median(base), median(again), median(fresh));
        let ratio = a.as_secs_f64() / b.as_secs_f64();
        let fresh_ratio = f.as_secs_f64() / b.as_secs_f64();
        let rss_mib = rss.iter().copied().max().unwrap_or(0) as f64 / 1024.0;
        println!("rounds {rounds}");
        println!(
            "bare tonic server process to healthy, p50 {b:?} (its address line at {:?})",
            median(base_line)
        );
        println!(
            "(the same bare server checked by four concurrent clients, as the four services are: p50 {:?})",
            median(four_checks)
        );
        println!(
            "toolplane up (existing data directory) to all four services healthy, p50 {a:?} = {ratio:.2}× (target < 2) {} (its banner at {:?})",
            if ratio < 2.0 { "ok" } else { "MISSED" },
            median(again_banner)
        );
        if let Some(bin) = &against {
            let o = median(other);
            println!(
                "{} (existing data directory), interleaved: p50 {o:?} = {:.2}× (its banner at {:?})",
                bin.display(),
                o.as_secs_f64() / b.as_secs_f64(),
                median(other_banner)
            );
        }
        let spent = std::mem::take(&mut *SPENT.lock().unwrap());
        let mut labels: Vec<&String> = spent.iter().map(|(l, ..)| l).collect();
        labels.sort();
        labels.dedup();
        for label in labels {
            let of = || spent.iter().filter(|s| &s.0 == label);
            println!(
                "spent by {label}: to its line {:?} CPU, {} faults; to healthy {:?} CPU, {} faults",
                median(of().map(|s| s.1.cpu).collect()),
                median(of().map(|s| s.1.faults).collect()),
                median(of().map(|s| s.2.cpu).collect()),
                median(of().map(|s| s.2.faults).collect()),
            );
        }
        println!(
            "toolplane up (new data directory: stores created and fsynced) to all four healthy, p50 {f:?} = {fresh_ratio:.2}× (target < 2) {}",
            if fresh_ratio < 2.0 { "ok" } else { "MISSED" }
        );
        println!(
            "toolplane up idle RSS {rss_mib:.1} MiB (max of {} samples, target < 60) {}",
            rss.len(),
            if rss_mib < 60.0 { "ok" } else { "MISSED" }
        );
    });
}
