//! The workspace service's benchmarks, each a ratio against a baseline measured in the same run
//! (subject and baseline interleaved, so drift and other load hit both).
//!
//! Run: `cargo bench -p toolplane-workspace --bench workspace` (or `-- io`, `-- search`,
//! `-- journal` for one part). Needs ripgrep (`RG` or `rg` on PATH); the corpus is generated
//! deterministically under `target/bench-corpus/`.
//!
//! **io** — `read_file` over gRPC vs the bare tonic echo of the same payload; `write_file` and
//! `apply_patch` over gRPC vs the echo plus a raw durable write of the same bytes (temp file,
//! fsync, rename, directory fsync). 600 interleaved rounds, medians.
//!
//! **search** — `workspace.search_files` for `quixotic` over a 10,000-file / 100 MB corpus (800
//! matching lines in 200 files) copied into a run's `output/`, against `rg -j1 -i -n --no-heading
//! quixotic` on the same folder, run as a process (its start-up counted). The service keeps no
//! index: every call is a full scan that lists the folder, reads every file, checks it is text,
//! finds every match and builds and ranks every hunk (`totalMatches` must equal rg's line count),
//! so there is no index build to count. One untimed run of each warms the page cache, then 7
//! interleaved rounds; medians. The service scans with its process-wide thread budget (one
//! thread per core, here 2) while `rg -j1` uses one thread; the informational lines give the
//! in-process scan with one thread and with the budget against the same rg median, so the share
//! of the parallelism is visible.
//!
//! **journal** — records made durable per second by 16 concurrent runs, each doing what the
//! runtime does per tool call: one `AppendJournal` of the call's 4 records (`tool_call_requested`,
//! `tool_call_started`, `tool_call_completed`, `tool_result_stored`, runtime envelopes) carrying
//! its 2 audit objects (arguments ~250 B, result ~1 KB; a new invocation, so new audit folders,
//! every 64 calls), over gRPC on loopback. (An
//! informational line measures the runtime's earlier pattern: the 2 objects put first with
//! concurrent `PutAuditObject(sync=false)` calls, then the append.) A window lasts 3 s; the rate counts records acknowledged in it and divides by the
//! window plus the time `Wal::checkpoint` then takes to make the window's objects durable in their
//! run trees and its records durable in journal files (segment deleted), so no durability work is
//! left out. Baseline: one fsync per record, the same bytes in-process without RPC — one log
//! file, per call the two object frames written (covered by the next record's fsync), then each
//! record frame written and fsynced (`sync_all`, the call the service's log makes) before the
//! next. Being in-process and RPC-free it is the fastest one-fsync-per-record log possible, so the
//! ratio is a lower bound for a per-record-sync service. 3 interleaved rounds, medians.
//! Informational: the window-only rate, the objects put with separate calls, the baseline with
//! `fdatasync`, and 16 threads each with its own log and one fsync per record (what the kernel
//! gains by overlapping independent fsyncs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use prost::Message;
use serde_json::json;
use sha2::{Digest, Sha256};
use tonic::transport::Channel;
use toolplane_proto::{
    testing::v1::EchoRequest,
    v1::{
        self as pb, tool_executor_client::ToolExecutorClient,
        workspace_service_client::WorkspaceServiceClient,
    },
};
use toolplane_text::{Matcher, normalize_query};
use toolplane_workspace::{
    EngineOptions, Workspace,
    limits::Limits,
    tools::search::{ScanOptions, ThreadBudget, scan},
};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const WORDS: &[&str] = &[
    "alpha", "river", "stone", "cloud", "paper", "lantern", "orbit", "copper", "meadow", "signal",
    "harbor", "velvet", "thunder", "maple", "quartz", "ember",
];

/// 10,000 files of ~10 KB (100 MB) of pseudo-random words; every 50th file holds "quixotic".
fn corpus(dir: &Path) {
    if dir.join("done").exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    for f in 0..10_000u32 {
        let sub = dir.join(format!("d{:03}", f / 100));
        std::fs::create_dir_all(&sub).unwrap();
        let mut text = String::with_capacity(10_600);
        let mut line = 0;
        while text.len() < 10_000 {
            for _ in 0..10 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                text.push_str(WORDS[(seed % WORDS.len() as u64) as usize]);
                text.push(' ');
            }
            if f % 50 == 0 && line % 40 == 7 {
                text.push_str("Quixotic");
            }
            text.push('\n');
            line += 1;
        }
        std::fs::write(sub.join(format!("f{f:05}.md")), text).unwrap();
    }
    std::fs::write(dir.join("done"), "").unwrap();
}

