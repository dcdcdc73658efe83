//! Runs that outlive their replica (docs/runtime.md, "Taking a run over"; docs/workspace.md, "On a
//! shared store"): two processes of every service — runtime (run leases on), workspace, catalog
//! and mcp-proxy — over one PostgreSQL server (the store tests' own), each service's replicas
//! behind one address as a Kubernetes Service puts them ([`Balancer`]). Twenty scripted runs go
//! through two runtimes; one runtime is killed with SIGKILL mid-run, then one workspace, and every
//! run still completes. Then a rolling restart — every replica stopped with SIGTERM and replaced,
//! one at a time — while twenty more runs go: all complete. Then a runtime paused with SIGSTOP
//! past its lease and resumed: every write it then tries is refused, and its run completes once on
//! the runtime that took it over. For every run: the journal has each sequence number once, its
//! records' epochs never go down (no two drivers interleave), and it has one end.
//!
//! The processes are the service binaries next to this test's (built with the workspace).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../../libs/toolplane-store/tests/pg_server/mod.rs"]
mod pg_server;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tonic::transport::Channel;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_proto::v1::workspace_service_client::WorkspaceServiceClient;

use crate::balancer::Balancer;
use crate::common::{self, Harness, harness, payload, types, writer_profile};

const LEASE_TTL_MS: u64 = 1_500;

/// A service process, killed when dropped so a failed assertion leaves nothing running.
struct Replica {
    child: Child,
    url: String,
    addr: SocketAddr,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Replica {
    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    async fn client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(common::channel(&self.url).await)
    }

    /// SIGTERM, then waits for the process to end (it drains first).
    fn stop(&mut self) {
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the process did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The service binary `name` next to this test's.
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join(name);
    assert!(
        bin.exists(),
        "{} is missing: build the workspace (`cargo build --workspace`) before this test",
        bin.display()
    );
    bin
}

/// The processes' shared surroundings: the PostgreSQL server, the directory of their logs and
/// data, and one address per service in front of its replicas.
struct Cluster {
    pg: PathBuf,
    dir: PathBuf,
    catalogs: Pool,
    workspaces: Pool,
    mcp_proxies: Pool,
}

/// The replicas of one service behind its address.
struct Pool {
    service: Balancer,
    replicas: Vec<Replica>,
}

impl Pool {
    async fn new() -> Pool {
        Pool {
            service: Balancer::start().await,
            replicas: Vec::new(),
        }
    }

    fn add(&mut self, replica: Replica) {
        self.replicas.push(replica);
        self.route();
    }

    fn route(&self) {
        let addrs: Vec<SocketAddr> = self.replicas.iter().map(|r| r.addr).collect();
        self.service.set(&addrs);
    }

    /// Kills the oldest replica with SIGKILL; the address stops sending it connections.
    fn kill_oldest(&mut self) {
        let old = self.replicas.remove(0);
        old.signal(Signal::SIGKILL);
        self.route();
    }

    /// A rolling update's step: `new` joins, then the oldest replica leaves the address and is
    /// stopped with SIGTERM.
    fn replace_oldest(&mut self, new: Replica) {
        self.add(new);
        let mut old = self.replicas.remove(0);
        self.route();
        old.stop();
    }
}

fn pg_store(pg: &Path, table: &str) -> String {
    format!(
        "[store]\nkind = \"postgres\"\n\
         connection = \"host={} port=5432 user=postgres dbname=postgres\"\ntable = \"{table}\"\n",
        pg.display()
    )
}

impl Cluster {
    /// Two catalogs, two workspaces and two mcp-proxies over the PostgreSQL server at `pg`.
    async fn start(pg: PathBuf, dir: &Path) -> Cluster {
        let mut cluster = Cluster {
            pg,
            dir: dir.to_path_buf(),
            catalogs: Pool::new().await,
            workspaces: Pool::new().await,
            mcp_proxies: Pool::new().await,
        };
        for i in 1..=2 {
            let r = cluster.mcp_proxy(&format!("m{i}")).await;
            cluster.mcp_proxies.add(r);
            let r = cluster.catalog(&format!("c{i}")).await;
            cluster.catalogs.add(r);
            let r = cluster.workspace(&format!("w{i}")).await;
            cluster.workspaces.add(r);
        }
        cluster
    }

