//! A client of its own, generated from `proto/`, against a whole plane on real sockets: it
//! provokes a dozen different failures across the four services and decides what to do about
//! each from `google.rpc.ErrorInfo.reason` alone (docs/errors.md, "Error details"), never from
//! the message text. Each status also states its code once in its message, names the domain,
//! carries a `BadRequest` when it is INVALID_ARGUMENT, and keeps a peer's reason when the runtime
//! relays one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::future::Future;

use serde_json::json;
use tonic_types::StatusExt;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;

/// What this client does about a failure, decided by the reason only.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Action {
    /// Create the missing thing, or ask for another one.
    CreateIt,
    /// Re-read the current version and write again.
    ReadAndRetry,
    /// Fix the request; nothing to retry.
    FixRequest,
    /// Pick another name.
    Rename,
}

fn action(reason: &str) -> Action {
    match reason {
        "runtime.not_found"
        | "profile.not_found"
        | "catalog.tool_not_found"
        | "mcp.server_not_found"
        | "workspace.run_not_found"
        | "workspace.not_found" => Action::CreateIt,
        "profile.version_conflict" | "policy.version_conflict" => Action::ReadAndRetry,
        "mcp.duplicate_display_name" => Action::Rename,
        "runtime.invalid_request"
        | "profile.invalid"
        | "profile.invalid_selector"
        | "policy.invalid"
        | "tool.invalid_id"
        | "mcp.invalid_registration"
        | "mcp.invalid_request"
        | "workspace.invalid_request"
        | "catalog.invalid_request"
        | "request.invalid_page_token" => Action::FixRequest,
        other => panic!("this client does not know `{other}`"),
    }
}

/// The reason of a status, checking what every toolplane status carries.
fn reason(status: &tonic::Status) -> String {
    let details = status.get_error_details();
    let info = details
        .error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.domain, "toolplane.dev", "{status:?}");
    let prefix = format!("{}: ", info.reason);
    assert!(
        status.message().starts_with(&prefix),
        "the message does not start with its code: {status:?}"
    );
    assert!(
        !status.message()[prefix.len()..].starts_with(&prefix),
        "the message repeats its code: {status:?}"
    );
    if status.code() == tonic::Code::InvalidArgument {
        let bad = details
            .bad_request()
            .unwrap_or_else(|| panic!("no BadRequest in {status:?}"));
        assert!(!bad.field_violations.is_empty(), "{status:?}");
    }
    info.reason.clone()
}

