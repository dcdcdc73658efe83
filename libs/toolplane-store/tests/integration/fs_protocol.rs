//! The filesystem backend's write protocol as an operation log, and its behaviour on a real
//! filesystem: symlinks refused, dead sessions' temp files cleaned, several stores (standing in
//! for processes) sharing one root.

// A test crate: helpers outside `#[test]` fns panic to report a failure, like the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use common::{TempFsStore, key};
use toolplane_store::{
    FsStore, Precondition, Store, StoreError, StoreOptions,
    testing::{FsOp, RecordingFs, SimFs},
};

async fn recorded() -> (FsStore, RecordingFs) {
    let (store, recorder, _) = recorded_sim().await;
    (store, recorder)
}

async fn recorded_sim() -> (FsStore, RecordingFs, SimFs) {
    let sim = SimFs::new();
    sim.create_dir_all(Path::new("/store")).unwrap();
    let recorder = RecordingFs::new(Arc::new(sim.clone()));
    let store = FsStore::open_with_fs(
        Arc::new(recorder.clone()),
        "/store",
        StoreOptions::default(),
    )
    .await
    .unwrap();
    recorder.clear();
    (store, recorder, sim)
}

fn position(ops: &[FsOp], what: &str, matches: impl Fn(&FsOp) -> bool) -> usize {
    ops.iter()
        .position(matches)
        .unwrap_or_else(|| panic!("no {what} in {ops:#?}"))
}