    /// A `toolplane-runtime` process named `name`, with leases on, over the shared store and the
    /// other services' addresses.
    async fn runtime(&self, name: &str) -> Replica {
        let (catalog, workspace, mcp_proxy) = (
            self.catalogs.service.url(),
            self.workspaces.service.url(),
            self.mcp_proxies.service.url(),
        );
        let (data, store) = (self.dir.join(name), pg_store(&self.pg, "runtime_cluster"));
        launch(&self.dir, name, "toolplane-runtime", |grpc| {
            format!(
                "listen = \"127.0.0.1:{grpc}\"\ncatalog_url = \"{catalog}\"\n\
                 workspace_url = \"{workspace}\"\nmcp_proxy_url = \"{mcp_proxy}\"\n\
                 data_dir = \"{}\"\n\
                 [cluster]\nleases = true\nlease_ttl_ms = {LEASE_TTL_MS}\nholder = \"{name}\"\n\
                 advertise = \"http://127.0.0.1:{grpc}\"\ndrain_ms = 5000\n{store}",
                data.display()
            )
        })
        .await
    }

    async fn workspace(&self, name: &str) -> Replica {
        let (data, store) = (self.dir.join(name), pg_store(&self.pg, "workspace_cluster"));
        launch(&self.dir, name, "toolplane-workspace", |grpc| {
            format!(
                "listen = \"127.0.0.1:{grpc}\"\ndata_dir = \"{}\"\n{store}",
                data.display()
            )
        })
        .await
    }

    async fn catalog(&self, name: &str) -> Replica {
        let (mcp_proxy, store) = (
            self.mcp_proxies.service.url(),
            pg_store(&self.pg, "catalog_cluster"),
        );
        launch(&self.dir, name, "toolplane-catalog", |grpc| {
            format!("listen = \"127.0.0.1:{grpc}\"\nmcp_proxy_url = \"{mcp_proxy}\"\n{store}")
        })
        .await
    }

    async fn mcp_proxy(&self, name: &str) -> Replica {
        let (data, store) = (self.dir.join(name), pg_store(&self.pg, "mcp_cluster"));
        launch(&self.dir, name, "toolplane-mcp-proxy", |grpc| {
            format!(
                "listen = \"127.0.0.1:{grpc}\"\ndata_dir = \"{}\"\n{store}",
                data.display()
            )
        })
        .await
    }