async fn failure<T>(
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> tonic::Status {
    match call.await {
        Ok(_) => panic!("the call succeeded"),
        Err(status) => status,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_branches_on_error_info_reason_alone() {
    let mut h = common::harness().await;
    let mut catalog = CatalogServiceClient::new(common::channel(&h.plane.catalog_url()).await);
    h.put_profile(json!({"id": "p1", "tools": {"allow": ["builtin:dice.roll"]}}))
        .await;

    let mut seen: Vec<(&str, String, Action)> = Vec::new();
    let mut record = |what: &'static str, status: tonic::Status| {
        let reason = reason(&status);
        let act = action(&reason);
        seen.push((what, reason, act));
        status
    };

    // The runtime.
    record(
        "GetRun of an unknown run",
        failure(h.runtime.get_run(pb::GetRunRequest {
            run_id: "run-none".into(),
        }))
        .await,
    );
    record(
        "StartRun without a spec",
        failure(h.runtime.start_run(pb::StartRunRequest {
            spec: None,
            request_id: String::new(),
        }))
        .await,
    );
    record(
        "ListRuns with a page token it did not issue",
        failure(h.runtime.list_runs(pb::ListRunsRequest {
            page_token: "not-a-token".into(),
            ..Default::default()
        }))
        .await,
    );

    // The catalog.
    record(
        "GetProfile of an unknown profile",
        failure(h.profiles.get_profile(pb::GetProfileRequest {
            cell_id: String::new(),
            profile_id: "nope".into(),
        }))
        .await,
    );
    record(
        "PutProfile of malformed JSON",
        failure(h.profiles.put_profile(pb::PutProfileRequest {
            profile_id: "p2".into(),
            profile_json: "{not json".into(),
            ..Default::default()
        }))
        .await,
    );
    record(
        "PutProfile with a stale expected version",
        failure(h.profiles.put_profile(pb::PutProfileRequest {
            profile_id: "p1".into(),
            profile_json:
                json!({"id": "p1", "tools": {"allow": ["builtin:dice.roll"]}}).to_string(),
            expected_version: Some(7),
            ..Default::default()
        }))
        .await,
    );
    record(
        "PutPlatformPolicy of malformed JSON",
        failure(
            h.profiles
                .put_platform_policy(pb::PutPlatformPolicyRequest {
                    policy_json: "[]".into(),
                    ..Default::default()
                }),
        )
        .await,
    );
    record(
        "GetTool of an unknown tool",
        failure(catalog.get_tool(pb::GetToolRequest {
            cell_id: String::new(),
            tool_id: "builtin:no.such_tool".into(),
        }))
        .await,
    );
    record(
        "GetTool of a malformed id",
        failure(catalog.get_tool(pb::GetToolRequest {
            cell_id: String::new(),
            tool_id: "no colon".into(),
        }))
        .await,
    );

    // The mcp-proxy.
    record(
        "GetServer of an unknown server",
        failure(h.mcp.get_server(pb::GetServerRequest {
            cell_id: String::new(),
            server_id: "00000000-0000-4000-8000-000000000000".into(),
        }))
        .await,
    );
    record(
        "UpsertServer without a transport",
        failure(h.mcp.upsert_server(pb::UpsertServerRequest {
            display_name: "x".into(),
            ..Default::default()
        }))
        .await,
    );

    // The workspace.
    record(
        "ReadJournal of an unknown run",
        failure(h.workspace.read_journal(pb::ReadJournalRequest {
            run_id: "run-none".into(),
            from_seq: 1,
            page_size: 10,
            cell_id: String::new(),
        }))
        .await,
    );
    record(
        "GetRunWorkspace without a run id",
        failure(h.workspace.get_run_workspace(pb::GetRunWorkspaceRequest {
            run_id: String::new(),
            cell_id: String::new(),
        }))
        .await,
    );

    // A peer's refusal relayed by the runtime keeps the peer's reason as its cause.
    let run = h.create_run("p1", false).await;
    let relayed = record(
        "OpenInvocation of an unknown profile",
        failure(h.runtime.open_invocation(pb::OpenInvocationRequest {
            run_id: run,
            profile_id: "nope".into(),
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        }))
        .await,
    );
    let info = relayed.get_details_error_info().unwrap();
    assert_eq!(
        info.metadata.get("cause").map(String::as_str),
        Some("profile.not_found"),
        "{relayed:?}"
    );

    let reasons: std::collections::BTreeSet<&str> =
        seen.iter().map(|(_, reason, _)| reason.as_str()).collect();
    assert!(
        reasons.len() >= 10,
        "only {} distinct reasons: {seen:#?}",
        reasons.len()
    );
    let expected = [
        ("GetRun of an unknown run", Action::CreateIt),
        ("StartRun without a spec", Action::FixRequest),
        (
            "ListRuns with a page token it did not issue",
            Action::FixRequest,
        ),
        ("GetProfile of an unknown profile", Action::CreateIt),
        ("PutProfile of malformed JSON", Action::FixRequest),
        (
            "PutProfile with a stale expected version",
            Action::ReadAndRetry,
        ),
        ("PutPlatformPolicy of malformed JSON", Action::FixRequest),
        ("GetTool of an unknown tool", Action::CreateIt),
        ("GetTool of a malformed id", Action::FixRequest),
        ("GetServer of an unknown server", Action::CreateIt),
        ("UpsertServer without a transport", Action::FixRequest),
        ("ReadJournal of an unknown run", Action::CreateIt),
        ("GetRunWorkspace without a run id", Action::FixRequest),
        ("OpenInvocation of an unknown profile", Action::CreateIt),
    ];
    for ((what, reason, act), (want_what, want)) in seen.iter().zip(expected) {
        assert_eq!(*what, want_what);
        assert_eq!(*act, want, "{what}: {reason}");
    }
}
