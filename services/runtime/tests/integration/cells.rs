//! Cells that never meet, over the runtime's in-memory ports (tests/integration/support): a caller of cell B
//! finds nothing of cell A — not its runs, invocations, snapshots or journal, not in a listing —
//! and gets for each of A's ids exactly the answer an id that does not exist gets; its tool calls
//! on A's invocation are refused before any tool runs. Governance's Zone layer refuses calls made
//! for another cell than the run's. The handlers are called directly with the `Caller` the auth
//! layer would have put into the request; no socket is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::json;
use support::{Alone, agent, alone, calls};
use tonic::{Code, Request, Status};
use toolplane_auth::{Caller, CallerKind, Role};
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolChoice;
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_server::RuntimeService;
use toolplane_runtime::lifecycle::{NewRun, Opened};
use toolplane_runtime::pipeline::HostCalls;
use toolplane_runtime::service::RuntimeGrpc;
use toolplane_runtime::state::Driver;

fn caller(cell: &str, role: Role) -> Caller {
    Caller {
        cell: cell.into(),
        role,
        principal: format!("tok_{cell}"),
        kind: CallerKind::Token,
    }
}

/// A request as the auth layer hands it on: with its caller in the extensions.
fn as_caller<T>(who: &Caller, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(who.clone());
    request
}

/// A host-driven run of cell `cell` with its root invocation open.
async fn run_in(a: &Alone, run_id: &str, cell: &str) -> Opened {
    let run =
        a.rt.create_run(NewRun {
            run_id: run_id.into(),
            cell_id: cell.into(),
            profile_id: "writer".into(),
            visible_roots: vec!["output/".into()],
            writable_roots: vec!["output/".into()],
            driver: Some(Driver::Host),
            ..NewRun::default()
        })
        .await
        .unwrap();
    a.rt.open_invocation(
        &run,
        "",
        ExitPolicy::Root,
        ProviderFormat::OpenAiChat,
        ToolChoice::Auto,
        Driver::Host,
    )
    .await
    .unwrap()
}

/// The status with the id asked for replaced, so a hidden id and a missing one compare equal.
fn shape(status: &Status, id: &str) -> (Code, String) {
    (status.code(), status.message().replace(id, "<id>"))
}