    /// One rolling update of every catalog, workspace and mcp-proxy replica, one at a time.
    async fn roll(&mut self, round: usize) {
        for i in 1..=2 {
            let name = format!("m{round}{i}");
            let new = self.mcp_proxy(&name).await;
            self.mcp_proxies.replace_oldest(new);
            let new = self.catalog(&format!("c{round}{i}")).await;
            self.catalogs.replace_oldest(new);
            let new = self.workspace(&format!("w{round}{i}")).await;
            self.workspaces.replace_oldest(new);
        }
    }
}

/// Starts `binary` with the configuration `config` makes for its gRPC port, and waits until it
/// serves. Its ports are picked free beforehand; when another process took one meanwhile, the
/// service cannot bind it and exits, and it is started again on others.
async fn launch(dir: &Path, name: &str, binary: &str, config: impl Fn(u16) -> String) -> Replica {
    for _ in 0..5 {
        if let Some(r) = try_launch(dir, name, binary, &config).await {
            return r;
        }
    }
    panic!("{name} did not start: {}", log_tail(dir, name));
}

/// The last lines a process wrote to its log.
fn log_tail(dir: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// One attempt of [`launch`]: `None` when the process exited before it served.
async fn try_launch(
    dir: &Path,
    name: &str,
    binary_name: &str,
    config: &impl Fn(u16) -> String,
) -> Option<Replica> {
    let (grpc, http) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{grpc}");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config(grpc)).unwrap();
    let mut command = Command::new(binary(binary_name));
    command
        .arg("--config")
        .arg(&path)
        .arg("--http-listen")
        .arg(format!("127.0.0.1:{http}"))
        .env("RUST_LOG", "info,toolplane_runtime::context::held=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap());
    for (var, _) in std::env::vars() {
        if var.starts_with("TOOLPLANE_") || var == "PGPASSWORD" {
            command.env_remove(var);
        }
    }
    let mut child = command.spawn().unwrap();
    // The service prints its line once it holds its ports: only then is the port its own.
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on") {
                let _ = tx.send(());
            }
        }
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], grpc));
    let mut replica = Replica { child, url, addr };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if rx.try_recv().is_ok() {
            return Some(replica);
        }
        if replica.child.try_wait().unwrap().is_some() {
            eprintln!("{name} exited: {}", log_tail(dir, name));
            return None;
        }
        assert!(Instant::now() < deadline, "{name} not serving");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A background run `id` of the writer with a scripted model: write, a slower write (the model
/// thinks `think_ms` first), commit, finish.
fn spec(id: &str, think_ms: u64) -> pb::RunSpec {
    let script = json!({"turns": [
        {"tool_calls": [{"function": {"name": "workspace_write_file", "arguments": {"path": "output/one.md", "content": "1"}}}]},
        {"delayMs": think_ms, "tool_calls": [{"function": {"name": "workspace_write_file", "arguments": {"path": "output/two.md", "content": "2"}}}]},
        {"tool_calls": [{"function": {"name": "workspace_commit", "arguments": {}}}]},
        {"tool_calls": [{"function": {"name": "workspace_finish", "arguments": {"summary": "done"}}}]}
    ]});
    pb::RunSpec {
        run_id: id.into(),
        profile_id: "writer".into(),
        model: Some(pb::ModelEndpoint {
            kind: pb::ModelEndpointKind::Scripted as i32,
            script_json: Some(script.to_string()),
            ..Default::default()
        }),
        initial_user_message: "Write two notes and finish.".into(),
        mode: pb::RunMode::Background as i32,
        chat: Some(pb::ChatBinding {
            chat_id: format!("chat-{id}"),
            message_id: None,
        }),
        ..Default::default()
    }
}

async fn start(client: &mut RuntimeServiceClient<Channel>, id: &str, think_ms: u64) {
    client
        .start_run(pb::StartRunRequest {
            spec: Some(spec(id, think_ms)),
            request_id: String::new(),
        })
        .await
        .unwrap();
}

/// Waits until every run in `ids` is terminal as `client` reads it; their statuses, and for a run
/// that did not complete, why.
async fn wait_all(
    client: &mut RuntimeServiceClient<Channel>,
    ids: &[String],
    logs: &Path,
) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut statuses = Vec::new();
        let mut failures = Vec::new();
        for id in ids {
            let run = client
                .get_run(pb::GetRunRequest { run_id: id.clone() })
                .await
                .unwrap()
                .into_inner()
                .run
                .unwrap();
            statuses.push(run.status);
            if run.status != pb::RunStatus::Completed as i32 {
                failures.push((id.clone(), run.status, run.failure));
            }
        }
        let running = [pb::RunStatus::Created as i32, pb::RunStatus::Running as i32];
        if statuses.iter().all(|s| !running.contains(s)) {
            if !failures.is_empty() {
                eprintln!("runs that did not complete: {failures:?}");
                let ids: Vec<&str> = failures.iter().map(|f| f.0.as_str()).collect();
                print_logs(logs, &ids);
            }
            return statuses;
        }
        if Instant::now() >= deadline {
            print_logs(logs, &ids.iter().map(String::as_str).collect::<Vec<_>>());
        }
        assert!(
            Instant::now() < deadline,
            "runs not finished: {:?}",
            ids.iter().zip(&statuses).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Prints what the runtimes logged (their stderr, `<name>.log` in `logs`) about runs `ids`, so a
/// failure says what happened to them.
fn print_logs(logs: &Path, ids: &[&str]) {
    let Ok(entries) = std::fs::read_dir(logs) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            if ids.iter().any(|id| mentions(line, id)) {
                eprintln!("{}: {line}", path.display());
            }
        }
    }
}

