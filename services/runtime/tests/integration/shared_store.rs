//! Two runtimes over one store and one set of peers, as two replicas over a shared store are: a
//! host-driven run created and driven on A is read on B (`GetRun`, `ListRuns`, `WatchRun` see its
//! state and its journal) without B taking it over, and a change to it sent to B is refused with
//! `runtime.not_owner` (docs/runtime.md, "Over a shared store"). The handlers are called directly;
//! no socket is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use futures::StreamExt;
use serde_json::json;
use support::{agent, alone, calls};
use tonic::{Code, Request};
use tonic_types::StatusExt;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::runtime_service_server::RuntimeService;
use toolplane_runtime::service::RuntimeGrpc;

/// Run `shared-1` as `svc` answers `GetRun`.
async fn get(svc: &RuntimeGrpc) -> pb::Run {
    svc.get_run(Request::new(pb::GetRunRequest {
        run_id: "shared-1".into(),
    }))
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

/// The event types of run `shared-1`'s journal as `svc` replays it with `WatchRun`.
async fn kinds(svc: &RuntimeGrpc) -> Vec<String> {
    svc.watch_run(Request::new(pb::WatchRunRequest {
        run_id: "shared-1".into(),
        history_only: true,
        ..Default::default()
    }))
    .await
    .unwrap()
    .into_inner()
    .map(|e| e.unwrap().event.unwrap().r#type)
    .collect::<Vec<_>>()
    .await
}

#[tokio::test]
async fn a_run_driven_on_one_replica_is_read_on_another_and_changes_there_are_refused() {
    let a = alone().await;
    // B starts on the same store and peers before A has any run, as a second replica would.
    let b = a.restart().await;
    a.mem.put_profile(agent("writer", json!({})));
    let opened = a.host_run("shared-1", "writer").await;
    a.first_turn(
        &opened,
        &calls(&[(
            "c1",
            "workspace_write_file",
            json!({"path": "output/x.txt", "content": "from a"}),
        )]),
    )
    .await
    .unwrap();
    let on_a = RuntimeGrpc::new(a.rt.clone());
    let on_b = RuntimeGrpc::new(b.clone());
    assert!(!b.has_run("shared-1"));

    // GetRun on B answers the run's state as A's record has it.
    let from_a = get(&on_a).await;
    let from_b = get(&on_b).await;
    assert_eq!(from_b.run_id, "shared-1");
    assert_eq!(from_b.status, from_a.status);
    assert_eq!(from_b.profile_id, from_a.profile_id);
    assert!(from_b.last_seq > 0, "{}", from_b.last_seq);
    assert_eq!(from_b.last_seq, from_a.last_seq);

    // ListRuns on B lists it.
    let listed = on_b
        .list_runs(Request::new(pb::ListRunsRequest::default()))
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(
        listed.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        vec!["shared-1"]
    );

    // WatchRun on B replays the run's journal: the same events as on A.
    let on_b_events = kinds(&on_b).await;
    let on_a_events = kinds(&on_a).await;
    assert!(
        on_b_events.iter().any(|k| k == "tool_call_started"),
        "{on_b_events:?}"
    );
    assert_eq!(on_b_events, on_a_events);

    // Changes sent to B are refused with `runtime.not_owner`, naming the run; nothing changes.
    let journal_before = a.mem.journal("shared-1").len();
    let cancel = on_b
        .cancel_run(Request::new(pb::CancelRunRequest {
            run_id: "shared-1".into(),
            reason: "from b".into(),
        }))
        .await
        .unwrap_err();
    let open = on_b
        .open_invocation(Request::new(pb::OpenInvocationRequest {
            run_id: "shared-1".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    for refused in [cancel, open] {
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        let info = refused.get_details_error_info().unwrap();
        assert_eq!(info.reason, "runtime.not_owner");
        assert_eq!(
            info.metadata.get("run_id").map(String::as_str),
            Some("shared-1")
        );
    }
    assert!(!b.has_run("shared-1"));
    assert_eq!(a.mem.journal("shared-1").len(), journal_before);
    let after = get(&on_a).await;
    assert_eq!(after.status, from_a.status);

    // A run no replica wrote is still `runtime.not_found` on B.
    let missing = on_b
        .cancel_run(Request::new(pb::CancelRunRequest {
            run_id: "nowhere".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}