async fn execute(
    tools: &mut ToolExecutorClient<Channel>,
    tool: &str,
    args: serde_json::Value,
) -> pb::ToolResult {
    let r = tools
        .execute(pb::ExecuteRequest {
            context: Some(pb::ToolContext {
                run_id: "bench".into(),
                invocation_id: "i".into(),
                epoch: 1,
                ..Default::default()
            }),
            invocation: Some(pb::ToolInvocation {
                call_id: "c".into(),
                tool_id: format!("builtin:{tool}"),
                arguments_json: args.to_string(),
                provider_metadata_json: None,
            }),
            timeout_ms: None,
            trace: false,
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert!(!r.is_error, "{tool}: {}", r.content);
    r
}

fn raw_durable_write(dir: &Path, n: usize, bytes: &[u8]) {
    let tmp = dir.join(format!("tmp{n}"));
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    std::fs::rename(&tmp, dir.join("target")).unwrap();
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

fn rss_peak_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn create_run(storage: &mut WorkspaceServiceClient<Channel>, run: &str) {
    storage
        .create_run_workspace(pb::CreateRunWorkspaceRequest {
            manifest: Some(pb::RunWorkspaceManifest {
                run_id: run.into(),
                chat: Some(pb::ChatBinding {
                    chat_id: "c".into(),
                    message_id: None,
                }),
                ..Default::default()
            }),
            epoch: 1,
        })
        .await
        .unwrap();
}

struct Report {
    ok: bool,
}

impl Report {
    fn line(
        &mut self,
        name: &str,
        subject: f64,
        baseline: f64,
        target: f64,
        lower_is_better: bool,
    ) {
        let ratio = subject / baseline;
        let pass = if lower_is_better {
            ratio <= target
        } else {
            ratio >= target
        };
        self.ok &= pass;
        println!(
            "{name:<62} {subject:>12.3} {baseline:>12.3} {ratio:>8.3} {}{target:>6}  {}",
            if lower_is_better { "≤" } else { "≥" },
            if pass { "ok" } else { "MISSED" }
        );
    }

    fn info(&self, name: &str, subject: f64, baseline: f64) {
        println!(
            "{name:<62} {subject:>12.3} {baseline:>12.3} {:>8.3}   (info)",
            subject / baseline
        );
    }
}

async fn run() {
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let want = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let data = tempfile::tempdir_in(&target).unwrap();
    let ws = Arc::new(
        Workspace::open(EngineOptions {
            data_dir: data.path().to_path_buf(),
            limits: Limits::default(),
        })
        .await
        .unwrap(),
    );
    let server = toolplane_testkit::spawn_routes(
        toolplane_workspace::routes(Arc::clone(&ws)).await.unwrap(),
    )
    .await
    .unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.addr()))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    let mut storage = WorkspaceServiceClient::new(channel.clone());
    let mut tools = ToolExecutorClient::new(channel);
    create_run(&mut storage, "bench").await;
    storage
        .open_invocation_workspace(pb::OpenInvocationWorkspaceRequest {
            run_id: "bench".into(),
            invocation_id: "i".into(),
            epoch: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut report = Report { ok: true };
    println!(
        "{:<62} {:>12} {:>12} {:>8} {:>7}",
        "subject / baseline", "subject", "baseline", "ratio", "target"
    );
    if want("io") {
        io(&mut tools, &target, &mut report).await;
    }
    if want("search") {
        search(&ws, &mut tools, data.path(), &target, &mut report).await;
    }
    if want("journal") {
        journal(&ws, &mut storage, &target, &mut report).await;
    }
    println!("peak RSS: {} MiB", rss_peak_kb() / 1024);
    ws.shutdown();
    if !report.ok {
        println!("some targets were missed");
    }
}

/// read / write / patch vs echo (+ raw durable write), interleaved so drift hits both.
async fn io(tools: &mut ToolExecutorClient<Channel>, target: &Path, report: &mut Report) {
    let (echo_addr, _echo) = toolplane_testkit::spawn_echo_server().await.unwrap();
    let mut echo = toolplane_testkit::connect_echo(echo_addr).await.unwrap();
    let payload = "lorem ipsum dolor sit amet\n".repeat(40); // ~1 KB
    for path in ["output/r.md", "output/w2.md"] {
        execute(
            tools,
            "workspace.write_file",
            json!({"path": path, "content": payload}),
        )
        .await;
    }
    let raw_dir = tempfile::tempdir_in(target).unwrap();
    let (mut e, mut r, mut w, mut p, mut raw) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for n in 0..600 {
        let t = Instant::now();
        echo.echo(EchoRequest {
            payload: payload.clone().into_bytes(),
        })
        .await
        .unwrap();
        e.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        execute(tools, "workspace.read_file", json!({"path": "output/r.md"})).await;
        r.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        execute(
            tools,
            "workspace.write_file",
            json!({"path": "output/w.md", "content": payload}),
        )
        .await;
        w.push(t.elapsed().as_secs_f64() * 1e3);
        let (old, new) = if n % 2 == 0 {
            ("lorem", "LOREM")
        } else {
            ("LOREM", "lorem")
        };
        let t = Instant::now();
        execute(tools, "workspace.apply_patch", json!({"path": "output/w2.md", "old_string": old, "new_string": new, "replace_all": true})).await;
        p.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        raw_durable_write(raw_dir.path(), n, payload.as_bytes());
        raw.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (e, r, w, p, raw) = (median(e), median(r), median(w), median(p), median(raw));
    report.line("read_file (ms) / tonic echo", r, e, 2.0, true);
    report.line(
        "write_file (ms) / echo + raw durable write",
        w,
        e + raw,
        1.5,
        true,
    );
    report.line(
        "apply_patch (ms) / echo + raw durable write",
        p,
        e + raw,
        1.5,
        true,
    );
}

/// search_files over 10,000 files / 100 MB vs rg -j1.
async fn search(
    ws: &Arc<Workspace>,
    tools: &mut ToolExecutorClient<Channel>,
    data: &Path,
    target: &Path,
    report: &mut Report,
) {
    let run_dir = data.canonicalize().unwrap().join("tree/default/bench");
    let run_output = run_dir.join("output");
    std::fs::create_dir_all(&run_output).unwrap();
    let corpus_dir = target.join("bench-corpus");
    corpus(&corpus_dir);
    let copy = run_output.join("corpus");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(&corpus_dir)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::remove_file(copy.join("done")).unwrap();
    let rg = std::env::var("RG").unwrap_or_else(|_| "rg".into());
    let args =
        json!({"query": "quixotic", "path": "output/corpus/", "limit": 100, "context_lines": 0});
    let rg_run = || {
        let t = Instant::now();
        let out = Command::new(&rg)
            .args(["-j1", "-i", "-n", "--no-heading", "quixotic"])
            .arg(&copy)
            .output()
            .expect("ripgrep (rg) is installed: apt-get install -y ripgrep, or set RG");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        (
            ms,
            out.stdout.iter().filter(|b| **b == b'\n').count() as u64,
        )
    };
    // Warm the page cache for both.
    execute(tools, "workspace.search_files", args.clone()).await;
    rg_run();
    let (mut s, mut g) = (Vec::new(), Vec::new());
    let mut hits = 0;
    for _ in 0..7 {
        let t = Instant::now();
        let res = execute(tools, "workspace.search_files", args.clone()).await;
        s.push(t.elapsed().as_secs_f64() * 1e3);
        let st: serde_json::Value =
            serde_json::from_str(res.structured_json.as_deref().unwrap()).unwrap();
        hits = st["totalMatches"].as_u64().unwrap();
        assert_eq!(st["filesScanned"], 10_000, "a full scan");
        assert_eq!(
            st["results"].as_array().unwrap().len(),
            100,
            "ranked, best 100"
        );
        let (ms, lines) = rg_run();
        g.push(ms);
        assert_eq!(lines, hits, "both find every match");
    }
    let (s, g) = (median(s), median(g));
    report.line(
        &format!("search_files 10k files/100MB, {hits} hits (ms) / rg -j1"),
        s,
        g,
        2.0,
        true,
    );
    // The scan alone, in-process, sequential and with the thread budget.
    let matcher = Matcher::new(normalize_query("quixotic").unwrap());
    let limits = Limits::default();
    let budget = ThreadBudget::acquire().threads();
    for threads in [1, budget] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let (listed, _) = ws
                .tree()
                .list_files(&run_dir, "output/corpus", usize::MAX)
                .unwrap();
            let out = scan(
                ws.tree(),
                &run_dir,
                &listed,
                &Default::default(),
                &matcher,
                &ScanOptions {
                    context: 0,
                    max_file_bytes: limits.max_file_bytes,
                    max_search_bytes: limits.max_search_bytes,
                    max_snippet_chars: limits.max_snippet_chars,
                    threads,
                },
            )
            .unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(out.hits.len() as u64, hits);
        }
        report.info(
            &format!("  in-process list+scan, {threads} thread(s) (ms) / rg -j1"),
            median(times),
            g,
        );
    }
}

/// Tool calls of one agent invocation in the journal benchmark (the runtime caps an
/// invocation's rounds; its audit objects go to per-invocation folders).
const CALLS_PER_INVOCATION: u64 = 64;

/// The records and objects of one tool call, as the runtime sends them.
fn call_records(run: &str, call: u64) -> (Vec<(String, Vec<u8>)>, Vec<pb::JournalEvent>) {
    let file = format!("call_{call:016x}");
    let inv = format!("inv{}", call / CALLS_PER_INVOCATION);
    let args_path = format!("tool-args/{inv}/{file}.json");
    let result_path = format!("tool-results/{inv}/{file}.json");
    let args = json!({"callId": file, "toolId": "builtin:workspace.read_file", "alias": "workspace_read_file", "arguments": {"path": "output/notes.md", "start_line": 1, "line_count": 200}, "providerMetadata": null});
    let result = json!({"result": {"callId": file, "content": "L1: lorem ipsum dolor sit amet ".repeat(28), "isError": false, "resourceRefs": ["workspace:output/notes.md#L1-L28"]}, "outcome": "known", "elapsedMs": 3, "raw": null});
    let base = json!({"round": 1, "invocationId": inv, "callId": file, "toolId": "builtin:workspace.read_file", "snapshotId": "snap-0123456789abcdef", "alias": "workspace_read_file"});
    let mut done = base.clone();
    done["isError"] = json!(false);
    done["errorCode"] = json!(null);
    done["elapsedMs"] = json!(3);
    done["outcome"] = json!("known");
    done["resourceRefs"] = json!(["workspace:output/notes.md#L1-L28"]);
    done["argsPath"] = json!(args_path);
    done["resultPath"] = json!(result_path);
    let stored = json!({"invocationId": inv, "callId": file, "path": result_path});
    let records = [
        ("tool_call_requested", &base),
        ("tool_call_started", &base),
        ("tool_call_completed", &done),
        ("tool_result_stored", &stored),
    ]
    .into_iter()
    .map(|(kind, payload)| pb::JournalEvent {
        id: format!("{run}:{kind}:{call}"),
        run_id: run.into(),
        timestamp_unix_ms: 1_760_000_000_000,
        level: pb::JournalLevel::Info as i32,
        r#type: kind.into(),
        payload_json: payload.to_string(),
        scope: Some(pb::JournalScope {
            invocation_id: inv.clone(),
            related_invocation_ids: Vec::new(),
        }),
        ..Default::default()
    })
    .collect();
    (
        vec![
            (args_path, args.to_string().into_bytes()),
            (result_path, result.to_string().into_bytes()),
        ],
        records,
    )
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 12);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(body)[..8]);
    out.extend_from_slice(body);
    out
}

