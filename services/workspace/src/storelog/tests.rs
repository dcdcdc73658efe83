//! The journal rules of [`StoreLog`] over a `MemoryStore`: sequence numbers, retries, the seal,
//! the fence, create-only objects, segments and following through another instance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use toolplane_proto::v1::JournalEvent;
use toolplane_store::{Key, MemoryStore, Store, StoreOptions};

use super::*;

fn store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(StoreOptions::default()))
}

fn key() -> RunKey {
    ("c".to_owned(), "r".to_owned())
}

fn record(kind: &str, epoch: u64) -> JournalEvent {
    JournalEvent {
        r#type: kind.to_owned(),
        epoch,
        ..Default::default()
    }
}

#[tokio::test]
async fn appends_are_numbered_and_a_wrong_sequence_number_conflicts() {
    let log = StoreLog::new(store());
    let k = key();
    let last = log
        .append(&k, 1, 1, vec![record("a", 1), record("b", 1)], vec![])
        .await
        .unwrap();
    assert_eq!(last, 2);
    let err = log
        .append(&k, 1, 5, vec![record("c", 1)], vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.journal_conflict");
    let err = log
        .append(&k, 1, 2, vec![record("other", 1)], vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.journal_conflict");
    let page = log.read(&k, 1, 10).await.unwrap();
    let seqs: Vec<(u64, &str, &str)> = page
        .records
        .iter()
        .map(|r| (r.seq, r.r#type.as_str(), r.run_id.as_str()))
        .collect();
    assert_eq!(seqs, vec![(1, "a", "r"), (2, "b", "r")]);
    assert!(page.at_end && !page.sealed);
    assert_eq!(log.last_seq(&k).await.unwrap(), 2);
}

#[tokio::test]
async fn a_byte_identical_retry_succeeds_without_writing() {
    let log = StoreLog::new(store());
    let k = key();
    let objects = vec![(
        "tool-args/i/call_0000000000000001.json".to_owned(),
        b"{}".to_vec(),
    )];
    log.append(&k, 1, 1, vec![record("a", 1)], objects.clone())
        .await
        .unwrap();
    assert_eq!(
        log.append(&k, 1, 1, vec![record("a", 1)], objects.clone())
            .await
            .unwrap(),
        1
    );
    // The same records with another object's bytes are not a retry.
    let other = vec![(objects[0].0.clone(), b"[]".to_vec())];
    let err = log
        .append(&k, 1, 1, vec![record("a", 1)], other)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.journal_conflict");
    assert_eq!(log.last_seq(&k).await.unwrap(), 1);
}

#[tokio::test]
async fn a_sealed_journal_refuses_appends_and_says_so_to_readers() {
    let log = StoreLog::new(store());
    let k = key();
    log.append(&k, 1, 1, vec![record("a", 1)], vec![])
        .await
        .unwrap();
    log.seal(&k).await.unwrap();
    log.seal(&k).await.unwrap();
    let err = log
        .append(&k, 1, 2, vec![record("b", 1)], vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.run_finished");
    let page = log.read(&k, 1, 10).await.unwrap();
    assert!(page.sealed && page.at_end && page.records.len() == 1);
}

#[tokio::test]
async fn the_fence_refuses_older_epochs_and_newer_ones_raise_it() {
    let log = StoreLog::new(store());
    let k = key();
    log.fence(&k, 3).await.unwrap();
    let err = log
        .append(&k, 2, 1, vec![record("a", 2)], vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.stale_epoch");
    assert_eq!(err.to_status().code(), tonic::Code::FailedPrecondition);
    log.append(&k, 5, 1, vec![record("a", 5)], vec![])
        .await
        .unwrap();
    let err = log
        .append(&k, 3, 2, vec![record("b", 3)], vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.stale_epoch");
    // A lower fence changes nothing.
    log.fence(&k, 4).await.unwrap();
    assert_eq!(log.load_head(&k).await.unwrap().0.epoch, 5);
}

#[tokio::test]
async fn an_object_that_exists_fails_the_append_before_any_record() {
    let log = StoreLog::new(store());
    let k = key();
    let path = "tool-results/i/out.txt";
    assert!(
        log.put_object(&k, path, b"one".to_vec(), false)
            .await
            .unwrap()
    );
    let err = log
        .append(
            &k,
            1,
            1,
            vec![record("a", 1)],
            vec![(path.to_owned(), b"two".to_vec())],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "workspace.audit_exists");
    assert_eq!(log.last_seq(&k).await.unwrap(), 0);
    // Create-only: identical bytes are accepted only when asked, others never.
    assert!(
        !log.put_object(&k, path, b"one".to_vec(), true)
            .await
            .unwrap()
    );
    let again = log.put_object(&k, path, b"one".to_vec(), false).await;
    assert_eq!(again.unwrap_err().code(), "workspace.audit_exists");
    let below = log
        .put_object(&k, &format!("{path}/x"), b"x".to_vec(), false)
        .await;
    assert_eq!(below.unwrap_err().code(), "workspace.audit_exists");
    let fresh = StoreLog::new(Arc::clone(&log.store));
    assert_eq!(
        fresh
            .object_bytes(&k, path)
            .await
            .unwrap()
            .unwrap()
            .as_slice(),
        b"one"
    );
    let under = fresh.objects_under(&k, "tool-results/").await.unwrap();
    assert_eq!(under.keys().collect::<Vec<_>>(), vec![path]);
    assert!(under[path].put_at_unix_ms > 0);
}

#[tokio::test]
async fn a_long_journal_moves_its_tail_into_segments_and_reads_back_whole() {
    let store = store();
    let log = StoreLog::new(Arc::clone(&store));
    let k = key();
    let big = "x".repeat(40 * 1024);
    for seq in 1..=40u64 {
        let mut r = record("big", 1);
        r.payload_json = big.clone();
        log.append(&k, 1, seq, vec![r], vec![]).await.unwrap();
    }
    let (head, _) = log.load_head(&k).await.unwrap();
    assert!(head.segments.len() >= 4, "{:?}", head.segments);
    assert!(head.tail_bytes() <= TAIL_BYTES + 41 * 1024);
    let segs = store
        .list(Some(&Key::new("log/c/r/seg").unwrap()), None, 100)
        .await
        .unwrap();
    assert_eq!(segs.keys.len(), head.segments.len());
    // Read through another instance (no cache) in pages that cross segment boundaries.
    let fresh = StoreLog::new(store);
    let mut next = 1;
    let mut seen = Vec::new();
    loop {
        let page = fresh.read(&k, next, 7).await.unwrap();
        seen.extend(page.records.iter().map(|r| r.seq));
        next = page.next_seq;
        if page.at_end {
            break;
        }
    }
    assert_eq!(seen, (1..=40).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_follower_sees_records_appended_through_another_instance() {
    let store = store();
    let (a, b) = (StoreLog::new(Arc::clone(&store)), StoreLog::new(store));
    let k = key();
    let mut rx = b.subscribe(&k).await.unwrap();
    assert_eq!(*rx.borrow(), 0);
    a.append(&k, 1, 1, vec![record("a", 1)], vec![])
        .await
        .unwrap();
    tokio::time::timeout(POLL_INTERVAL * 5, rx.changed())
        .await
        .expect("the poll saw the append")
        .unwrap();
    assert_eq!(*rx.borrow(), 1);
    a.seal(&k).await.unwrap();
    tokio::time::timeout(POLL_INTERVAL * 5, rx.changed())
        .await
        .expect("the poll saw the seal")
        .unwrap();
    assert!(b.read(&k, 2, 10).await.unwrap().sealed);
    // The poll stops with its last receiver.
    drop(rx);
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert_eq!(b.followed_runs(), 0);
}