/// Whether `line` names run `id` (`kill-1` is not named by `kill-10`).
fn mentions(line: &str, id: &str) -> bool {
    line.match_indices(id).any(|(at, _)| {
        !line[at + id.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// Checks what must hold for every run: completed, each sequence number once and in order, epochs
/// never going down, one end. The number of runs that were taken over.
async fn check_journals(h: &mut Harness, ids: &[String]) -> usize {
    let mut taken = 0;
    for id in ids {
        let journal = h.journal(id).await;
        let seqs: Vec<u64> = journal.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (1..=journal.len() as u64).collect::<Vec<_>>(),
            "{id}: {seqs:?}"
        );
        let epochs: Vec<u64> = journal.iter().map(|e| e.epoch).collect();
        assert!(
            epochs.windows(2).all(|w| w[0] <= w[1]),
            "{id}: two drivers interleaved: {epochs:?}"
        );
        let kinds = types(&journal);
        assert_eq!(
            kinds.iter().filter(|k| *k == "run_completed").count(),
            1,
            "{id}: {kinds:?}"
        );
        let takeovers: Vec<_> = journal
            .iter()
            .filter(|e| e.r#type == "run_taken_over")
            .map(payload)
            .collect();
        for t in &takeovers {
            assert!(t["epoch"].as_u64() > t["fromEpoch"].as_u64(), "{t}");
        }
        taken += usize::from(!takeovers.is_empty());
        // A write running when its driver died, and not journalled by it, is answered
        // `tool.outcome_unknown` and not run again: its file may be missing then, never else.
        let unknown = journal
            .iter()
            .filter(|e| e.r#type == "tool_call_failed")
            .any(|e| payload(e)["errorCode"] == "tool.outcome_unknown");
        if !unknown {
            assert_eq!(
                h.object(id, "output/two.md").await.as_deref(),
                Some(&b"2"[..]),
                "{id}"
            );
        }
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_killed_replicas_a_rolling_restart_and_a_paused_runtime() {
    let pg = pg_server::server().await.dir.clone();
    let mut h = harness().await;
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path();
    let completed = vec![pb::RunStatus::Completed as i32; 20];

    // Two replicas of every service; the test registers its profile and reads journals and files
    // through the services' addresses too.
    let mut cluster = Cluster::start(pg, logs).await;
    h.profiles = ProfileServiceClient::new(common::channel(&cluster.catalogs.service.url()).await);
    h.workspace =
        WorkspaceServiceClient::new(common::channel(&cluster.workspaces.service.url()).await)
            .max_decoding_message_size(64 << 20);
    h.put_profile(writer_profile()).await;

    // 1. Twenty runs through two runtimes; one runtime is killed mid-run, then one workspace.
    let r1 = cluster.runtime("r1").await;
    let r2 = cluster.runtime("r2").await;
    let (mut c1, mut c2) = (r1.client().await, r2.client().await);
    let killed: Vec<String> = (0..20).map(|i| format!("kill-{i}")).collect();
    for (i, id) in killed.iter().enumerate() {
        let client = if i % 2 == 0 { &mut c1 } else { &mut c2 };
        start(client, id, 800).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    r1.signal(Signal::SIGKILL);
    drop(r1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.workspaces.kill_oldest();
    assert_eq!(wait_all(&mut c2, &killed, logs).await, completed);
    let taken = check_journals(&mut h, &killed).await;
    assert!(taken >= 1, "the killed runtime's runs were taken over");

    // 2. A rolling restart of every replica, one at a time (SIGTERM: a runtime hands its runs
    //    over, the other services finish their requests), while twenty runs go.
    let mut r2 = r2;
    let r3 = cluster.runtime("r3").await;
    let mut c3 = r3.client().await;
    let rolled: Vec<String> = (0..20).map(|i| format!("roll-{i}")).collect();
    for (i, id) in rolled.iter().enumerate() {
        let client = if i % 2 == 0 { &mut c2 } else { &mut c3 };
        start(client, id, 600).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    r2.stop();
    let r4 = cluster.runtime("r4").await;
    let mut r3 = r3;
    cluster.roll(2).await;
    r3.stop();
    let mut c4 = r4.client().await;
    assert_eq!(wait_all(&mut c4, &rolled, logs).await, completed);
    check_journals(&mut h, &rolled).await;

    // 3. A runtime paused past its lease: another takes its run over; once resumed, every write
    //    it tries is refused.
    let r5 = cluster.runtime("r5").await;
    let paused = vec!["paused-0".to_owned()];
    start(&mut c4, &paused[0], 2_000).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    r4.signal(Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS * 3)).await;
    r4.signal(Signal::SIGCONT);
    let mut c5 = r5.client().await;
    assert_eq!(
        wait_all(&mut c5, &paused, logs).await,
        vec![pb::RunStatus::Completed as i32]
    );
    // The resumed runtime had its time to try: still one driver at a time, one end.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(check_journals(&mut h, &paused).await, 1);
    let journal = h.journal(&paused[0]).await;
    let taken = journal
        .iter()
        .find(|e| e.r#type == "run_taken_over")
        .map(payload)
        .unwrap();
    assert_eq!(taken["fromHolder"], "r4");
    assert_eq!(taken["holder"], "r5");
    drop(r4);
    h.plane.shutdown().await;
}
