//! Proves the filesystem backend's fsync ordering on the simulated crash filesystem: for every
//! k, kill the process at the k-th filesystem operation of a write, crash the machine, reopen,
//! and check that every key is either its old value or its complete new value, and that a write
//! that returned `Ok` survived. Negative controls show the harness catches a missing fsync.

// A test crate: helpers outside `#[test]` fns panic to report a failure, like the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
    sync::Arc,
};

use common::key;
use toolplane_store::{
    FsStore, Key, Precondition, Store, StoreError, StoreOptions, Version,
    fs::{DirEntry, FileKind, Fs, FsFile, FsLock},
    testing::{CrashMode, SimFs},
};

const ROOT: &str = "/store";

#[derive(Clone, Copy, Debug)]
enum Op {
    Create,
    CasAbsent,
    CasFromOld,
    Delete,
}

#[derive(Debug)]
struct Scenario {
    name: &'static str,
    /// Durably written before the crash window opens.
    setup: Vec<(&'static str, &'static [u8])>,
    op: Op,
    key: &'static str,
    new: &'static [u8],
}

impl Scenario {
    /// The bytes the key may hold after the crash: its value before the op, or after it.
    fn old(&self) -> Option<Vec<u8>> {
        self.setup
            .iter()
            .find(|(k, _)| *k == self.key)
            .map(|(_, bytes)| bytes.to_vec())
    }

    fn new_value(&self) -> Option<Vec<u8>> {
        match self.op {
            Op::Delete => None,
            _ => Some(self.new.to_vec()),
        }
    }
}

fn scenarios() -> Vec<Scenario> {
    // A 64 KiB value, so a torn write is visible as one.
    static BIG: [u8; 65536] = [0x5a; 65536];
    vec![
        Scenario {
            name: "create with new directories",
            setup: vec![],
            op: Op::Create,
            key: "runs/r1/journal/000001",
            new: b"record one",
        },
        Scenario {
            name: "create next to an existing key",
            setup: vec![("runs/r1/journal/000001", b"record one")],
            op: Op::Create,
            key: "runs/r1/journal/000002",
            new: &BIG,
        },
        Scenario {
            name: "cas from an old version",
            setup: vec![("state/lease", b"epoch 1"), ("state/other", b"bystander")],
            op: Op::CasFromOld,
            key: "state/lease",
            new: b"epoch 2, a longer value than before",
        },
        Scenario {
            name: "cas absent into new directories",
            setup: vec![("state/other", b"bystander")],
            op: Op::CasAbsent,
            key: "state/deep/new/lease",
            new: b"epoch 1",
        },
        Scenario {
            name: "delete",
            setup: vec![("state/session", b"s"), ("state/other", b"bystander")],
            op: Op::Delete,
            key: "state/session",
            new: b"",
        },
    ]
}

/// How the harness wraps the simulated disk (negative controls drop fsyncs here).
type Wrap = fn(SimFs) -> Arc<dyn Fs>;

fn plain(sim: SimFs) -> Arc<dyn Fs> {
    Arc::new(sim)
}

async fn open(fs: Arc<dyn Fs>) -> FsStore {
    FsStore::open_with_fs(fs, ROOT, StoreOptions::default())
        .await
        .unwrap()
}

async fn run_op(store: &FsStore, scenario: &Scenario) -> Result<(), StoreError> {
    let k = key(scenario.key);
    match scenario.op {
        Op::Create => store.put_create(&k, scenario.new.to_vec()).await.map(drop),
        Op::CasAbsent => store
            .put_cas(&k, scenario.new.to_vec(), Precondition::Absent)
            .await
            .map(drop),
        Op::CasFromOld => {
            let old = scenario.old().unwrap_or_default();
            let expected = Precondition::Version(Version::of(&old));
            store
                .put_cas(&k, scenario.new.to_vec(), expected)
                .await
                .map(drop)
        }
        Op::Delete => store.delete(&k, None).await.map(drop),
    }
}

