//! Fsync ordering proven on the simulated crash filesystem (`toolplane_store::testing::SimFs`): an
//! acknowledged journal record, the audit object it names and an acknowledged file write survive
//! every crash mode, whether the process died (recovery from the log) or stopped (everything
//! checkpointed); a crash at any operation of a write leaves the old or the new file and a
//! consistent journal; a crash at any operation of a checkpoint — while running or while
//! recovering at start — loses nothing acknowledged, and a finished checkpoint leaves one
//! segment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use tonic::Request;
use toolplane_proto::v1::{
    self as pb, tool_executor_server::ToolExecutor, workspace_service_server::WorkspaceService,
};
use toolplane_store::{
    FsStore, StoreOptions,
    fs::Fs,
    testing::{CrashMode, SimFs},
};
use toolplane_workspace::{Workspace, WorkspaceGrpc, limits::Limits, tree::NoHooks};

/// Segments never roll by size or for quiet in these tests: checkpoints happen when a test asks,
/// or when the service stops.
fn limits() -> Limits {
    Limits {
        journal_segment_bytes: u64::MAX,
        journal_idle_close_ms: 0,
        ..Limits::default()
    }
}

async fn try_open(sim: &SimFs) -> Result<(Arc<Workspace>, WorkspaceGrpc), String> {
    try_open_with(sim, limits()).await
}

