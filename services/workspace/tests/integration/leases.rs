//! Run leases over a real socket: acquisition, renewal, release, expiry and takeover with a
//! greater epoch, and the fencing that follows (a stale holder's journal appends and file writes
//! are refused and write nothing; stored records carry their append's epoch).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;
use toolplane_proto::v1 as pb;

async fn acquire(
    s: &mut Service,
    run: &str,
    holder: &str,
    ttl_ms: u64,
) -> Result<u64, tonic::Status> {
    let r = s
        .storage
        .acquire_run_lease(pb::AcquireRunLeaseRequest {
            run_id: run.into(),
            holder: holder.into(),
            ttl_ms,
            cell_id: String::new(),
        })
        .await?;
    let lease = r.into_inner().lease.unwrap();
    assert_eq!(lease.holder, holder);
    Ok(lease.epoch)
}

async fn renew(s: &mut Service, run: &str, holder: &str, epoch: u64) -> Result<i64, tonic::Status> {
    let r = s
        .storage
        .renew_run_lease(pb::RenewRunLeaseRequest {
            run_id: run.into(),
            holder: holder.into(),
            epoch,
            ttl_ms: 60_000,
            cell_id: String::new(),
        })
        .await?;
    Ok(r.into_inner().lease.unwrap().expires_at_unix_ms)
}

