//! The journal and audit objects on a shared store (`Workspace::open_shared`, docs/workspace.md
//! "The journal on a shared store"): the journal rules through the engine, two replicas over one
//! store (in memory and over PostgreSQL), a stale driver racing the lease's new holder, and the
//! store round trips of one append.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::json;
use toolplane_proto::v1::JournalEvent;
use toolplane_store::{MemoryStore, Store, StoreOptions, fs::RealFs};
use toolplane_workspace::{
    Workspace,
    engine::{
        journal::Append,
        objects::{AuditPut, ObjectQuery},
        runs::NewRun,
    },
    limits::Limits,
    runs::SkillAccess,
    storelog::POLL_INTERVAL,
    tree::NoHooks,
};

use crate::common::{call_with, serve_tools};

pub(crate) const CELL: &str = "default";

/// `n` replicas over `store`, their trees in one temp directory.
pub(crate) async fn replicas(
    store: Arc<dyn Store>,
    n: usize,
) -> (tempfile::TempDir, Vec<Arc<Workspace>>) {
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = std::fs::canonicalize(dir.path()).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let ws = Workspace::open_shared(
            Arc::clone(&store),
            Arc::new(RealFs),
            root.clone(),
            Limits::default(),
            Arc::new(NoHooks),
        )
        .await
        .unwrap();
        out.push(Arc::new(ws));
    }
    (dir, out)
}

pub(crate) fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(StoreOptions::default()))
}

pub(crate) async fn create(ws: &Workspace, run: &str, epoch: u64) {
    ws.create_run(NewRun {
        cell: CELL.into(),
        run: run.into(),
        actor_id: "a".into(),
        chat_id: "chat".into(),
        message_id: None,
        mode: 1,
        visible: vec![],
        writable: vec![],
        message_artifact_root: String::new(),
        epoch,
    })
    .await
    .unwrap();
}

pub(crate) fn record(kind: &str) -> JournalEvent {
    JournalEvent {
        r#type: kind.to_owned(),
        ..Default::default()
    }
}

pub(crate) async fn append(
    ws: &Workspace,
    run: &str,
    epoch: u64,
    seq: u64,
    kinds: &[&str],
    objects: Vec<(String, Vec<u8>)>,
) -> Result<u64, String> {
    ws.append_journal(
        CELL,
        run,
        Append {
            epoch,
            expected_seq: seq,
            records: kinds.iter().map(|k| record(k)).collect(),
            objects,
        },
    )
    .await
    .map_err(|e| e.code().to_owned())
}

pub(crate) async fn all_records(ws: &Workspace, run: &str) -> Vec<JournalEvent> {
    let mut out = Vec::new();
    loop {
        let page = ws
            .read_journal(CELL, run, out.len() as u64 + 1, 100)
            .await
            .unwrap();
        out.extend(page.records);
        if page.at_end {
            return out;
        }
    }
}