/// The baseline: one fsync per record, in-process, one log; returns records per second.
fn one_fsync_per_record(dir: &Path, window: Duration, data_only: bool) -> f64 {
    let start = Instant::now();
    let path = dir.join(format!("log-{data_only}"));
    let records = fsync_per_record_log(&path, start, window, data_only);
    records as f64 / start.elapsed().as_secs_f64()
}

/// 16 threads, each with its own log, one fsync per record (the kernel may overlap them).
fn one_fsync_per_record_16_logs(dir: &Path, window: Duration) -> f64 {
    let start = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let path = dir.join(format!("log-thread-{i}"));
                scope.spawn(move || fsync_per_record_log(&path, start, window, false))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / start.elapsed().as_secs_f64()
}

fn fsync_per_record_log(path: &Path, start: Instant, window: Duration, data_only: bool) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let mut records = 0u64;
    let mut call = 0u64;
    while start.elapsed() < window {
        let (objects, events) = call_records("base", call);
        call += 1;
        for (path, bytes) in &objects {
            let mut body = path.as_bytes().to_vec();
            body.extend_from_slice(bytes);
            f.write_all(&frame(&body)).unwrap();
        }
        for event in &events {
            f.write_all(&frame(&event.encode_to_vec())).unwrap();
            if data_only {
                f.sync_data().unwrap();
            } else {
                f.sync_all().unwrap();
            }
            records += 1;
        }
    }
    records
}