async fn append(s: &mut Service, run: &str, seq: u64, epoch: u64) -> Result<u64, tonic::Status> {
    let r = s
        .storage
        .append_journal(pb::AppendJournalRequest {
            run_id: run.into(),
            expected_seq: seq,
            records: vec![pb::JournalEvent {
                r#type: format!("e{seq}"),
                // Whatever a writer claims, the stored record carries the append's epoch.
                epoch: 99,
                ..Default::default()
            }],
            epoch,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await?;
    Ok(r.into_inner().last_seq)
}

async fn journal(s: &mut Service, run: &str) -> Vec<(u64, u64)> {
    let page = s
        .storage
        .read_journal(pb::ReadJournalRequest {
            run_id: run.into(),
            from_seq: 1,
            page_size: 100,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    page.records.iter().map(|r| (r.seq, r.epoch)).collect()
}

async fn write(
    s: &mut Service,
    run: &str,
    path: &str,
    epoch: u64,
) -> Result<pb::ToolResult, tonic::Status> {
    let r = s
        .tools
        .execute(pb::ExecuteRequest {
            context: Some(pb::ToolContext {
                run_id: run.into(),
                invocation_id: "i".into(),
                epoch,
                ..Default::default()
            }),
            invocation: Some(pb::ToolInvocation {
                call_id: format!("call_{path}_{epoch}"),
                tool_id: "builtin:workspace.write_file".into(),
                arguments_json: json!({"path": path, "content": "x"}).to_string(),
                provider_metadata_json: None,
            }),
            timeout_ms: None,
            trace: false,
        })
        .await?;
    Ok(r.into_inner().result.unwrap())
}

fn code(status: &tonic::Status) -> &str {
    status.message().split(':').next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_is_renewed_by_its_holder_and_refused_to_another() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    // The manifest is at epoch 1: the first lease's epoch is above it.
    let a = acquire(&mut s, "r1", "runtime-a", 60_000).await.unwrap();
    assert_eq!(a, 2);
    let held = acquire(&mut s, "r1", "runtime-b", 60_000)
        .await
        .unwrap_err();
    assert_eq!(held.code(), tonic::Code::FailedPrecondition);
    assert_eq!(code(&held), "workspace.lease_held");
    assert!(renew(&mut s, "r1", "runtime-a", a).await.unwrap() > 0);
    // Another holder cannot renew it, nor its own holder at an epoch it never had.
    let other = renew(&mut s, "r1", "runtime-b", a).await.unwrap_err();
    assert_eq!(code(&other), "workspace.stale_epoch");
    // Re-acquiring by the holder itself moves to a new epoch; the old one is stale from then on.
    let a2 = acquire(&mut s, "r1", "runtime-a", 60_000).await.unwrap();
    assert_eq!(a2, 3);
    let stale = renew(&mut s, "r1", "runtime-a", a).await.unwrap_err();
    assert_eq!(code(&stale), "workspace.stale_epoch");
    // Released, it goes to the next holder at a greater epoch; the released one cannot renew.
    s.storage
        .release_run_lease(pb::ReleaseRunLeaseRequest {
            run_id: "r1".into(),
            holder: "runtime-a".into(),
            epoch: a2,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(
        code(&renew(&mut s, "r1", "runtime-a", a2).await.unwrap_err()),
        "workspace.stale_epoch"
    );
    assert_eq!(acquire(&mut s, "r1", "runtime-b", 60_000).await.unwrap(), 4);
    // A lease that was never taken cannot be renewed; a TTL out of range is refused.
    let none = renew(&mut s, "r2", "runtime-a", 1).await.unwrap_err();
    assert_eq!(none.code(), tonic::Code::NotFound);
    assert_eq!(code(&none), "workspace.lease_not_found");
    let bad = acquire(&mut s, "r2", "runtime-a", 0).await.unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_taken_over_and_the_old_holder_writes_nothing() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let old = acquire(&mut s, "r1", "runtime-a", 200).await.unwrap();
    assert_eq!(append(&mut s, "r1", 1, old).await.unwrap(), 1);
    assert!(
        !write(&mut s, "r1", "output/old.md", old)
            .await
            .unwrap()
            .is_error
    );

    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let new = acquire(&mut s, "r1", "runtime-b", 60_000).await.unwrap();
    assert!(new > old, "{new} > {old}");

    // The old holder's append is refused before the new holder wrote anything, and stores nothing.
    let refused = append(&mut s, "r1", 2, old).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(code(&refused), "workspace.stale_epoch");
    assert_eq!(journal(&mut s, "r1").await, vec![(1, old)]);
    // Its file write too: refused with a status, nothing on disk.
    let refused = write(&mut s, "r1", "output/late.md", old)
        .await
        .unwrap_err();
    assert_eq!(code(&refused), "workspace.stale_epoch");
    assert!(!s.run_dir("default", "r1").join("output/late.md").exists());
    // Its renewal says it lost the run.
    assert_eq!(
        code(&renew(&mut s, "r1", "runtime-a", old).await.unwrap_err()),
        "workspace.stale_epoch"
    );
    // The new holder goes on; every record carries the epoch of the append that stored it.
    assert_eq!(append(&mut s, "r1", 2, new).await.unwrap(), 2);
    assert!(
        !write(&mut s, "r1", "output/new.md", new)
            .await
            .unwrap()
            .is_error
    );
    assert_eq!(journal(&mut s, "r1").await, vec![(1, old), (2, new)]);
    let manifest = s
        .storage
        .get_run_workspace(pb::GetRunWorkspaceRequest {
            run_id: "r1".into(),
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .manifest
        .unwrap();
    assert_eq!(manifest.epoch, new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_before_the_run_exists_fences_its_manifest() {
    let mut s = start().await;
    let a = acquire(&mut s, "r1", "runtime-a", 60_000).await.unwrap();
    assert_eq!(a, 1);
    s.storage
        .release_run_lease(pb::ReleaseRunLeaseRequest {
            run_id: "r1".into(),
            holder: "runtime-a".into(),
            epoch: a,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    let b = acquire(&mut s, "r1", "runtime-b", 60_000).await.unwrap();
    assert_eq!(b, 2);
    // Created with epoch 1 (by whoever), the manifest starts at the lease's epoch.
    let manifest = s.create_run("default", "r1", "c").await;
    assert_eq!(manifest.epoch, b);
    assert_eq!(
        code(&append(&mut s, "r1", 1, a).await.unwrap_err()),
        "workspace.stale_epoch"
    );
    assert!(journal(&mut s, "r1").await.is_empty());
    assert_eq!(append(&mut s, "r1", 1, b).await.unwrap(), 1);
}