fn temp_of(ops: &[FsOp]) -> PathBuf {
    let temp = ops
        .iter()
        .find_map(|op| match op {
            FsOp::CreateNew(path) => Some(path.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no temp file in {ops:#?}"));
    assert!(
        temp.starts_with("/store/.toolplane/tmp"),
        "temp file {temp:?} outside the temp area"
    );
    temp
}

fn syncs(ops: &[FsOp]) -> usize {
    ops.iter()
        .filter(|op| matches!(op, FsOp::SyncFile(_) | FsOp::SyncDir(_)))
        .count()
}

#[tokio::test]
async fn put_create_syncs_the_temp_file_before_linking_and_the_directories_after() {
    let (store, recorder) = recorded().await;
    store
        .put_create(&key("runs/r1/a"), b"x".to_vec())
        .await
        .unwrap();
    let ops = recorder.ops();
    let temp = temp_of(&ops);
    let final_path = PathBuf::from("/store/runs/r1/a");
    let write = position(
        &ops,
        "write",
        |op| matches!(op, FsOp::Write { path, .. } if *path == temp),
    );
    let sync_file = position(&ops, "temp fsync", |op| *op == FsOp::SyncFile(temp.clone()));
    let link = position(&ops, "link", |op| {
        *op == FsOp::HardLink {
            from: temp.clone(),
            to: final_path.clone(),
        }
    });
    let sync_dir = position(&ops, "directory fsync", |op| {
        *op == FsOp::SyncDir("/store/runs/r1".into())
    });
    let sync_runs = position(&ops, "fsync of the new directory's parent", |op| {
        *op == FsOp::SyncDir("/store/runs".into())
    });
    let sync_root = position(&ops, "fsync of the root", |op| {
        *op == FsOp::SyncDir("/store".into())
    });
    assert!(write < sync_file && sync_file < link, "{ops:#?}");
    assert!(
        link < sync_dir && link < sync_runs && link < sync_root,
        "{ops:#?}"
    );
    assert!(
        !ops.iter().any(|op| matches!(op, FsOp::Rename { .. })),
        "create-only must never rename: {ops:#?}"
    );

    // Into a directory this session already made durable: one file fsync, one directory fsync.
    recorder.clear();
    store
        .put_create(&key("runs/r1/b"), b"y".to_vec())
        .await
        .unwrap();
    let ops = recorder.ops();
    assert_eq!(syncs(&ops), 2, "{ops:#?}");
}

#[tokio::test]
async fn put_cas_compares_under_the_lock_and_renames_a_synced_temp_file() {
    let (store, recorder) = recorded().await;
    let k = key("state/lease");
    let v1 = store
        .put_cas(&k, b"one".to_vec(), Precondition::Absent)
        .await
        .unwrap();
    let ops = recorder.ops();
    // Creating through CAS links, so it can not replace a concurrent create-only object.
    assert!(
        ops.iter().any(|op| matches!(op, FsOp::HardLink { .. })),
        "{ops:#?}"
    );
    assert!(
        !ops.iter().any(|op| matches!(op, FsOp::Rename { .. })),
        "{ops:#?}"
    );

    recorder.clear();
    store
        .put_cas(&k, b"two".to_vec(), Precondition::Version(v1))
        .await
        .unwrap();
    let ops = recorder.ops();
    let temp = temp_of(&ops);
    let final_path = PathBuf::from("/store/state/lease");
    let lock = position(
        &ops,
        "lock",
        |op| matches!(op, FsOp::Lock(path) if path.starts_with("/store/.toolplane/locks")),
    );
    let read = position(&ops, "read of the current value", |op| {
        *op == FsOp::Read(final_path.clone())
    });
    let sync_file = position(&ops, "temp fsync", |op| *op == FsOp::SyncFile(temp.clone()));
    let rename = position(&ops, "rename", |op| {
        *op == FsOp::Rename {
            from: temp.clone(),
            to: final_path.clone(),
        }
    });
    let sync_dir = position(&ops, "directory fsync", |op| {
        *op == FsOp::SyncDir("/store/state".into())
    });
    assert!(
        lock < read && read < sync_file && sync_file < rename && rename < sync_dir,
        "{ops:#?}"
    );
    assert_eq!(syncs(&ops), 2, "{ops:#?}");
}

#[tokio::test]
async fn delete_syncs_the_directory_after_unlinking() {
    let (store, recorder) = recorded().await;
    let k = key("state/session");
    store.put_create(&k, b"s".to_vec()).await.unwrap();
    recorder.clear();
    assert!(store.delete(&k, None).await.unwrap());
    let ops = recorder.ops();
    let remove = position(&ops, "unlink", |op| {
        *op == FsOp::RemoveFile("/store/state/session".into())
    });
    let sync = position(&ops, "directory fsync", |op| {
        *op == FsOp::SyncDir("/store/state".into())
    });
    assert!(remove < sync, "{ops:#?}");
}

#[tokio::test]
async fn writes_leave_no_temp_file_behind() {
    let (store, _recorder, sim) = recorded_sim().await;
    let k = key("audit/1");
    let v = store.put_create(&k, b"a".to_vec()).await.unwrap();
    let refused = [
        store.put_create(&k, b"b".to_vec()).await.err(),
        store
            .put_create(&key("audit/1/below"), b"b".to_vec())
            .await
            .err(),
        store
            .put_cas(
                &key("state/x"),
                b"c".to_vec(),
                Precondition::Version(v.clone()),
            )
            .await
            .err(),
    ];
    assert!(refused.iter().all(Option::is_some), "{refused:?}");
    store
        .put_cas(&key("state/y"), b"d".to_vec(), Precondition::Absent)
        .await
        .unwrap();
    let leftovers: Vec<PathBuf> = sim
        .files_under(Path::new("/store/.toolplane/tmp"))
        .into_iter()
        .filter(|path| !path.to_string_lossy().ends_with(".lock"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[cfg(unix)]
mod real_fs {
    use std::os::unix::fs::symlink;

    use super::*;

    fn temp_files(root: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for session in std::fs::read_dir(root.join(".toolplane/tmp")).unwrap() {
            let session = session.unwrap().path();
            if session.is_dir() {
                found.extend(
                    std::fs::read_dir(&session)
                        .unwrap()
                        .map(|e| e.unwrap().path()),
                );
            }
        }
        found
    }

    #[tokio::test]
    async fn symlinks_inside_the_root_are_refused_never_followed() {
        let store = TempFsStore::open(StoreOptions::default()).await;
        let outside = store.dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"secret").unwrap();
        symlink(&outside, store.root().join("evil")).unwrap();
        symlink(outside.join("secret"), store.root().join("leak")).unwrap();

        let refused = [
            store.put_create(&key("evil/x"), b"x".to_vec()).await.err(),
            store
                .put_cas(&key("evil/x"), b"x".to_vec(), Precondition::Absent)
                .await
                .err(),
            store.get(&key("evil/secret")).await.err(),
            store.get(&key("leak")).await.err(),
            store.head(&key("leak")).await.err(),
            store.put_create(&key("leak"), b"x".to_vec()).await.err(),
            store
                .put_cas(&key("leak"), b"x".to_vec(), Precondition::Absent)
                .await
                .err(),
            store.list(None, None, 10).await.err(),
            store.list(Some(&key("evil")), None, 10).await.err(),
        ];
        for error in refused {
            match error {
                Some(error @ StoreError::Escape { .. }) => {
                    assert!(error.is_system_failure());
                    assert!(error.to_string().starts_with("store.escape: "), "{error}");
                }
                other => panic!("expected store.escape, got {other:?}"),
            }
        }
        let outside_now: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            outside_now,
            ["secret"],
            "nothing was written through the symlink"
        );
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"secret");
    }

    #[tokio::test]
    async fn dead_sessions_are_cleaned_at_open_and_live_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let live = FsStore::open(&root, StoreOptions::default()).await.unwrap();
        live.put_create(&key("a"), b"a".to_vec()).await.unwrap();
        // A session whose process died mid-write: its lock is free, its temp file remains.
        let dead = root.join(".toolplane/tmp/12345-dead-0");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("put-0"), b"half").unwrap();
        std::fs::write(root.join(".toolplane/tmp/12345-dead-0.lock"), b"").unwrap();
        // And an orphan directory without a lock file.
        std::fs::create_dir(root.join(".toolplane/tmp/orphan")).unwrap();

        let second = FsStore::open(&root, StoreOptions::default()).await.unwrap();
        assert!(!dead.exists(), "dead session's temp files removed");
        assert!(!root.join(".toolplane/tmp/12345-dead-0.lock").exists());
        assert!(!root.join(".toolplane/tmp/orphan").exists());
        let sessions = || {
            std::fs::read_dir(root.join(".toolplane/tmp"))
                .unwrap()
                .count()
        };
        assert_eq!(
            sessions(),
            2,
            "the live session, a directory and a lock file; the second has not written yet"
        );

        // Both stores keep working; temp files never show up as keys nor linger.
        live.put_create(&key("b"), b"b".to_vec()).await.unwrap();
        second.put_create(&key("c"), b"c".to_vec()).await.unwrap();
        assert_eq!(
            sessions(),
            4,
            "two live sessions, each a directory and a lock file"
        );
        let listed = second.list(None, None, 10).await.unwrap().keys;
        assert_eq!(listed, [key("a"), key("b"), key("c")]);
        assert!(temp_files(&root).is_empty(), "{:?}", temp_files(&root));
        drop((live, second));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_stores_on_one_root_keep_create_only_and_cas_atomic() {
        // Two opens of one root share no in-process state: only the filesystem (link, flock)
        // keeps them atomic, as it must between processes.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let stores: Vec<Arc<dyn Store>> = vec![
            Arc::new(FsStore::open(&root, StoreOptions::default()).await.unwrap()),
            Arc::new(FsStore::open(&root, StoreOptions::default()).await.unwrap()),
        ];
        let counter = key("state/counter");
        let mut tasks = tokio::task::JoinSet::new();
        for writer in 0..8 {
            let store = Arc::clone(&stores[writer % 2]);
            let counter = counter.clone();
            tasks.spawn(async move {
                for _ in 0..25 {
                    loop {
                        let current = store.get(&counter).await.unwrap();
                        let (value, expected) = match current {
                            Some(o) => (
                                String::from_utf8(o.bytes).unwrap().parse::<u32>().unwrap(),
                                Precondition::Version(o.version),
                            ),
                            None => (0, Precondition::Absent),
                        };
                        match store
                            .put_cas(&counter, (value + 1).to_string().into_bytes(), expected)
                            .await
                        {
                            Ok(_) => break,
                            Err(StoreError::Conflict { .. }) => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
            let store = Arc::clone(&stores[(writer + 1) % 2]);
            tasks.spawn(async move {
                store
                    .put_create(&key("journal/000001"), writer.to_string().into_bytes())
                    .await
                    .ok();
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
        let total = stores[0].get(&counter).await.unwrap().unwrap().bytes;
        assert_eq!(total, b"200");
        assert!(
            stores[1]
                .get(&key("journal/000001"))
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn foreign_files_are_not_keys() {
        let store = TempFsStore::open(StoreOptions::default()).await;
        store.put_create(&key("k"), b"k".to_vec()).await.unwrap();
        // Names no key can have (reserved, or not valid as a segment) are skipped by `list`.
        std::fs::write(store.root().join(".toolplane-stray"), b"").unwrap();
        std::fs::write(store.root().join("back\\slash"), b"").unwrap();
        assert_eq!(store.list(None, None, 10).await.unwrap().keys, [key("k")]);
    }
}