/// The subject: 16 runs doing the runtime's per-call work for `window` — the objects carried by
/// the append (`carried`, what the runtime sends) or put first with two `PutAuditObject` calls;
/// returns records per second over the window alone and including the checkpoint that follows.
async fn group_commit(
    ws: &Arc<Workspace>,
    storage: &WorkspaceServiceClient<Channel>,
    next_seq: &[Arc<AtomicU64>],
    window: Duration,
    carried: bool,
) -> (f64, f64) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (r, seq) in next_seq.iter().enumerate() {
        let mut c = storage.clone();
        let seq = Arc::clone(seq);
        tasks.push(tokio::spawn(async move {
            let run = format!("j{r}");
            let mut records = 0u64;
            while start.elapsed() < window {
                let first = seq.load(Ordering::Relaxed);
                let (objects, events) = call_records(&run, (first - 1) / 4);
                let mut writes = Vec::new();
                if carried {
                    writes = objects
                        .into_iter()
                        .map(|(path, content)| pb::AuditObjectWrite {
                            path,
                            content,
                            content_type: "application/json".into(),
                        })
                        .collect();
                } else {
                    let puts = objects.into_iter().map(|(path, content)| {
                        let mut c = c.clone();
                        let run = run.clone();
                        async move {
                            c.put_audit_object(pb::PutAuditObjectRequest {
                                run_id: run,
                                path,
                                content,
                                content_type: "application/json".into(),
                                epoch: 1,
                                allow_identical: false,
                                sync: false,
                                cell_id: String::new(),
                            })
                            .await
                            .unwrap()
                        }
                    });
                    futures::future::join_all(puts).await;
                }
                let n = events.len() as u64;
                c.append_journal(pb::AppendJournalRequest {
                    run_id: run.clone(),
                    expected_seq: first,
                    records: events,
                    epoch: 1,
                    cell_id: String::new(),
                    objects: writes,
                })
                .await
                .unwrap();
                seq.store(first + n, Ordering::Relaxed);
                records += n;
            }
            records
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let window_s = start.elapsed().as_secs_f64();
    ws.wal().unwrap().checkpoint().await.unwrap();
    assert_eq!(ws.wal().unwrap().pending_count(), 0);
    let all_s = start.elapsed().as_secs_f64();
    (total as f64 / window_s, total as f64 / all_s)
}

async fn journal(
    ws: &Arc<Workspace>,
    storage: &mut WorkspaceServiceClient<Channel>,
    target: &Path,
    report: &mut Report,
) {
    let runs: Vec<Arc<AtomicU64>> = (0..16).map(|_| Arc::new(AtomicU64::new(1))).collect();
    for r in 0..runs.len() {
        create_run(storage, &format!("j{r}")).await;
    }
    let raw_dir = tempfile::tempdir_in(target).unwrap();
    let window = Duration::from_secs(3);
    let (mut win, mut sustained, mut puts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut base, mut base_data, mut base_16) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let (w, s) = group_commit(ws, storage, &runs, window, true).await;
        win.push(w);
        sustained.push(s);
        let dir = raw_dir.path().to_path_buf();
        let (b, d, b16) = tokio::task::spawn_blocking(move || {
            (
                one_fsync_per_record(&dir, window, false),
                one_fsync_per_record(&dir, window, true),
                one_fsync_per_record_16_logs(&dir, window),
            )
        })
        .await
        .unwrap();
        base.push(b);
        base_data.push(d);
        base_16.push(b16);
        puts.push(group_commit(ws, storage, &runs, window, false).await.1);
    }
    let (win, sustained, puts) = (median(win), median(sustained), median(puts));
    let (base, base_data, base_16) = (median(base), median(base_data), median(base_16));
    report.line(
        "journal records/s, 16 runs, group commit / fsync per record",
        sustained,
        base,
        4.0,
        false,
    );
    report.info(
        "  window only (checkpoint after it not counted) / same",
        win,
        base,
    );
    report.info("  objects put by 2 PutAuditObject first / same", puts, base);
    report.info(
        "  group commit / one fdatasync per record",
        sustained,
        base_data,
    );
    report.info(
        "  group commit / 16 logs, one fsync per record each",
        sustained,
        base_16,
    );
}
