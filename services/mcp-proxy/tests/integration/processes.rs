//! Stdio servers as contained processes: a server that starts a grandchild leaves nothing behind
//! when it is unregistered, when it crashes and when the proxy is killed; its environment holds
//! only what the registration names, from an allow-list; resource limits apply; with
//! authentication on only admins register stdio servers, and only allowed commands.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::process::{ProxyProcess, is_running};
use common::*;
use toolplane_auth::{Caller, CallerKind, Role};
use toolplane_core::envallow::EnvAllowList;
use toolplane_mcp_proxy::ProxySettings;
use toolplane_mcp_proxy::proxy::UpsertInput;
use toolplane_mcp_proxy::registration::{ServerState, TransportSpec};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;

/// A stdio registration running the fixture through `sh`, which first starts `sleep 1000` in the
/// background and writes `<server pid> <grandchild pid>` to `pids` (the server keeps the shell's
/// pid through `exec`).
fn spawning_fixture(name: &str, pids: &Path, inherit: &[&str]) -> pb::UpsertServerRequest {
    let bin = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let script = format!(
        "sleep 1000 & echo $$ $! > '{}'; exec '{}'",
        pids.display(),
        bin.display()
    );
    let mut req = fixture(name, &[]);
    req.transport = Some(pb::McpTransport {
        kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
            command: "/bin/sh".into(),
            args: vec!["-c".into(), script],
            inherit_env: inherit.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })),
    });
    req
}

/// The server's and the grandchild's pids, once the script wrote them.
async fn read_pids(path: &Path) -> (u32, u32) {
    let mut pids = None;
    eventually(10, "the fixture writes its pids", || {
        pids = std::fs::read_to_string(path).ok().and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        });
        pids.is_some()
    })
    .await;
    pids.unwrap()
}

async fn gone(pids: [u32; 2], when: &str) {
    eventually(10, &format!("{pids:?} gone after {when}"), || {
        pids.iter().all(|p| !is_running(*p))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_or_a_crash_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;

    let pids = dir.path().join("unregister.pids");
    let server = h
        .upsert(spawning_fixture("spawner", &pids, &[]))
        .await
        .server
        .unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    let (child, grandchild) = read_pids(&pids).await;
    assert!(is_running(child) && is_running(grandchild));
    h.admin
        .deregister_server(pb::DeregisterServerRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
        })
        .await
        .unwrap();
    gone([child, grandchild], "unregister").await;

    // A server that crashes takes its grandchild with it.
    let pids = dir.path().join("crash.pids");
    let server = h
        .upsert(spawning_fixture("crasher", &pids, &[]))
        .await
        .server
        .unwrap();
    let (child, grandchild) = read_pids(&pids).await;
    let _ = h
        .call_with(&tool_id(&server, "crash"), "{}", Some(10_000))
        .await;
    gone([child, grandchild], "a crash").await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_proxy_leaves_no_process_and_children_get_only_allowed_variables() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let mut proxy = ProxyProcess::start(
        &[
            ("TOOLPLANE_MCP_PROXY_LISTEN", listen),
            (
                "TOOLPLANE_MCP_PROXY_DATA_DIR",
                data.path().to_string_lossy().into_owned(),
            ),
            ("TOOLPLANE_MCP_PROXY_ENV_ALLOW", "*_MCP_TOKEN".into()),
            ("DOCS_MCP_TOKEN", "token-for-docs".into()),
            ("CLOUD_SECRET", "never-for-servers".into()),
        ],
        logs.path(),
    );
    let mut admin = McpProxyServiceClient::new(proxy.connect().await);

    // A variable off the allow-list is refused with its code, before anything starts.
    let refused = admin
        .upsert_server(spawning_fixture(
            "greedy",
            &logs.path().join("greedy.pids"),
            &["CLOUD_SECRET"],
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().starts_with("mcp.env_not_allowed: "),
        "{}",
        refused.message()
    );
    assert!(!logs.path().join("greedy.pids").exists());

    let pids = logs.path().join("kill.pids");
    let server = admin
        .upsert_server(spawning_fixture("spawner", &pids, &["DOCS_MCP_TOKEN"]))
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    let (child, grandchild) = read_pids(&pids).await;

    // The server's environment: the few base variables and what the registration named.
    let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap();
    let names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(
        names.iter().any(|v| v == "DOCS_MCP_TOKEN=token-for-docs"),
        "{names:?}"
    );
    for v in &names {
        let name = v.split('=').next().unwrap();
        assert!(
            ["PATH", "HOME", "DOCS_MCP_TOKEN", "PWD"].contains(&name),
            "unexpected variable in the server's environment: {v}"
        );
    }

    // SIGKILL: the proxy gets no chance to clean up, and still nothing stays behind.
    proxy.child.kill().unwrap();
    proxy.child.wait().unwrap();
    gone([child, grandchild], "the proxy was killed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_limits_apply_to_stdio_servers() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = ProxySettings::default();
    settings.processes.rlimits.open_files = 77;
    let mut h = Harness::start_with(dir.path(), settings).await;
    let pids = dir.path().join("limits.pids");
    h.upsert(spawning_fixture("limited", &pids, &[])).await;
    let (child, grandchild) = read_pids(&pids).await;
    for pid in [child, grandchild] {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>()[3..5],
            ["77", "77"],
            "{pid}: {line}"
        );
    }
    h.stop().await;
    gone([child, grandchild], "shutdown").await;
}

fn stdio_input(command: &str, caller: Option<Caller>) -> UpsertInput {
    UpsertInput {
        cell_id: String::new(),
        server_id: None,
        display_name: format!("s{}", command.len()),
        transport: Some(TransportSpec::Stdio {
            command: command.into(),
            args: vec![],
            env: Default::default(),
            inherit_env: vec![],
            cwd: None,
        }),
        // Paused: the check is at registration; nothing needs to start.
        state: Some(ServerState::Paused),
        limits: None,
        default_permission: None,
        tool_permissions: Default::default(),
        skip_refresh: true,
        expected_generation: None,
        caller,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_authentication_on_only_admins_register_allowed_commands() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = ProxySettings::default();
    settings.processes.allowed_commands = vec!["/usr/bin/allowed-server".into()];
    settings.processes.env_allow = EnvAllowList::default();
    let h = Harness::start_with(dir.path(), settings).await;
    let caller = |role: Role, kind: CallerKind| Caller {
        cell: "default".into(),
        role,
        principal: "t1".into(),
        kind,
    };
    for (command, who) in [
        (
            "/usr/bin/allowed-server",
            caller(Role::Agent, CallerKind::Token),
        ),
        ("/bin/sh", caller(Role::Admin, CallerKind::Token)),
        ("/bin/sh", caller(Role::Admin, CallerKind::Jwt)),
    ] {
        let e = h
            .proxy
            .upsert(stdio_input(command, Some(who.clone())))
            .await
            .unwrap_err();
        assert_eq!(e.code.code, "mcp.command_not_allowed", "{command} {who:?}");
        assert_eq!(e.to_status().code(), tonic::Code::PermissionDenied);
    }
    // An admin with an allowed command, and anyone when authentication is off.
    h.proxy
        .upsert(stdio_input(
            "/usr/bin/allowed-server",
            Some(caller(Role::Admin, CallerKind::Token)),
        ))
        .await
        .unwrap();
    h.proxy
        .upsert(stdio_input("/bin/sh", Some(Caller::auth_off("default"))))
        .await
        .unwrap();
    h.proxy
        .upsert(stdio_input("/bin/true", None))
        .await
        .unwrap();
    h.stop().await;
}
