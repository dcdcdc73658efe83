//! What the cluster mode costs a tool call (`TOOLPLANE_BENCH_ONLY=cluster`; BENCHMARKS.md,
//! "Cluster mode"). Two runtimes in this process in cluster mode — `[cluster] leases = true`, one
//! shared PostgreSQL store (the store tests' own server, `pg_server`) — built from the runtime
//! library as the plane builds its own, against the plane's catalog and mcp-proxy and a workspace
//! over the same PostgreSQL (`Workspace::open_on_store`: journals, audit objects and run files in
//! the store), so a cluster call pays for the whole cluster backend.
//! Measured in one run, each against a baseline of the same run:
//! - `ExecuteToolCalls` of one `workspace.read_file` and of one `dice.roll` through a cluster
//!   runtime against the same through the plane's local runtime (filesystem store, leases off),
//!   alternating so load changes hit both alike; the bare echo beside them; the store rows the
//!   cluster calls wrote, per call (PostgreSQL's own counters);
//! - calls/s of 32 concurrent host-driven invocations all on one replica against the same 32
//!   split 16/16 over both (the same calls), with the CPU per call of this process and of the
//!   PostgreSQL server; the same invocations on the plane's local runtime as the baseline. Both
//!   replicas run in every case; on a 2-core machine the replica ratio measures what a second
//!   replica costs, not how far replicas scale.
//!
//! Must never write into the plane's own runtime state: the cluster runtimes have their own data
//! directories and their own table.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::TcpListener;
use tonic::transport::Channel;
use toolplane::plane::Plane;
use toolplane_auth::Authenticator;
use toolplane_proto::testing::v1::EchoRequest;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_runtime::config::ClusterConfig;
use toolplane_serve::auth::DEFAULT_CELL;

use crate::{Inv, Samples, call, channel, cpu_ms, create_run, median};

#[path = "../../../../libs/toolplane-store/tests/pg_server/mod.rs"]
mod pg_server;

/// The PostgreSQL table both cluster runtimes keep their records in.
const TABLE: &str = "runtime_bench";
/// The PostgreSQL table of the shared workspace the cluster runtimes use.
const WORKSPACE_TABLE: &str = "workspace_bench";
/// Latency samples per tool and side (after 100 of warm-up).
const SAMPLES: usize = 1000;
/// Concurrent host-driven invocations of the throughput part, and the calls each makes.
const INVOCATIONS: usize = 32;
const CALLS_PER_INVOCATION: usize = 200;

type Client = RuntimeServiceClient<Channel>;

/// A runtime in cluster mode, serving on a port of its own.
struct Replica {
    server: toolplane_runtime::RuntimeServer,
    client: Client,
}

/// Starts a cluster-mode runtime named `holder` against the plane's peers, its records in
/// [`TABLE`] over `connection`, the lease TTL a deployment's default (10 s); its drain is short
/// (1 s) because every run is cancelled before it stops.
async fn replica(
    plane: &Plane,
    dir: &Path,
    connection: &str,
    holder: &str,
    workspace_url: &str,
) -> Replica {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut cfg = toolplane_runtime::RuntimeConfig {
        catalog_url: plane.catalog_url(),
        workspace_url: workspace_url.to_owned(),
        mcp_proxy_url: plane.mcp_proxy_url(),
        data_dir: dir.join(holder),
        store: Some(toolplane_store::StoreConfig::Postgres {
            connection: connection.to_owned(),
            table: TABLE.to_owned(),
            max_connections: 8,
        }),
        cluster: ClusterConfig {
            leases: true,
            holder: holder.to_owned(),
            advertise: url.clone(),
            drain_ms: 1_000,
            ..ClusterConfig::default()
        },
        ..toolplane_runtime::RuntimeConfig::default()
    };
    cfg.invocation_idle_timeout = Duration::from_secs(3600);
    let server = toolplane_runtime::start_on(cfg, listener, Authenticator::off(DEFAULT_CELL))
        .await
        .unwrap();
    let client = RuntimeServiceClient::new(channel(&url).await);
    Replica { server, client }
}