#[tokio::test]
async fn another_cells_ids_are_answered_exactly_like_missing_ones() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = run_in(&a, "run-a", "a").await;
    let inv_id = opened.invocation.id.clone();
    let svc = RuntimeGrpc::new(a.rt.clone());

    for b in [caller("b", Role::Agent), caller("b", Role::Admin)] {
        let hidden = svc
            .get_run(as_caller(
                &b,
                pb::GetRunRequest {
                    run_id: "run-a".into(),
                },
            ))
            .await
            .unwrap_err();
        let missing = svc
            .get_run(as_caller(
                &b,
                pb::GetRunRequest {
                    run_id: "run-x".into(),
                },
            ))
            .await
            .unwrap_err();
        assert_eq!(shape(&hidden, "run-a"), shape(&missing, "run-x"));
        assert_eq!(hidden.code(), Code::NotFound);

        let by_run = [
            svc.cancel_run(as_caller(
                &b,
                pb::CancelRunRequest {
                    run_id: "run-a".into(),
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
            svc.watch_run(as_caller(
                &b,
                pb::WatchRunRequest {
                    run_id: "run-a".into(),
                    history_only: true,
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
            svc.watch_run(as_caller(
                &b,
                pb::WatchRunRequest {
                    run_id: "run-a".into(),
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
            svc.open_invocation(as_caller(
                &b,
                pb::OpenInvocationRequest {
                    run_id: "run-a".into(),
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
            svc.list_invocations(as_caller(
                &b,
                pb::ListInvocationsRequest {
                    run_id: "run-a".into(),
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
        ];
        for status in &by_run {
            assert_eq!(
                shape(status, "run-a"),
                shape(&missing, "run-x"),
                "{status:?}"
            );
        }

        let missing_inv = svc
            .get_invocation(as_caller(
                &b,
                pb::GetInvocationRequest {
                    invocation_id: "inv-x".into(),
                },
            ))
            .await
            .unwrap_err();
        let by_invocation = [
            svc.get_invocation(as_caller(
                &b,
                pb::GetInvocationRequest {
                    invocation_id: inv_id.clone(),
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
            svc.get_snapshot(as_caller(
                &b,
                pb::GetSnapshotRequest {
                    snapshot_id: inv_id.clone(),
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
            svc.close_invocation(as_caller(
                &b,
                pb::CloseInvocationRequest {
                    invocation_id: inv_id.clone(),
                    ..Default::default()
                },
            ))
            .await
            .map(|_| ())
            .unwrap_err(),
        ];
        assert_eq!(missing_inv.code(), Code::NotFound);
        for status in &by_invocation {
            assert_eq!(
                shape(status, &inv_id),
                shape(&missing_inv, "inv-x"),
                "{status:?}"
            );
        }

        // No listing shows A's run: not with an empty cell, and naming A is refused.
        let listed = svc
            .list_runs(as_caller(&b, pb::ListRunsRequest::default()))
            .await
            .unwrap()
            .into_inner();
        assert!(listed.runs.is_empty(), "{:?}", listed.runs);
        let named = svc
            .list_runs(as_caller(
                &b,
                pb::ListRunsRequest {
                    cell_id: "a".into(),
                    ..Default::default()
                },
            ))
            .await
            .unwrap_err();
        assert_eq!(named.code(), Code::PermissionDenied);
    }

    // A's own caller sees its run, and an empty cell lists its cell only.
    let owner = caller("a", Role::Reader);
    let listed = svc
        .list_runs(as_caller(&owner, pb::ListRunsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.runs.len(), 1);
    assert_eq!(listed.runs[0].run_id, "run-a");
    svc.get_invocation(as_caller(
        &owner,
        pb::GetInvocationRequest {
            invocation_id: inv_id,
        },
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn tool_calls_on_another_cells_invocation_are_refused_before_any_tool_runs() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = run_in(&a, "run-a", "a").await;
    let svc = RuntimeGrpc::new(a.rt.clone());
    let before = a.mem.journal("run-a").len();
    let write = calls(&[(
        "c1",
        "workspace_write_file",
        json!({"path": "output/x.txt", "content": "from b"}),
    )]);
    let refused = svc
        .execute_tool_calls(as_caller(
            &caller("b", Role::Admin),
            pb::ExecuteToolCallsRequest {
                invocation_id: opened.invocation.id.clone(),
                turn_id: opened.turn_id.clone(),
                provider_format: pb::ProviderFormat::OpenaiChat as i32,
                calls_json: write.to_string(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::NotFound);
    assert!(a.mem.executed().is_empty(), "{:?}", a.mem.executed());
    assert_eq!(a.mem.file("output/x.txt"), None);
    assert_eq!(a.mem.journal("run-a").len(), before);
}

#[tokio::test]
async fn creating_a_run_names_no_other_cell_and_an_empty_cell_is_the_callers() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let svc = RuntimeGrpc::new(a.rt.clone());
    let b = caller("b", Role::Agent);
    let refused = svc
        .create_run(as_caller(
            &b,
            pb::CreateRunRequest {
                run_id: "run-1".into(),
                cell_id: "a".into(),
                profile_id: "writer".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(a.rt.run("run-1").is_err());
    let created = svc
        .create_run(as_caller(
            &b,
            pb::CreateRunRequest {
                run_id: "run-2".into(),
                profile_id: "writer".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.run.unwrap().cell_id, "b");
}

#[tokio::test]
async fn with_auth_off_the_request_names_the_cell_as_before() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    run_in(&a, "run-a", "a").await;
    run_in(&a, "run-b", "b").await;
    let svc = RuntimeGrpc::new(a.rt.clone());
    // No caller in the extensions (a server without the layer) and the auth-off caller alike.
    for request in [
        Request::new(pb::ListRunsRequest::default()),
        as_caller(&Caller::auth_off("default"), pb::ListRunsRequest::default()),
    ] {
        let listed = svc.list_runs(request).await.unwrap().into_inner();
        assert_eq!(listed.runs.len(), 2);
    }
    let run = svc
        .get_run(Request::new(pb::GetRunRequest {
            run_id: "run-a".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(run.run.unwrap().cell_id, "a");
}

#[tokio::test]
async fn the_zone_layer_denies_calls_made_for_another_cell_than_the_runs() {
    let a = alone().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = run_in(&a, "run-a", "a").await;
    let inv = &opened.invocation;
    let write = calls(&[(
        "c1",
        "workspace_write_file",
        json!({"path": "output/x.txt", "content": "from b"}),
    )]);
    let turn =
        a.rt.execute_host_calls(
            inv,
            HostCalls {
                turn: &opened.turn_id,
                format: ProviderFormat::OpenAiChat,
                calls: &write,
                epoch: None,
                model_response: None,
                next_choice: None,
                cell: Some("b"),
            },
        )
        .await
        .unwrap();
    let result = &turn.outcome.results[0];
    assert!(result.is_error);
    assert_eq!(result.error_code.as_deref(), Some("policy.denied"));
    assert_eq!(result.structured.as_ref().unwrap()["layer"], json!("zone"));
    assert!(a.mem.executed().is_empty(), "{:?}", a.mem.executed());
    assert_eq!(a.mem.file("output/x.txt"), None);

    // The same call made for the run's own cell runs.
    let next = turn.next_turn_id.unwrap();
    let ok =
        a.rt.execute_host_calls(
            inv,
            HostCalls {
                turn: &next,
                format: ProviderFormat::OpenAiChat,
                calls: &calls(&[(
                    "c2",
                    "workspace_write_file",
                    json!({"path": "output/x.txt", "content": "from a"}),
                )]),
                epoch: None,
                model_response: None,
                next_choice: None,
                cell: Some("a"),
            },
        )
        .await
        .unwrap();
    assert!(
        !ok.outcome.results[0].is_error,
        "{:?}",
        ok.outcome.results[0]
    );
}