async fn snapshot(store: &FsStore) -> BTreeMap<Key, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut after: Option<Key> = None;
    loop {
        let page = store.list(None, after.as_ref(), 100).await.unwrap();
        for k in page.keys {
            let bytes = store.get(&k).await.unwrap().map(|object| object.bytes);
            all.insert(
                k.clone(),
                bytes.unwrap_or_else(|| panic!("listed {k} reads as absent")),
            );
        }
        match page.next_start_after {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
}

/// Crashes `scenario` at every operation in turn; returns how many operations the write took,
/// or the first violation found.
async fn crash_at_every_step(
    scenario: &Scenario,
    mode: CrashMode,
    wrap: Wrap,
) -> Result<u64, String> {
    for k in 0.. {
        let sim = SimFs::new();
        sim.create_dir_all(Path::new(ROOT)).unwrap();
        // Set up through the unwrapped disk, so only the write under test is affected by `wrap`.
        let setup = open(plain(sim.clone())).await;
        for (setup_key, bytes) in &scenario.setup {
            setup
                .put_cas(&key(setup_key), bytes.to_vec(), Precondition::Absent)
                .await
                .unwrap();
        }
        drop(setup);
        let fs = wrap(sim.clone());
        let store = open(Arc::clone(&fs)).await;
        let mut before: BTreeMap<Key, Vec<u8>> = scenario
            .setup
            .iter()
            .map(|(k, b)| (key(k), b.to_vec()))
            .collect();
        before.remove(&key(scenario.key));

        sim.crash_after(k);
        let result = run_op(&store, scenario).await;
        let interrupted = sim.has_crashed();
        drop(store);
        sim.crash(mode);

        let context = format!(
            "{} ({mode:?}), crash at op {k}, write returned {result:?}",
            scenario.name
        );
        let store = open(Arc::clone(&fs)).await;
        let mut after = snapshot(&store).await;
        let got = after.remove(&key(scenario.key));
        if got != scenario.old() && got != scenario.new_value() {
            return Err(format!(
                "{context}: key holds {:?}, neither old nor new",
                got.as_deref().map(String::from_utf8_lossy)
            ));
        }
        if result.is_ok() && got != scenario.new_value() {
            return Err(format!(
                "{context}: acknowledged write lost, key holds {got:?}"
            ));
        }
        if after != before {
            return Err(format!("{context}: other keys changed: {after:?}"));
        }
        let leftovers: Vec<PathBuf> = sim
            .files_under(&Path::new(ROOT).join(".toolplane/tmp"))
            .into_iter()
            .filter(|path| !path.to_string_lossy().ends_with(".lock"))
            .collect();
        if !leftovers.is_empty() {
            return Err(format!(
                "{context}: temp files survived reopening: {leftovers:?}"
            ));
        }
        if !interrupted {
            if result.is_err() {
                return Err(format!("{context}: failed without a crash"));
            }
            return Ok(k);
        }
    }
    unreachable!("the loop returns once the write completes")
}

fn modes() -> Vec<CrashMode> {
    let mut modes = vec![CrashMode::DropVolatile, CrashMode::KeepDirectoryEntries];
    modes.extend((0..24).map(|seed| CrashMode::Arbitrary { seed }));
    modes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_all_or_nothing_at_every_crash_point() {
    for scenario in scenarios() {
        let mut steps = None;
        for mode in modes() {
            let ops = crash_at_every_step(&scenario, mode, plain)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            // The protocol is deterministic: the same number of steps in every mode.
            assert_eq!(*steps.get_or_insert(ops), ops, "{}", scenario.name);
        }
        assert!(
            steps.unwrap_or(0) >= 5,
            "{}: too few steps to be meaningful",
            scenario.name
        );
    }
}

#[tokio::test]
async fn a_directory_another_writer_left_unsynced_is_synced_before_acknowledging() {
    let sim = SimFs::new();
    sim.create_dir_all(Path::new(ROOT)).unwrap();
    let store = open(Arc::new(sim.clone())).await;
    // Another process created the directory and has not synced its parent yet.
    sim.create_dir(Path::new("/store/shared")).unwrap();
    store
        .put_create(&key("shared/x"), b"x".to_vec())
        .await
        .unwrap();
    drop(store);
    sim.crash(CrashMode::DropVolatile);
    let store = open(Arc::new(sim)).await;
    assert_eq!(
        store.get(&key("shared/x")).await.unwrap().map(|o| o.bytes),
        Some(b"x".to_vec())
    );
}

#[tokio::test]
async fn a_crash_leaving_empty_directories_does_not_block_the_key() {
    // Crash right after the directories of `a/b/c` were created, before the object was placed.
    let sim = SimFs::new();
    sim.create_dir_all(Path::new(ROOT)).unwrap();
    sim.create_dir_all(Path::new("/store/a/b")).unwrap();
    let store = open(Arc::new(sim)).await;
    store.put_create(&key("a"), b"leaf".to_vec()).await.unwrap();
    assert_eq!(
        store.get(&key("a")).await.unwrap().map(|o| o.bytes),
        Some(b"leaf".to_vec())
    );
}

// ---- negative controls: the harness must catch a store whose fsyncs do not happen ----

/// Forwards to the simulated disk but drops the chosen kind of fsync.
#[derive(Debug)]
struct DropSyncs {
    inner: SimFs,
    files: bool,
    dirs: bool,
}

#[derive(Debug)]
struct NoSyncFile(Box<dyn FsFile>);

impl FsFile for NoSyncFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Fs for DropSyncs {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let file = self.inner.create_new(path)?;
        Ok(if self.files {
            Box::new(NoSyncFile(file))
        } else {
            file
        })
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        if self.dirs {
            Ok(())
        } else {
            self.inner.sync_dir(path)
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.read_dir(path)
    }
    fn symlink_metadata(&self, path: &Path) -> io::Result<FileKind> {
        self.inner.symlink_metadata(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FsLock>> {
        self.inner.lock(path)
    }
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn FsLock>>> {
        self.inner.try_lock(path)
    }
}

fn without_file_syncs(sim: SimFs) -> Arc<dyn Fs> {
    Arc::new(DropSyncs {
        inner: sim,
        files: true,
        dirs: false,
    })
}

fn without_dir_syncs(sim: SimFs) -> Arc<dyn Fs> {
    Arc::new(DropSyncs {
        inner: sim,
        files: false,
        dirs: true,
    })
}

#[tokio::test]
async fn harness_catches_a_missing_file_fsync() {
    for scenario in scenarios().iter().filter(|s| !matches!(s.op, Op::Delete)) {
        let found =
            crash_at_every_step(scenario, CrashMode::DropVolatile, without_file_syncs).await;
        let violation = found.expect_err("a store that never fsyncs files must be caught");
        assert!(violation.contains("neither old nor new"), "{violation}");
    }
}

#[tokio::test]
async fn harness_catches_a_missing_directory_fsync() {
    for scenario in scenarios() {
        let found =
            crash_at_every_step(&scenario, CrashMode::DropVolatile, without_dir_syncs).await;
        let violation = found.expect_err("a store that never fsyncs directories must be caught");
        assert!(violation.contains("acknowledged write lost"), "{violation}");
    }
}
