//! Run ownership over real sockets: two runtimes with `[cluster] leases` on against one workspace
//! service. The first drives a run and is paused past its lease's TTL; the second takes the lease;
//! every write the first then makes under its old epoch (a journal append, a file write) is
//! refused by the workspace and writes nothing, and once it runs again it stops driving the run.
//!
//! Each runtime lives in-process on its own current-thread executor, which runs only while the
//! test drives it: between two drives the runtime is paused like a stopped process (its renewal
//! task does not run), everything it sends goes over the workspace's real loopback socket.
//!
//! The mcp-proxy fences MCP calls by the same epoch: a runtime whose MCP call it refuses as stale
//! (`mcp.stale_epoch`) loses the run just the same (the runtime over in-memory peers, `support`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::runtime::{Builder, Runtime as Executor};
use toolplane_core::ToolId;
use toolplane_core::error as codes;
use toolplane_core::invocation::{ToolArguments, ToolInvocation};
use toolplane_proto::v1 as pb;
use toolplane_runtime::config::ClusterConfig;
use toolplane_runtime::context::ports::{
    ExecuteCall, InvocationWorkspace, RunScope, SkillAccess, ToolContext, ToolHost,
};
use toolplane_runtime::lifecycle::NewRun;
use toolplane_runtime::state::{Event, RunStatus};
use toolplane_runtime::{Runtime, RuntimeConfig};

const TTL_MS: u64 = 1_000;

fn paused_executor() -> Executor {
    Builder::new_current_thread().enable_all().build().unwrap()
}

fn config(dir: &std::path::Path, workspace_url: &str, holder: &str) -> RuntimeConfig {
    RuntimeConfig {
        workspace_url: workspace_url.to_owned(),
        data_dir: dir.join(holder),
        cluster: ClusterConfig {
            leases: true,
            lease_ttl_ms: TTL_MS,
            holder: holder.to_owned(),
            ..ClusterConfig::default()
        },
        ..RuntimeConfig::default()
    }
}

fn write_call(path: &str) -> ToolInvocation {
    let mut args = serde_json::Map::new();
    args.insert("path".into(), json!(path));
    args.insert("content".into(), json!("late"));
    ToolInvocation {
        call_id: format!("call-{path}"),
        tool_id: ToolId::parse("builtin:workspace.write_file").unwrap(),
        arguments: ToolArguments::Object { value: args },
        provider_metadata: None,
    }
}

#[test]
fn a_paused_owner_loses_its_run_and_every_late_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    // The workspace service, on an executor of its own that always runs.
    let ws_exec = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, mut storage) = ws_exec.block_on(async {
        let ws = toolplane_workspace::Workspace::open(toolplane_workspace::engine::EngineOptions {
            data_dir: data.join("workspace"),
            limits: Default::default(),
        })
        .await
        .unwrap();
        let server = toolplane_testkit::spawn_routes(
            toolplane_workspace::routes(Arc::new(ws)).await.unwrap(),
        )
        .await
        .unwrap();
        let client = pb::workspace_service_client::WorkspaceServiceClient::connect(format!(
            "http://{}",
            server.addr()
        ))
        .await
        .unwrap();
        (server, client)
    });
    let url = format!("http://{}", server.addr());

    // Runtime A creates and drives run r1 under its lease.
    let a_exec = paused_executor();
    let a = a_exec
        .block_on(Runtime::open(config(&data, &url, "runtime-a")))
        .unwrap();
    let run = a_exec
        .block_on(a.create_run(NewRun {
            run_id: "r1".into(),
            ..NewRun::default()
        }))
        .unwrap();
    let old = run.epoch();
    assert!(old >= 1);
    let scope = RunScope {
        run_id: "r1".into(),
        cell_id: "default".into(),
        epoch: old,
    };
    a_exec
        .block_on(
            a.ports
                .workspace
                .open_invocation_workspace(InvocationWorkspace {
                    run: scope.clone(),
                    invocation_id: "inv-a".into(),
                    visible_roots: Vec::new(),
                    writable_roots: Vec::new(),
                    skills: SkillAccess::default(),
                }),
        )
        .unwrap();
    // While A runs, it renews its lease: runtime B cannot take the run, even past one TTL.
    a_exec.block_on(async { tokio::time::sleep(Duration::from_millis(TTL_MS * 2)).await });
    let b_exec = paused_executor();
    let b = b_exec
        .block_on(Runtime::open(config(&data, &url, "runtime-b")))
        .unwrap();
    let held = b_exec
        .block_on(b.take_run_lease("default", "r1"))
        .unwrap_err();
    assert!(held.to_string().contains("workspace.lease_held"), "{held}");

    // A is paused past its TTL; B takes the run with a greater epoch.
    std::thread::sleep(Duration::from_millis(TTL_MS * 2));
    let new = b_exec.block_on(b.take_run_lease("default", "r1")).unwrap();
    assert!(new > old, "{new} > {old}");

    // The stale-epoch probe: A's writes under its old epoch, sent through its own workspace and
    // tool ports, are refused by the workspace, before A has noticed anything.
    let journal_before = ws_exec.block_on(read_journal(&mut storage));
    a_exec.block_on(async {
        let reservation = run.journal.reserve().await.unwrap();
        let group = reservation.group(old, Vec::new(), vec![Event::new("probe", json!({}))]);
        let refused = a.ports.workspace.append_journal(group).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Some("workspace.stale_epoch"),
            "{}",
            refused.message
        );
        let call = write_call("output/late.md");
        let refused = a
            .ports
            .tools
            .execute(
                ToolHost::Workspace,
                ExecuteCall {
                    context: ToolContext {
                        cell_id: "default".into(),
                        run_id: "r1".into(),
                        invocation_id: "inv-a".into(),
                        epoch: old,
                        ..ToolContext::default()
                    },
                    call: &call,
                    request_timeout: Duration::from_secs(10),
                    tool_timeout_ms: None,
                },
            )
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(
            refused.code(),
            Some("workspace.stale_epoch"),
            "{}",
            refused.message
        );
    });
    assert!(
        !data
            .join("workspace/tree/default/r1/output/late.md")
            .exists()
    );
    assert_eq!(ws_exec.block_on(read_journal(&mut storage)), journal_before);
    assert!(journal_before.iter().all(|(_, epoch)| *epoch == old));

    // A runs again: its renewal learns the run is B's, and A stops driving it, writing nothing.
    a_exec.block_on(async { tokio::time::sleep(Duration::from_millis(TTL_MS)).await });
    let record = run.snapshot();
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(
        record.failure.map(|f| f.code),
        Some(codes::RUNTIME_LEASE_LOST.as_str().to_owned())
    );
    let refused = a_exec
        .block_on(a.append(&run, old, Vec::new(), vec![Event::new("after", json!({}))]))
        .unwrap_err();
    assert_eq!(refused.code(), codes::RUNTIME_LEASE_LOST);
    assert_eq!(ws_exec.block_on(read_journal(&mut storage)), journal_before);

    // The new holder writes on; the journal's epochs never go back.
    let next = journal_before.len() as u64 + 1;
    ws_exec
        .block_on(storage.append_journal(pb::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: next,
            records: vec![pb::JournalEvent {
                r#type: "taken_over".into(),
                ..Default::default()
            }],
            epoch: new,
            cell_id: String::new(),
            objects: Vec::new(),
        }))
        .unwrap();
    let epochs: Vec<u64> = ws_exec
        .block_on(read_journal(&mut storage))
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "{epochs:?}");
    assert_eq!(epochs.last(), Some(&new));
    drop(server);
}