/// A fresh run and invocation with `output/a.md` written (its write is not measured); the run's
/// id, to cancel it when the part is over (a live run keeps its lease renewed).
async fn ready(rt: &mut Client) -> (String, Inv) {
    let run = create_run(rt).await;
    let opened = rt
        .open_invocation(pb::OpenInvocationRequest {
            run_id: run.run_id.clone(),
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut inv = Inv {
        id: opened.invocation_id,
        turn: opened.first_turn.unwrap().turn_id,
    };
    let args = json!({"path": "output/a.md", "content": "line one\nline two\n"});
    call(rt, &mut inv, 0, "workspace_write_file", args).await;
    (run.run_id, inv)
}

async fn cancel(rt: &mut Client, runs: Vec<String>) {
    for run_id in runs {
        rt.cancel_run(pb::CancelRunRequest {
            run_id,
            reason: "benchmark part over".into(),
        })
        .await
        .unwrap();
    }
}

/// One side of the latency part: a runtime, its current invocation and what it measured.
struct Side {
    rt: Client,
    runs: Vec<String>,
    inv: Inv,
    samples: Samples,
}

impl Side {
    async fn new(mut rt: Client) -> Side {
        let (run, inv) = ready(&mut rt).await;
        Side {
            rt,
            runs: vec![run],
            inv,
            samples: Samples::new(),
        }
    }

    /// One `read_file` and one `dice.roll`, timed; kept after the warm-up.
    async fn round(&mut self, keep: bool) {
        if self.samples.spent() {
            let (run, inv) = ready(&mut self.rt).await;
            self.runs.push(run);
            self.inv = inv;
            self.samples.restart();
        }
        self.samples.round(&mut self.rt, &mut self.inv, keep).await;
    }
}

/// The PostgreSQL server's processes: the postmaster and its children (the backends, the
/// WAL writer, the checkpointer).
struct PgProcesses {
    postmaster: u32,
}

impl PgProcesses {
    fn of(server: &pg_server::Server) -> PgProcesses {
        let pid = std::fs::read_to_string(server.dir.join("data/postmaster.pid")).unwrap();
        PgProcesses {
            postmaster: pid.lines().next().unwrap().trim().parse().unwrap(),
        }
    }

    /// CPU time of every process of the server, in ms: the postmaster's own and that of the
    /// children it waited for (`cutime`, `cstime`), plus each live child's.
    fn cpu_ms(&self) -> f64 {
        let mut ticks = 0.0;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(f) = stat_fields(pid) else { continue };
            // After the name: state is field 0, ppid 1, utime 11, stime 12, cutime 13, cstime 14.
            let field = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            if pid == self.postmaster {
                ticks += field(11) + field(12) + field(13) + field(14);
            } else if field(1) as u32 == self.postmaster {
                ticks += field(11) + field(12);
            }
        }
        // 100 ticks/s, as `cpu_ms` assumes.
        ticks * 10.0
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The one value `sql` selects, read with `psql` from the benchmark's server.
fn select(server: &pg_server::Server, sql: &str) -> u64 {
    let out = Command::new("psql")
        .arg("-h")
        .arg(&server.dir)
        .args([
            "-p", "5432", "-U", "postgres", "-d", "postgres", "-Atc", sql,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Rows inserted, updated and deleted in [`TABLE`] so far, as PostgreSQL counts them. A backend
/// reports its counts up to 10 s after its transactions, so callers wait that long first.
fn rows_written(server: &pg_server::Server, table: &str) -> u64 {
    select(
        server,
        &format!(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) \
             FROM pg_stat_user_tables WHERE relname = '{table}'"
        ),
    )
}

/// The size in bytes of the largest invocation checkpoint (`held/…`) in [`TABLE`] now.
fn checkpoint_bytes(server: &pg_server::Server) -> u64 {
    select(
        server,
        &format!(
            "SELECT coalesce(max(octet_length(bytes)), 0) FROM {TABLE} WHERE key LIKE '%held/%'"
        ),
    )
}

/// How long PostgreSQL may take to count a backend's rows (`PGSTAT_IDLE_INTERVAL`, 10 s).
const STATS_DELAY: Duration = Duration::from_secs(11);

/// A workspace over the shared store, as a replica of several runs it (`Workspace::open_on_store`):
/// its records, journals, audit objects and run files in [`WORKSPACE_TABLE`] over `connection`.
async fn shared_workspace(connection: &str) -> (toolplane_serve::Serving, String) {
    let store = toolplane_store::StoreConfig::Postgres {
        connection: connection.to_owned(),
        table: WORKSPACE_TABLE.to_owned(),
        max_connections: 8,
    }
    .open(toolplane_store::StoreOptions::default())
    .await
    .unwrap();
    let ws = toolplane_workspace::Workspace::open_on_store(store, Default::default())
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let serving = toolplane_workspace::start_on(
        listener,
        std::sync::Arc::new(ws),
        metrics,
        Authenticator::off(DEFAULT_CELL),
    )
    .await
    .unwrap();
    let url = format!("http://{}", serving.addr());
    (serving, url)
}

pub async fn overhead(plane: &Plane, local: &Client) {
    let server = pg_server::server().await;
    let connection = pg_server::config(server).connection;
    let pg = PgProcesses::of(server);
    let dir = tempfile::tempdir().unwrap();
    // The whole cluster backend: both replicas' runs in a workspace over the same PostgreSQL.
    let (workspace, ws_url) = shared_workspace(&connection).await;
    let a = replica(plane, dir.path(), &connection, "replica-a", &ws_url).await;
    let b = replica(plane, dir.path(), &connection, "replica-b", &ws_url).await;
    latency(server, local.clone(), a.client.clone()).await;
    throughput(&pg, local.clone(), [a.client.clone(), b.client.clone()]).await;
    a.server.shutdown().await;
    b.server.shutdown().await;
    let _ = workspace.shutdown().await;
}

/// Per call: the cluster runtime against the plane's local one, the bare echo beside them.
async fn latency(server: &pg_server::Server, local: Client, cluster: Client) {
    let (echo_addr, _echo) = toolplane_testkit::spawn_echo_server().await.unwrap();
    let mut echo = toolplane_testkit::connect_echo(echo_addr).await.unwrap();
    let mut local = Side::new(local).await;
    let mut cluster = Side::new(cluster).await;
    tokio::time::sleep(STATS_DELAY).await;
    let rows_before = [
        rows_written(server, TABLE),
        rows_written(server, WORKSPACE_TABLE),
    ];
    let mut t_echo = Vec::new();
    for i in 0..SAMPLES + 100 {
        let keep = i >= 100;
        let t = Instant::now();
        echo.echo(EchoRequest {
            payload: vec![7; 64],
        })
        .await
        .unwrap();
        if keep {
            t_echo.push(t.elapsed());
        }
        // Each goes first every other round, so neither always finds the other's leftovers.
        if i % 2 == 0 {
            local.round(keep).await;
            cluster.round(keep).await;
        } else {
            cluster.round(keep).await;
            local.round(keep).await;
        }
    }
    tokio::time::sleep(STATS_DELAY).await;
    let rows = [
        rows_written(server, TABLE) - rows_before[0],
        rows_written(server, WORKSPACE_TABLE) - rows_before[1],
    ];
    let echo_m = median(t_echo);
    println!("echo p50 {echo_m:?}");
    for (what, local_t, cluster_t) in [
        ("read_file", &local.samples.read, &cluster.samples.read),
        ("dice.roll", &local.samples.dice, &cluster.samples.dice),
    ] {
        let (local_m, cluster_m) = (median(local_t.clone()), median(cluster_t.clone()));
        println!(
            "ExecuteToolCalls {what} p50 in cluster mode {cluster_m:?}, local {local_m:?}: \
             {:.2}× ({:.2}× echo against {:.2}× echo)",
            cluster_m.as_secs_f64() / local_m.as_secs_f64(),
            cluster_m.as_secs_f64() / echo_m.as_secs_f64(),
            local_m.as_secs_f64() / echo_m.as_secs_f64(),
        );
    }
    let calls = 2 * (SAMPLES + 100);
    println!(
        "PostgreSQL rows written for {calls} calls (the {} invocations' opening included): \
         runtime {} = {:.2} per call, workspace {} = {:.2} per call",
        cluster.runs.len() - 1,
        rows[0],
        rows[0] as f64 / calls as f64,
        rows[1],
        rows[1] as f64 / calls as f64,
    );
    println!(
        "an invocation's checkpoint (one row, rewritten twice per turn): {} bytes",
        checkpoint_bytes(server)
    );
    cancel(&mut local.rt, local.runs).await;
    cancel(&mut cluster.rt, cluster.runs).await;
}

/// What a burst measured: calls/s, and CPU per call (ms) of this process and of PostgreSQL.
#[derive(Default, Clone, Copy)]
struct Burst {
    rate: f64,
    process_cpu: f64,
    pg_cpu: f64,
}

/// calls/s of the same invocations on the plane's local runtime (the baseline), all on the first
/// replica, and split over both; the three in turn, twice, so load changes hit them alike.
async fn throughput(pg: &PgProcesses, local: Client, replicas: [Client; 2]) {
    let sides: [(&str, Vec<Client>); 3] = [
        ("the local runtime", vec![local]),
        ("1 cluster replica", vec![replicas[0].clone()]),
        ("2 cluster replicas", replicas.to_vec()),
    ];
    let mut sums = [Burst::default(); 3];
    const ROUNDS: usize = 2;
    for _ in 0..ROUNDS {
        for (i, (name, clients)) in sides.iter().enumerate() {
            let b = burst(pg, name, clients).await;
            sums[i].rate += b.rate / ROUNDS as f64;
            sums[i].process_cpu += b.process_cpu / ROUNDS as f64;
            sums[i].pg_cpu += b.pg_cpu / ROUNDS as f64;
        }
    }
    for ((name, _), b) in sides.iter().zip(&sums) {
        println!(
            "{INVOCATIONS} invocations on {name}, mean of {ROUNDS}: {:.0} calls/s, {:.3} ms of CPU \
             per call ({:.3} this process + {:.3} PostgreSQL)",
            b.rate,
            b.process_cpu + b.pg_cpu,
            b.process_cpu,
            b.pg_cpu
        );
    }
    let cpu = |b: &Burst| b.process_cpu + b.pg_cpu;
    println!(
        "1 cluster replica vs local: {:.2}× calls/s, {:.2}× CPU per call",
        sums[1].rate / sums[0].rate,
        cpu(&sums[1]) / cpu(&sums[0])
    );
    println!(
        "2 replicas vs 1: {:.2}× calls/s, {:.2}× CPU per call (on 2 cores: the overhead of a \
         second replica, not scale)",
        sums[2].rate / sums[1].rate,
        cpu(&sums[2]) / cpu(&sums[1])
    );
}

/// [`INVOCATIONS`] invocations split evenly over `runtimes`, each making
/// [`CALLS_PER_INVOCATION`] calls back to back (alternately `dice.roll` and `read_file`); their
/// calls/s and the CPU per call of this process and of PostgreSQL. Opening the invocations and
/// cancelling their runs afterwards are not measured.
async fn burst(pg: &PgProcesses, name: &str, runtimes: &[Client]) -> Burst {
    let mut clients = Vec::new();
    for i in 0..INVOCATIONS {
        let mut rt = runtimes[i % runtimes.len()].clone();
        let (run, inv) = ready(&mut rt).await;
        clients.push((rt, run, inv));
    }
    let (process_before, pg_before) = (cpu_ms(), pg.cpu_ms());
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(mut rt, run, mut inv)| {
            tokio::spawn(async move {
                for k in 1..=CALLS_PER_INVOCATION {
                    if k % 2 == 0 {
                        call(&mut rt, &mut inv, k, "dice_roll", json!({"notation": "d6"})).await;
                    } else {
                        let path = json!({"path": "output/a.md"});
                        call(&mut rt, &mut inv, k, "workspace_read_file", path).await;
                    }
                }
                (rt, run)
            })
        })
        .collect();
    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.unwrap());
    }
    let wall = started.elapsed().as_secs_f64();
    let (process, pg_cpu) = (cpu_ms() - process_before, pg.cpu_ms() - pg_before);
    let calls = (INVOCATIONS * CALLS_PER_INVOCATION) as f64;
    let b = Burst {
        rate: calls / wall,
        process_cpu: process / calls,
        pg_cpu: pg_cpu / calls,
    };
    println!(
        "  {INVOCATIONS} invocations on {name}: {:.0} calls/s, {:.3} + {:.3} ms of CPU per call, \
         {:.2} cores busy",
        b.rate,
        b.process_cpu,
        b.pg_cpu,
        (process + pg_cpu) / 1000.0 / wall
    );
    for (mut rt, run) in done {
        cancel(&mut rt, vec![run]).await;
    }
    b
}