async fn try_open_with(
    sim: &SimFs,
    limits: Limits,
) -> Result<(Arc<Workspace>, WorkspaceGrpc), String> {
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let store = FsStore::open_with_fs(Arc::clone(&fs), "/data/store", StoreOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let ws = Arc::new(
        Workspace::open_with(
            fs,
            PathBuf::from("/data"),
            Arc::new(store),
            limits,
            Arc::new(NoHooks),
        )
        .await
        .map_err(|e| e.to_string())?,
    );
    let grpc = WorkspaceGrpc::new(Arc::clone(&ws));
    Ok((ws, grpc))
}

async fn open(sim: &SimFs) -> (Arc<Workspace>, WorkspaceGrpc) {
    try_open(sim).await.unwrap()
}

/// The process dies: no shutdown checkpoint runs, the next start recovers from the log.
fn die(sim: &SimFs, ws: Arc<Workspace>, grpc: WorkspaceGrpc) {
    sim.crash_after(0);
    ws.shutdown();
    drop(grpc);
    drop(ws);
}

fn segments(sim: &SimFs) -> usize {
    sim.files_under(Path::new("/data/journal"))
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .count()
}

/// The files of run r1's journal directory with this extension (`jrn` or `pack`).
fn run_files(sim: &SimFs, extension: &str) -> Vec<PathBuf> {
    sim.files_under(Path::new("/data/journal/runs/default/r1"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect()
}

async fn write_file(grpc: &WorkspaceGrpc, content: &str) -> bool {
    grpc.execute(Request::new(pb::ExecuteRequest {
        context: Some(pb::ToolContext {
            run_id: "r1".into(),
            invocation_id: "i".into(),
            epoch: 1,
            ..Default::default()
        }),
        invocation: Some(pb::ToolInvocation {
            call_id: "c1".into(),
            tool_id: "builtin:workspace.write_file".into(),
            arguments_json: serde_json::json!({"path": "output/a.md", "content": content})
                .to_string(),
            provider_metadata_json: None,
        }),
        timeout_ms: None,
        trace: false,
    }))
    .await
    .is_ok_and(|r| !r.into_inner().result.unwrap().is_error)
}

async fn file(grpc: &WorkspaceGrpc) -> Option<Vec<u8>> {
    grpc.get_object(Request::new(pb::GetObjectRequest {
        run_id: "r1".into(),
        path: "output/a.md".into(),
        cell_id: String::new(),
    }))
    .await
    .ok()
    .map(|r| r.into_inner().content)
}

async fn fresh() -> (SimFs, Arc<Workspace>, WorkspaceGrpc) {
    fresh_with(limits()).await
}

async fn fresh_with(limits: Limits) -> (SimFs, Arc<Workspace>, WorkspaceGrpc) {
    let sim = SimFs::new();
    sim.create_dir_all(std::path::Path::new("/data/store"))
        .unwrap();
    let (ws, grpc) = try_open_with(&sim, limits).await.unwrap();
    grpc.create_run_workspace(Request::new(pb::CreateRunWorkspaceRequest {
        manifest: Some(pb::RunWorkspaceManifest {
            run_id: "r1".into(),
            chat: Some(pb::ChatBinding {
                chat_id: "c".into(),
                message_id: None,
            }),
            ..Default::default()
        }),
        epoch: 1,
    }))
    .await
    .unwrap();
    grpc.open_invocation_workspace(Request::new(pb::OpenInvocationWorkspaceRequest {
        run_id: "r1".into(),
        invocation_id: "i".into(),
        epoch: 1,
        ..Default::default()
    }))
    .await
    .unwrap();
    (sim, ws, grpc)
}

const OBJ: &str = "tool-args/i/call_0123456789abcdef.json";
const OBJ2: &str = "tool-args/i/call_00000000000000b2.json";

/// A second tool call as the runtime sends it: the audit object carried by the append of the
/// record naming it, as record `seq`.
async fn tool_call_cycle_at(grpc: &WorkspaceGrpc, seq: u64) -> Result<(), tonic::Status> {
    grpc.append_journal(Request::new(pb::AppendJournalRequest {
        run_id: "r1".into(),
        expected_seq: seq,
        records: vec![pb::JournalEvent {
            r#type: "tool_call_completed".into(),
            payload_json: format!("{{\"argsPath\":\"{OBJ2}\"}}"),
            ..Default::default()
        }],
        epoch: 1,
        objects: vec![pb::AuditObjectWrite {
            path: OBJ2.into(),
            content: b"{\"args\":1}".to_vec(),
            content_type: String::new(),
        }],
        ..Default::default()
    }))
    .await?;
    Ok(())
}

async fn tool_call_cycle(grpc: &WorkspaceGrpc, seq: u64) -> Result<(), tonic::Status> {
    // The hot path: the audit object unsynced, then the journal record naming it (one group).
    grpc.put_audit_object(Request::new(pb::PutAuditObjectRequest {
        run_id: "r1".into(),
        path: OBJ.into(),
        content: b"{\"args\":1}".to_vec(),
        epoch: 1,
        allow_identical: true,
        ..Default::default()
    }))
    .await?;
    grpc.append_journal(Request::new(pb::AppendJournalRequest {
        run_id: "r1".into(),
        expected_seq: seq,
        records: vec![pb::JournalEvent {
            r#type: "tool_call_requested".into(),
            payload_json: format!("{{\"argsPath\":\"{OBJ}\"}}"),
            ..Default::default()
        }],
        epoch: 1,
        cell_id: String::new(),
        objects: Vec::new(),
    }))
    .await?;
    Ok(())
}

async fn journal_len(grpc: &WorkspaceGrpc) -> Vec<pb::JournalEvent> {
    grpc.read_journal(Request::new(pb::ReadJournalRequest {
        run_id: "r1".into(),
        from_seq: 1,
        page_size: 100,
        cell_id: String::new(),
    }))
    .await
    .unwrap()
    .into_inner()
    .records
}

async fn object(grpc: &WorkspaceGrpc) -> Option<Vec<u8>> {
    grpc.get_object(Request::new(pb::GetObjectRequest {
        run_id: "r1".into(),
        path: OBJ.into(),
        cell_id: String::new(),
    }))
    .await
    .ok()
    .map(|r| r.into_inner().content)
}

fn modes() -> Vec<CrashMode> {
    let mut modes = vec![CrashMode::DropVolatile, CrashMode::KeepDirectoryEntries];
    modes.extend((0..24).map(|seed| CrashMode::Arbitrary { seed }));
    modes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_objects_and_writes_survive_every_crash_mode() {
    for (mode, dies) in modes().into_iter().flat_map(|m| [(m, true), (m, false)]) {
        let (sim, ws, grpc) = fresh().await;
        tool_call_cycle(&grpc, 1).await.unwrap();
        let w = grpc
            .execute(Request::new(pb::ExecuteRequest {
                context: Some(pb::ToolContext {
                    run_id: "r1".into(),
                    invocation_id: "i".into(),
                    epoch: 1,
                    ..Default::default()
                }),
                invocation: Some(pb::ToolInvocation {
                    call_id: "c1".into(),
                    tool_id: "builtin:workspace.write_file".into(),
                    arguments_json: "{\"path\":\"output/a.md\",\"content\":\"new\"}".into(),
                    provider_metadata_json: None,
                }),
                timeout_ms: None,
                trace: false,
            }))
            .await
            .unwrap()
            .into_inner();
        assert!(!w.result.unwrap().is_error);
        if dies {
            die(&sim, ws, grpc);
        } else {
            ws.shutdown();
            assert_eq!(segments(&sim), 0, "a stopped service leaves no segment");
            drop(grpc);
            drop(ws);
        }
        sim.crash(mode);
        let (ws, grpc) = open(&sim).await;
        let records = journal_len(&grpc).await;
        assert_eq!(
            records.len(),
            1,
            "{mode:?} (died: {dies}): the acknowledged record survived"
        );
        assert_eq!(
            segments(&sim),
            0,
            "recovery checkpointed the old segments (the next is made by its first write)"
        );
        assert_eq!(
            object(&grpc).await.as_deref(),
            Some(&b"{\"args\":1}"[..]),
            "{mode:?}: the object it names is whole"
        );
        let file = grpc
            .get_object(Request::new(pb::GetObjectRequest {
                run_id: "r1".into(),
                path: "output/a.md".into(),
                cell_id: String::new(),
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            file.content, b"new",
            "{mode:?}: the acknowledged write survived"
        );
        ws.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_leaves_old_or_new() {
    let mut step = 0u64;
    loop {
        let (sim, ws, grpc) = fresh().await;
        tool_call_cycle(&grpc, 1).await.unwrap();
        let base = sim.ops();
        sim.crash_after(step);
        let acked = tool_call_cycle(&grpc, 2).await.is_ok();
        let write = grpc
            .execute(Request::new(pb::ExecuteRequest {
                context: Some(pb::ToolContext {
                    run_id: "r1".into(),
                    invocation_id: "i".into(),
                    epoch: 1,
                    ..Default::default()
                }),
                invocation: Some(pb::ToolInvocation {
                    call_id: "c1".into(),
                    tool_id: "builtin:workspace.write_file".into(),
                    arguments_json: "{\"path\":\"output/a.md\",\"content\":\"new\"}".into(),
                    provider_metadata_json: None,
                }),
                timeout_ms: None,
                trace: false,
            }))
            .await;
        let write_acked = write
            .map(|r| !r.into_inner().result.unwrap().is_error)
            .unwrap_or(false);
        let finished = !sim.has_crashed();
        let _ = base;
        ws.shutdown();
        drop(grpc);
        drop(ws);
        for mode in [CrashMode::DropVolatile, CrashMode::Arbitrary { seed: step }] {
            sim.crash(mode);
            let (ws2, grpc2) = open(&sim).await;
            let records = journal_len(&grpc2).await;
            assert!(
                records
                    .iter()
                    .enumerate()
                    .all(|(i, r)| r.seq == i as u64 + 1),
                "consecutive after a crash at step {step}"
            );
            if acked {
                assert_eq!(
                    records.len(),
                    2,
                    "acknowledged append lost at step {step} ({mode:?})"
                );
            }
            assert_eq!(object(&grpc2).await.as_deref(), Some(&b"{\"args\":1}"[..]));
            let file = grpc2
                .get_object(Request::new(pb::GetObjectRequest {
                    run_id: "r1".into(),
                    path: "output/a.md".into(),
                    cell_id: String::new(),
                }))
                .await;
            match file {
                Ok(f) => assert_eq!(
                    f.into_inner().content,
                    b"new",
                    "a file is never torn (step {step})"
                ),
                Err(status) => assert!(
                    !write_acked,
                    "acknowledged write lost at step {step}: {status:?}"
                ),
            }
            ws2.shutdown();
        }
        if finished {
            break;
        }
        step += 1;
        assert!(step < 200, "the cycle should finish within 200 operations");
    }
}

/// One tool call and one file write acknowledged.
async fn acknowledged_state() -> (SimFs, Arc<Workspace>, WorkspaceGrpc) {
    let (sim, ws, grpc) = fresh().await;
    tool_call_cycle(&grpc, 1).await.unwrap();
    assert!(write_file(&grpc, "new").await);
    (sim, ws, grpc)
}

async fn assert_acknowledged_state(grpc: &WorkspaceGrpc, what: &str) {
    let records = journal_len(grpc).await;
    assert_eq!(records.len(), 1, "{what}: the acknowledged record");
    assert_eq!(records[0].r#type, "tool_call_requested", "{what}");
    assert_eq!(
        object(grpc).await.as_deref(),
        Some(&b"{\"args\":1}"[..]),
        "{what}: the object it names"
    );
    assert_eq!(file(grpc).await.as_deref(), Some(&b"new"[..]), "{what}");
}

/// After a crash: the next start recovers the acknowledged state with no segment left, the
/// journal goes on where it was, and the next record survives a crash too.
async fn recovers_and_goes_on(sim: &SimFs, what: &str) {
    let (ws, grpc) = open(sim).await;
    assert_acknowledged_state(&grpc, what).await;
    assert_eq!(segments(sim), 0, "{what}: recovery leaves no segment");
    tool_call_cycle_at(&grpc, 2).await.unwrap();
    die(sim, ws, grpc);
    sim.crash(CrashMode::DropVolatile);
    let (ws, grpc) = open(sim).await;
    assert_eq!(
        journal_len(&grpc)
            .await
            .iter()
            .map(|r| r.seq)
            .collect::<Vec<_>>(),
        vec![1, 2],
        "{what}"
    );
    ws.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_of_a_checkpoint_loses_nothing() {
    let mut step = 0u64;
    loop {
        let mut finished = false;
        for mode in [
            CrashMode::DropVolatile,
            CrashMode::KeepDirectoryEntries,
            CrashMode::Arbitrary { seed: step },
        ] {
            let (sim, ws, grpc) = acknowledged_state().await;
            sim.crash_after(step);
            let checkpointed = ws.wal().unwrap().checkpoint().await.is_ok();
            finished = !sim.has_crashed();
            if finished {
                assert!(
                    checkpointed,
                    "step {step}: no crash, so the checkpoint succeeded"
                );
                sim.crash_after(u64::MAX);
                assert_eq!(segments(&sim), 0, "the closed segment is deleted");
                assert_eq!(
                    run_files(&sim, "jrn").len(),
                    1,
                    "the record went to a journal file"
                );
                assert_eq!(
                    run_files(&sim, "pack").len(),
                    1,
                    "the object went to its run's pack"
                );
                // Read back from the journal file, not from memory.
                assert_acknowledged_state(&grpc, "after a checkpoint").await;
            }
            die(&sim, ws, grpc);
            sim.crash(mode);
            let what = format!("crash at checkpoint step {step}, {mode:?}");
            recovers_and_goes_on(&sim, &what).await;
        }
        if finished {
            break;
        }
        step += 1;
        assert!(
            step < 400,
            "a checkpoint should finish within 400 operations"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_of_recovery_loses_nothing() {
    let mut step = 0u64;
    loop {
        let (sim, ws, grpc) = acknowledged_state().await;
        // A second cycle whose object is still only in the log.
        tool_call_cycle_at(&grpc, 2).await.unwrap();
        die(&sim, ws, grpc);
        sim.crash(CrashMode::KeepDirectoryEntries);
        // Recovery itself crashes at `step`.
        sim.crash_after(step);
        let finished = match try_open(&sim).await {
            Ok((ws, grpc)) => {
                let done = !sim.has_crashed();
                die(&sim, ws, grpc);
                done
            }
            Err(_) => false,
        };
        for mode in [CrashMode::DropVolatile, CrashMode::Arbitrary { seed: step }] {
            sim.crash(mode);
            let (ws2, grpc2) = open(&sim).await;
            let records = journal_len(&grpc2).await;
            assert_eq!(
                records.iter().map(|r| r.seq).collect::<Vec<_>>(),
                vec![1, 2],
                "crash at recovery step {step}, {mode:?}"
            );
            for path in [OBJ, OBJ2] {
                let got = grpc2
                    .get_object(Request::new(pb::GetObjectRequest {
                        run_id: "r1".into(),
                        path: path.into(),
                        cell_id: String::new(),
                    }))
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(
                    got.content, b"{\"args\":1}",
                    "{path}, step {step}, {mode:?}"
                );
            }
            assert_eq!(file(&grpc2).await.as_deref(), Some(&b"new"[..]));
            assert_eq!(segments(&sim), 0);
            die(&sim, ws2, grpc2);
        }
        if finished {
            break;
        }
        step += 1;
        assert!(step < 400, "recovery should finish within 400 operations");
    }
}

/// A quiet log closes its segment: a crash at any step of that close — the checkpoint of the
/// segment on one thread, the next segment made with its zeros on another — loses nothing, and
/// a segment made ahead is recovered as empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_of_a_close_for_quiet_loses_nothing() {
    // 1 KiB segments: a tool call's append fills more than the 1/16 a quiet close needs.
    let quiet = Limits {
        journal_segment_bytes: 1024,
        journal_idle_close_ms: 100,
        ..limits()
    };
    let mut step = 0u64;
    loop {
        let mut finished = false;
        for mode in [
            CrashMode::DropVolatile,
            CrashMode::KeepDirectoryEntries,
            CrashMode::Arbitrary { seed: step },
        ] {
            let (sim, ws, grpc) = fresh_with(quiet.clone()).await;
            assert!(write_file(&grpc, "new").await);
            sim.crash_after(u64::MAX);
            tool_call_cycle(&grpc, 1).await.unwrap();
            // The quiet spell began with the call's group; the close comes 100 ms later, and
            // `step` of its operations succeed.
            let base = sim.crash_after_more(step);
            // Until the crash, or the close is done: the segment checkpointed, the next one
            // made, and no operation for a while.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let mut last = sim.ops();
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(40)).await;
                if sim.has_crashed() {
                    break;
                }
                let now = sim.ops();
                if now == last
                    && run_files(&sim, "jrn").len() == 1
                    && run_files(&sim, "pack").len() == 1
                    && segments(&sim) == 1
                {
                    break;
                }
                last = now;
                assert!(
                    std::time::Instant::now() < deadline,
                    "step {step}: the quiet segment was neither closed nor crashed"
                );
            }
            finished = !sim.has_crashed();
            if finished {
                assert_eq!(
                    sim.ops() - base,
                    step,
                    "every earlier step crashed inside the close"
                );
                assert!(step >= 10, "a close takes {step} operations");
                sim.crash_after(u64::MAX);
                assert_acknowledged_state(&grpc, "after a close for quiet").await;
            }
            die(&sim, ws, grpc);
            sim.crash(mode);
            let what = format!("crash at step {step} of a close for quiet, {mode:?}");
            recovers_and_goes_on(&sim, &what).await;
        }
        if finished {
            break;
        }
        step += 1;
        assert!(
            step < 400,
            "a close for quiet should finish within 400 operations"
        );
    }
}