fn kinds(records: &[JournalEvent]) -> Vec<(u64, String)> {
    records.iter().map(|r| (r.seq, r.r#type.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_rules_hold_on_a_shared_store() {
    let (_dir, engines) = replicas(memory(), 1).await;
    let ws = &engines[0];
    create(ws, "r1", 1).await;
    let args = "tool-args/i/call_00000000000000a1.json".to_owned();
    let objects = vec![(args.clone(), b"{\"q\":1}".to_vec())];
    assert_eq!(
        append(ws, "r1", 1, 1, &["a", "b"], objects.clone()).await,
        Ok(2)
    );
    // A byte-identical retry succeeds; another record at a taken number conflicts.
    assert_eq!(
        append(ws, "r1", 1, 1, &["a", "b"], objects.clone()).await,
        Ok(2)
    );
    assert_eq!(
        append(ws, "r1", 1, 2, &["x"], vec![]).await,
        Err("workspace.journal_conflict".into())
    );
    assert_eq!(
        append(ws, "r1", 1, 9, &["x"], vec![]).await,
        Err("workspace.journal_conflict".into())
    );
    // An append whose object exists with other bytes fails before any record.
    assert_eq!(
        append(
            ws,
            "r1",
            1,
            3,
            &["c"],
            vec![(args.clone(), b"other".to_vec())]
        )
        .await,
        Err("workspace.audit_exists".into())
    );
    assert_eq!(
        kinds(&all_records(ws, "r1").await),
        vec![(1, "a".into()), (2, "b".into())]
    );
    // Audit objects: create-only, read and listed like the local log's.
    let put = |content: &[u8], allow_identical| AuditPut {
        path: "tool-results/i/out.txt".into(),
        content: content.to_vec(),
        sync: true,
        allow_identical,
    };
    let first = ws.put_audit_object(CELL, "r1", 1, put(b"out", false)).await;
    assert!(first.unwrap().created);
    let again = ws.put_audit_object(CELL, "r1", 1, put(b"out", true)).await;
    assert!(!again.unwrap().created);
    let other = ws
        .put_audit_object(CELL, "r1", 1, put(b"changed", true))
        .await;
    assert_eq!(other.unwrap_err().code(), "workspace.audit_exists");
    let (_, bytes) = ws.read_object(CELL, "r1", &args).await.unwrap();
    assert_eq!(bytes, b"{\"q\":1}");
    let listed = ws
        .list_objects(
            CELL,
            "r1",
            ObjectQuery {
                prefix: String::new(),
                page_size: 100,
                page_token: String::new(),
                include_hidden: true,
            },
        )
        .await
        .unwrap();
    let paths: Vec<&str> = listed.objects.iter().map(|o| o.path.as_str()).collect();
    assert!(paths.contains(&args.as_str()), "{paths:?}");
    assert!(paths.contains(&"tool-results/i/out.txt"), "{paths:?}");
    // Finished: the journal is sealed, appends are refused.
    ws.finish_run(CELL, "r1", 1, 3).await.unwrap();
    let sealed = ws.read_journal(CELL, "r1", 1, 10).await.unwrap();
    assert!(sealed.sealed);
    assert_eq!(
        append(ws, "r1", 1, 3, &["late"], vec![]).await,
        Err("workspace.run_finished".into())
    );
}

/// Appends alternate between two replicas; both read the same journal and a follower on the
/// second sees every record appended through the first, in order, within the poll interval.
async fn two_replicas_share_one_journal(store: Arc<dyn Store>) -> Duration {
    let (_dir, engines) = replicas(store, 2).await;
    let (a, b) = (&engines[0], &engines[1]);
    create(a, "r2", 1).await;
    let mut follower = b.follow_journal(CELL, "r2", 1).await.unwrap();
    let mut slowest = Duration::ZERO;
    for seq in 1..=10u64 {
        let (writer, other) = if seq % 2 == 1 { (a, b) } else { (b, a) };
        let kind = format!("k{seq}");
        let object = (
            format!("tool-results/i/{seq}.txt"),
            format!("result {seq}").into_bytes(),
        );
        assert_eq!(
            append(writer, "r2", 1, seq, &[&kind], vec![object]).await,
            Ok(seq)
        );
        let sent = Instant::now();
        let got = tokio::time::timeout(POLL_INTERVAL * 10, follower.recv())
            .await
            .expect("the follower on the other replica got the record")
            .unwrap()
            .unwrap();
        slowest = slowest.max(sent.elapsed());
        assert_eq!((got.seq, got.r#type.as_str()), (seq, kind.as_str()));
        // The other replica reads the record and its object at once.
        let page = other.read_journal(CELL, "r2", seq, 1).await.unwrap();
        assert_eq!(page.records[0].r#type, kind);
        let path = format!("tool-results/i/{seq}.txt");
        let (_, bytes) = other.read_object(CELL, "r2", &path).await.unwrap();
        assert_eq!(bytes, format!("result {seq}").into_bytes());
    }
    let (from_a, from_b) = (all_records(a, "r2").await, all_records(b, "r2").await);
    assert_eq!(from_a.len(), 10);
    assert_eq!(from_a, from_b);
    a.finish_run(CELL, "r2", 1, 3).await.unwrap();
    let end = tokio::time::timeout(POLL_INTERVAL * 10, follower.recv()).await;
    assert!(matches!(end, Ok(None)), "the follower ends with the seal");
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_one_memory_store_share_a_journal() {
    let slowest = two_replicas_share_one_journal(memory()).await;
    eprintln!("slowest follower delay (memory store): {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_postgres_share_a_journal() {
    let store = crate::pg_server::open(StoreOptions::default()).await;
    let slowest = two_replicas_share_one_journal(Arc::clone(&store)).await;
    eprintln!("slowest follower delay (PostgreSQL): {slowest:?}");
    // A figure, not a bound: appends of one record and two objects, one after another.
    let (_dir, engines) = replicas(store, 1).await;
    create(&engines[0], "r7", 1).await;
    let started = Instant::now();
    for seq in 1..=50u64 {
        let objects = vec![
            (format!("tool-args/i/call_{seq:016x}.json"), b"{}".to_vec()),
            (
                format!("tool-results/i/call_{seq:016x}.json"),
                b"[]".to_vec(),
            ),
        ];
        assert_eq!(
            append(&engines[0], "r7", 1, seq, &["call"], objects).await,
            Ok(seq)
        );
    }
    eprintln!(
        "append with two objects over PostgreSQL: {:?} each",
        started.elapsed() / 50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_s3_and_postgres_share_a_journal() {
    let store = crate::store_tree::routed().await;
    let slowest = two_replicas_share_one_journal(store).await;
    eprintln!("slowest follower delay (S3 beside PostgreSQL): {slowest:?}");
}

/// The model's tools on one replica read, list and search the audit objects an append through
/// another replica stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_on_one_replica_see_the_objects_another_stored() {
    let (_dir, engines) = replicas(memory(), 2).await;
    let (a, b) = (&engines[0], &engines[1]);
    create(a, "r6", 1).await;
    a.open_invocation(CELL, "r6", "i", 1, (&[], &[]), SkillAccess::default())
        .await
        .unwrap();
    let path = "tool-results/i/call_0123456789abcdef.json";
    let object = (path.to_owned(), b"{\"needle\":\"found\"}".to_vec());
    assert_eq!(append(a, "r6", 1, 1, &["call"], vec![object]).await, Ok(1));
    let (_server, mut tools) = serve_tools(Arc::clone(b)).await;
    let mut call = async |tool: &str, args: serde_json::Value| {
        let r = call_with(&mut tools, CELL, "r6", "i", tool, args)
            .await
            .unwrap();
        assert!(!r.is_error, "{tool}: {:?} {}", r.error_code, r.content);
        r.content
    };
    let read = call("workspace.read_file", json!({ "path": path })).await;
    assert_eq!(read, "{\"needle\":\"found\"}");
    let listed = call("workspace.list_files", json!({ "path": "tool-results" })).await;
    assert!(listed.contains(path), "{listed}");
    let found = call("workspace.search_files", json!({ "query": "needle" })).await;
    assert!(found.contains(path), "{found}");
}