async fn read_journal(
    storage: &mut pb::workspace_service_client::WorkspaceServiceClient<tonic::transport::Channel>,
) -> Vec<(u64, u64)> {
    storage
        .read_journal(pb::ReadJournalRequest {
            run_id: "r1".into(),
            from_seq: 1,
            page_size: 1000,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .records
        .iter()
        .map(|r| (r.seq, r.epoch))
        .collect()
}

#[tokio::test]
async fn an_mcp_call_refused_as_stale_loses_the_run() {
    let a = support::alone_with(|c| c.cluster.leases = true).await;
    let reg = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
    a.mem.add_tool(
        toolplane_core::ToolOrigin::Mcp {
            registration_id: reg.into(),
            server_name: "clock".into(),
            permission: toolplane_core::catalog::McpPermission::Allow,
        },
        toolplane_core::descriptor::ToolDescriptor::new(
            ToolId::parse(&format!("mcp/{reg}:now")).unwrap(),
            "The time.",
            json!({"type": "object"}),
        )
        .unwrap(),
        None,
    );
    a.mem.put_profile(support::agent(
        "timekeeper",
        json!({"tools": {"allow": ["mcp:clock/*"]}}),
    ));
    let opened = a.host_run("f1", "timekeeper").await;
    let call = support::calls(&[("c1", "mcp__clock__now", json!({}))]);
    let turn = a.first_turn(&opened, &call).await.unwrap();
    assert!(!turn.outcome.results[0].is_error, "the call went through");

    a.mem.refuse_mcp_calls_as_stale();
    let journalled = a.mem.kinds("f1");
    let next = turn.next_turn_id.clone().unwrap();
    let refused = support::host_turn(
        &a.rt,
        &opened.invocation,
        &next,
        &support::calls(&[("c2", "mcp__clock__now", json!({}))]),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), codes::RUNTIME_LEASE_LOST, "{refused}");
    let record = opened.invocation.run.snapshot();
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(
        record.failure.map(|f| f.code),
        Some(codes::RUNTIME_LEASE_LOST.as_str().to_owned())
    );
    assert_eq!(
        a.mem.kinds("f1"),
        journalled,
        "nothing journalled after the refusal"
    );
}

/// Creating a run on a loaded store can take longer than the lease's TTL: the creator renews the
/// lease meanwhile, so a lapse in the middle (as a TTL passing without a renewal would make) is
/// renewed before the creation ends, and another runtime cannot take the half-created run.
#[tokio::test]
async fn a_run_being_created_keeps_its_lease_live() {
    let a = support::alone_with(|c| {
        c.cluster.leases = true;
        c.cluster.lease_ttl_ms = 90;
    })
    .await;
    a.mem.put_profile(support::agent("slow", json!({})));
    a.mem.slow_creation(Duration::from_millis(400));
    let creating = {
        let rt = Arc::clone(&a.rt);
        tokio::spawn(async move {
            rt.create_run(NewRun {
                run_id: "slow-1".into(),
                profile_id: "slow".into(),
                ..NewRun::default()
            })
            .await
            .map(|_| ())
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    a.mem.expire_lease("slow-1");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let scope = RunScope {
        run_id: "slow-1".into(),
        cell_id: "default".into(),
        epoch: 0,
    };
    let taken = toolplane_runtime::context::ports::Workspace::acquire_run_lease(
        a.mem.as_ref(),
        &scope,
        "another",
        90,
    )
    .await;
    assert!(
        taken.is_err(),
        "the creator renewed its lease while it was creating the run"
    );
    creating.await.unwrap().unwrap();
}
