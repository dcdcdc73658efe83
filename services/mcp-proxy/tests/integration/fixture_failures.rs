//! Rechecks, bad input and failing servers, against the Rust fixture server over stdio: every case
//! ends in a clear coded result, and the proxy keeps serving afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use toolplane_mcp_proxy::ProxySettings;
use toolplane_proto::v1 as pb;

async fn with_fixture(env: &[(&str, &str)]) -> (tempfile::TempDir, Harness, pb::McpServer) {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let server = h.upsert(fixture("fx", env)).await.server.unwrap();
    assert_eq!(
        server.connection,
        pb::McpConnectionStatus::Connected as i32,
        "{}",
        server.last_error
    );
    (dir, h, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_sending() {
    let (_dir, mut h, server) = with_fixture(&[]).await;
    let echo = tool_id(&server, "echo");

    let unknown = "mcp/00000000-0000-4000-8000-000000000000:echo";
    assert_error(
        &h.call(unknown, "{}").await,
        "mcp.server_not_found",
        pb::ExecutionOutcome::NotSent,
    );
    assert_error(
        &h.call(&tool_id(&server, "nope"), "{}").await,
        "mcp.tool_not_found",
        pb::ExecutionOutcome::NotSent,
    );
    for args in ["[1,2]", "\"text\"", "42", "{not json"] {
        assert_error(
            &h.call(&echo, args).await,
            "tool.invalid_arguments",
            pb::ExecutionOutcome::NotSent,
        );
    }
    // Exactly 256 KiB of arguments is sent; one byte more is not.
    let pad = 256 * 1024 - r#"{"text":""}"#.len();
    let at_limit = format!(r#"{{"text":"{}"}}"#, "a".repeat(pad));
    assert_eq!(at_limit.len(), 256 * 1024);
    let r = h.call(&echo, &at_limit).await;
    assert_eq!(outcome(&r), pb::ExecutionOutcome::Known);
    assert_eq!(result(&r).content.len(), pad);
    let over = format!(r#"{{"text":"{}"}}"#, "a".repeat(pad + 1));
    assert_error(
        &h.call(&echo, &over).await,
        "tool.invalid_arguments",
        pb::ExecutionOutcome::NotSent,
    );

    // A tool id that is not an MCP tool is the caller's bug: a status, not a result.
    let status = h
        .exec
        .execute(pb::ExecuteRequest {
            invocation: Some(pb::ToolInvocation {
                call_id: "c".into(),
                tool_id: "builtin:dice.roll".into(),
                arguments_json: "{}".into(),
                provider_metadata_json: None,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("tool.invalid_id: "),
        "{}",
        status.message()
    );

    // Permission off, then a server paused: policy-denied results, nothing sent.
    h.set_permission(&server.server_id, "echo", pb::McpToolPermission::Off)
        .await;
    let r = h.call(&echo, r#"{"text":"x"}"#).await;
    assert_error(&r, "mcp.permission_off", pb::ExecutionOutcome::NotSent);
    h.set_state(&server.server_id, pb::McpServerState::Paused)
        .await;
    assert_error(
        &h.call(&tool_id(&server, "structured"), "{}").await,
        "mcp.server_paused",
        pb::ExecutionOutcome::NotSent,
    );
    h.set_state(&server.server_id, pb::McpServerState::Active)
        .await;
    let r = h.call(&tool_id(&server, "structured"), "{}").await;
    assert_eq!(outcome(&r), pb::ExecutionOutcome::Known);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_of_structured_mixed_and_error_results() {
    let (_dir, mut h, server) = with_fixture(&[]).await;
    let r = h.call(&tool_id(&server, "structured"), "{}").await;
    let res = result(&r);
    assert!(
        res.content.starts_with("## Details\n\n```json\n"),
        "{}",
        res.content
    );
    assert_eq!(
        res.content.matches("21.5").count(),
        1,
        "structured shown once: {}",
        res.content
    );
    assert_eq!(
        res.structured_json.as_deref(),
        Some(r#"{"temperature":21.5,"unit":"C"}"#)
    );

    let r = h.call(&tool_id(&server, "mixed"), "{}").await;
    let res = result(&r);
    assert!(
        res.content.starts_with("Here is the report."),
        "{}",
        res.content
    );
    assert!(
        res.content.contains("## Details") && res.content.contains("## Notes"),
        "{}",
        res.content
    );
    assert!(res.content.contains("image/png"), "{}", res.content);

    let r = h.call(&tool_id(&server, "fail"), "{}").await;
    assert_error(&r, "mcp.tool_error", pb::ExecutionOutcome::Known);
    let res = result(&r);
    assert!(
        res.content
            .starts_with("the widget is broken\n\n## Error details"),
        "{}",
        res.content
    );
    let raw: serde_json::Value =
        serde_json::from_str(r.raw_result_json.as_deref().unwrap()).unwrap();
    assert_eq!(raw["isError"], true);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_output_and_crashes_are_reported_and_the_proxy_recovers() {
    let (_dir, mut h, server) = with_fixture(&[]).await;
    let echo = tool_id(&server, "echo");

    let r = h
        .call_with(&tool_id(&server, "not_json"), "{}", Some(10_000))
        .await;
    assert_error(&r, "mcp.malformed_response", pb::ExecutionOutcome::Unknown);
    assert!(
        result(&r).content.contains("not JSON"),
        "{}",
        result(&r).content
    );
    let r = h.call(&echo, r#"{"text":"after garbage"}"#).await;
    assert_eq!(
        result(&r).content,
        "after garbage",
        "{}",
        result(&r).content
    );

    let r = h
        .call_with(&tool_id(&server, "bad_shape"), "{}", Some(10_000))
        .await;
    assert_error(&r, "mcp.malformed_response", pb::ExecutionOutcome::Unknown);
    let r = h.call(&echo, r#"{"text":"after bad shape"}"#).await;
    assert_eq!(result(&r).content, "after bad shape");

    let r = h
        .call_with(&tool_id(&server, "crash"), "{}", Some(10_000))
        .await;
    assert_error(&r, "mcp.connection_lost", pb::ExecutionOutcome::Unknown);
    assert!(
        result(&r).content.contains("exited"),
        "{}",
        result(&r).content
    );
    let r = h.call(&echo, r#"{"text":"after crash"}"#).await;
    assert_eq!(result(&r).content, "after crash", "{}", result(&r).content);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_reach_the_server_as_cancellation() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cancel.log");
    let log_s = log.to_string_lossy().to_string();
    let (_d, mut h, server) = with_fixture(&[("FIXTURE_CANCEL_LOG", &log_s)]).await;
    let started = std::time::Instant::now();
    let r = h
        .call_with(&tool_id(&server, "slow"), r#"{"ms":20000}"#, Some(300))
        .await;
    assert_error(&r, "tool.timeout", pb::ExecutionOutcome::Unknown);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    eventually(5, "the server saw notifications/cancelled", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("cancelled slow")
    })
    .await;

    // A caller that drops the RPC cancels the call at the server too.
    let mut exec = h.exec.clone();
    let id = tool_id(&server, "slow");
    let call = tokio::spawn(async move {
        exec.execute(pb::ExecuteRequest {
            invocation: Some(pb::ToolInvocation {
                call_id: "c2".into(),
                tool_id: id,
                arguments_json: r#"{"ms":20000}"#.into(),
                provider_metadata_json: None,
            }),
            ..Default::default()
        })
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    call.abort();
    eventually(5, "the second cancellation reached the server", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("cancelled slow")
            .count()
            == 2
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_responses_hit_the_response_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let mut req = fixture("fx", &[]);
    req.limits = Some(pb::McpServerLimits {
        max_response_bytes: 512 * 1024,
        ..Default::default()
    });
    let server = h.upsert(req).await.server.unwrap();
    let huge = tool_id(&server, "huge");
    let r = h.call(&huge, r#"{"bytes":100000}"#).await;
    assert_eq!(result(&r).content.len(), 100_000);
    // Over the cap but within the transport's room: measured and refused, the call ran.
    let r = h.call(&huge, r#"{"bytes":1000000}"#).await;
    assert_error(&r, "mcp.response_too_large", pb::ExecutionOutcome::Known);
    // Over the transport cap (4 × 512 KiB, at least 1 MiB): never buffered, connection closed.
    let r = h
        .call_with(&huge, r#"{"bytes":5000000}"#, Some(10_000))
        .await;
    assert_error(&r, "mcp.response_too_large", pb::ExecutionOutcome::Unknown);
    let r = h
        .call(&tool_id(&server, "echo"), r#"{"text":"still here"}"#)
        .await;
    assert_eq!(result(&r).content, "still here");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_tools_are_capped_then_cached_and_paged() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let up = h
        .upsert(fixture("many", &[("FIXTURE_TOOL_COUNT", "10000")]))
        .await;
    let server = up.server.unwrap();
    assert_eq!(server.cached_tool_count, 2000);
    assert!(
        up.warnings
            .iter()
            .any(|w| w.code == "mcp.catalog_truncated"),
        "{:?}",
        up.warnings
    );

    let mut req = fixture("many", &[("FIXTURE_TOOL_COUNT", "10000")]);
    req.server_id = Some(server.server_id.clone());
    req.limits = Some(pb::McpServerLimits {
        max_tools: 20_000,
        ..Default::default()
    });
    let up = h.upsert(req).await;
    let server = up.server.unwrap();
    assert_eq!(server.cached_tool_count, 10_011, "{:?}", up.warnings);
    let tools = h.tools(false).await;
    assert_eq!(tools.len(), 10_011);
    let names: std::collections::HashSet<_> = tools
        .iter()
        .map(|t| t.status.as_ref().unwrap().native_name.clone())
        .collect();
    assert_eq!(names.len(), 10_011, "pages neither repeat nor skip");
    let r = h.call(&tool_id(&server, "tool_09999"), "{}").await;
    assert_eq!(result(&r).content, "called tool_09999");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_and_schemas_are_diagnosed() {
    let (_dir, mut h, server) = with_fixture(&[("FIXTURE_HOSTILE", "1")]).await;
    let all = h.tools(true).await;
    let by_name = |n: &str| {
        all.iter()
            .find(|t| t.status.as_ref().unwrap().native_name == n)
            .cloned()
    };
    for bad in ["bad name", "line\nbreak", ""] {
        assert!(by_name(bad).is_none(), "{bad:?} must not be cached");
    }
    assert!(by_name(&"x".repeat(200)).is_none());
    let array = by_name("array_schema").unwrap();
    assert!(!array.usable);
    assert_eq!(array.diagnostics[0].code, "tool.invalid_schema");
    assert!(!by_name("untyped_schema").unwrap().usable);
    assert!(by_name("ns:colon/ok").unwrap().usable);
    let r = h.call(&tool_id(&server, "array_schema"), "{}").await;
    assert_error(&r, "mcp.tool_unusable", pb::ExecutionOutcome::NotSent);
    let r = h.call(&tool_id(&server, "ns:colon/ok"), "{}").await;
    assert_eq!(result(&r).content, "called ns:colon/ok");
    // Duplicates keep the first definition.
    assert_eq!(
        all.iter()
            .filter(|t| t.status.as_ref().unwrap().native_name == "echo")
            .count(),
        1
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_server_concurrency_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let mut req = fixture("one-at-a-time", &[]);
    req.limits = Some(pb::McpServerLimits {
        max_concurrent_calls: 1,
        ..Default::default()
    });
    let server = h.upsert(req).await.server.unwrap();
    let slow = tool_id(&server, "slow");
    let mut first = h.exec.clone();
    let id = slow.clone();
    let running = tokio::spawn(async move {
        first
            .execute(pb::ExecuteRequest {
                invocation: Some(pb::ToolInvocation {
                    call_id: "call_1".into(),
                    tool_id: id,
                    arguments_json: r#"{"ms":1500}"#.into(),
                    provider_metadata_json: None,
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let r = h.call_with(&slow, r#"{"ms":10}"#, Some(300)).await;
    assert_error(&r, "mcp.server_busy", pb::ExecutionOutcome::NotSent);
    let first = running.await.unwrap();
    assert_eq!(result(&first).content, "slept 1500 ms");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_and_caches_survive_a_restart_and_children_are_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("starts.log");
    let log_s = log.to_string_lossy().to_string();
    let store_dir = dir.path().join("store");
    let mut h = Harness::start(&store_dir).await;
    let server = h
        .upsert(fixture("durable", &[("FIXTURE_START_LOG", &log_s)]))
        .await
        .server
        .unwrap();
    h.set_permission(&server.server_id, "echo", pb::McpToolPermission::Ask)
        .await;
    h.set_state(&server.server_id, pb::McpServerState::Paused)
        .await;
    let first_pid = started_pids(&log)[0];
    h.stop().await;
    eventually(10, "the child was stopped and reaped at shutdown", || {
        !process_exists(first_pid)
    })
    .await;

    // Paused after the restart: nothing is started, yet the cache answers from disk.
    let mut h = Harness::start(&store_dir).await;
    let servers = h
        .admin
        .list_servers(pb::ListServersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(servers.servers.len(), 1);
    assert_eq!(servers.servers[0].display_name, "durable");
    let tools = h.tools(true).await;
    let echo = tools
        .iter()
        .find(|t| t.status.as_ref().unwrap().native_name == "echo")
        .unwrap();
    assert_eq!(
        echo.status.as_ref().unwrap().permission,
        pb::McpToolPermission::Ask as i32
    );
    assert_eq!(echo.diagnostics[0].code, "mcp.server_paused");
    assert_eq!(
        started_pids(&log).len(),
        1,
        "a paused server is not started"
    );

    // Activated: the supervisor starts it; deregistering stops and reaps it.
    h.set_state(&server.server_id, pb::McpServerState::Active)
        .await;
    let r = h
        .call(&tool_id(&server, "echo"), r#"{"text":"again"}"#)
        .await;
    assert_eq!(result(&r).content, "again");
    let pids = started_pids(&log);
    let second = *pids.last().unwrap();
    assert!(process_exists(second));
    h.admin
        .deregister_server(pb::DeregisterServerRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
        })
        .await
        .unwrap();
    assert!(
        !process_exists(second),
        "deregistration waits until the child is reaped"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_is_reconnected_with_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let settings = ProxySettings {
        reconnect_initial_ms: 100,
        ..Default::default()
    };
    let mut h = Harness::start_with(dir.path(), settings).await;
    let log = dir.path().join("starts.log");
    let log_s = log.to_string_lossy().to_string();
    let server = h
        .upsert(fixture("phoenix", &[("FIXTURE_START_LOG", &log_s)]))
        .await
        .server
        .unwrap();
    let r = h
        .call_with(&tool_id(&server, "crash"), "{}", Some(5000))
        .await;
    assert_error(&r, "mcp.connection_lost", pb::ExecutionOutcome::Unknown);
    // The supervisor brings it back without any call asking.
    eventually(10, "the server was restarted", || {
        started_pids(&log).len() >= 2
    })
    .await;
    let view = h
        .admin
        .get_server(pb::GetServerRequest {
            cell_id: String::new(),
            server_id: server.server_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    assert_eq!(view.cached_tool_count, server.cached_tool_count);

    // A server that cannot start fails with a coded error and backs off.
    let mut bad = fixture("broken", &[]);
    bad.transport = Some(stdio("/nonexistent/toolplane-no-such-server", &[], &[]));
    let up = h.upsert(bad).await;
    let broken = up.server.unwrap();
    assert_eq!(broken.connection, pb::McpConnectionStatus::Failed as i32);
    assert!(
        broken.last_error.contains("cannot start"),
        "{}",
        broken.last_error
    );
    assert_eq!(up.warnings[0].code, "mcp.connection_failed");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_input_is_validated_and_health_and_reflection_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let mut bad = fixture("", &[]);
    let status = h.admin.upsert_server(bad.clone()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("mcp.invalid_registration: "),
        "{}",
        status.message()
    );
    bad.display_name = "ok".into();
    bad.transport = Some(http("ftp://nope"));
    let status = h.admin.upsert_server(bad).await.unwrap_err();
    assert!(status.message().starts_with("mcp.invalid_registration: "));

    let mut a = fixture("same", &[]);
    a.skip_refresh = true;
    h.upsert(a.clone()).await;
    let status = h.admin.upsert_server(a).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::AlreadyExists);

    let status = h
        .admin
        .get_server(pb::GetServerRequest {
            cell_id: String::new(),
            server_id: "00000000-0000-4000-8000-000000000000".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(status.message().starts_with("mcp.server_not_found: "));

    let mut health = tonic_health::pb::health_client::HealthClient::new(h.channel.clone());
    for service in ["toolplane.v1.McpProxyService", "toolplane.v1.ToolExecutor"] {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
    h.stop().await;
}

/// A call admitted while a server is busy is checked again when its slot comes: a permission
/// turned off or a pause that happened while it waited stops it before it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_while_a_call_waits_for_its_slot_stop_it_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    let mut req = fixture("one-at-a-time", &[]);
    req.limits = Some(pb::McpServerLimits {
        max_concurrent_calls: 1,
        ..Default::default()
    });
    let server = h.upsert(req).await.server.unwrap();
    let slow = tool_id(&server, "slow");
    let echo = tool_id(&server, "echo");

    let occupy = |h: &Harness| {
        let mut exec = h.exec.clone();
        let id = slow.clone();
        tokio::spawn(async move {
            exec.execute(pb::ExecuteRequest {
                invocation: Some(pb::ToolInvocation {
                    call_id: "slow".into(),
                    tool_id: id,
                    arguments_json: r#"{"ms":800}"#.into(),
                    provider_metadata_json: None,
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        })
    };
    let waiting = |h: &Harness| {
        let mut exec = h.exec.clone();
        let id = echo.clone();
        tokio::spawn(async move {
            exec.execute(pb::ExecuteRequest {
                invocation: Some(pb::ToolInvocation {
                    call_id: "call_1".into(),
                    tool_id: id,
                    arguments_json: r#"{"text":"late"}"#.into(),
                    provider_metadata_json: None,
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        })
    };
    let pause = std::time::Duration::from_millis(200);

    // Turned off while waiting.
    let first = occupy(&h);
    tokio::time::sleep(pause).await;
    let second = waiting(&h);
    tokio::time::sleep(pause).await;
    h.set_permission(&server.server_id, "echo", pb::McpToolPermission::Off)
        .await;
    assert_eq!(result(&first.await.unwrap()).content, "slept 800 ms");
    assert_error(
        &second.await.unwrap(),
        "mcp.permission_off",
        pb::ExecutionOutcome::NotSent,
    );

    // Paused while waiting.
    h.set_permission(&server.server_id, "echo", pb::McpToolPermission::Allow)
        .await;
    assert_eq!(result(&h.call(&echo, r#"{"text":"x"}"#).await).content, "x");
    let first = occupy(&h);
    tokio::time::sleep(pause).await;
    let second = waiting(&h);
    tokio::time::sleep(pause).await;
    h.set_state(&server.server_id, pb::McpServerState::Paused)
        .await;
    assert_eq!(result(&first.await.unwrap()).content, "slept 800 ms");
    assert_error(
        &second.await.unwrap(),
        "mcp.server_paused",
        pb::ExecutionOutcome::NotSent,
    );
    h.stop().await;
}
