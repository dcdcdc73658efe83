//! The group-committed log: the journal's storage and the home of audit objects. Owns the log
//! segments under `<data>/journal/`, the journal files and object packs they are checkpointed
//! into (`<data>/journal/runs/<cell>/<run>/`), each run's index of its audit objects and the
//! in-memory tail of each journal; must never acknowledge a record before the fsync that covers
//! it, never let a journal record become durable before an object it may name, never accept a
//! second record for a sequence number or a second object for a path, and never delete a segment
//! before everything it holds is durable elsewhere.
//!
//! **Group commit.** One writer thread appends frames to the current segment. Whatever arrived
//! while it was busy is written with one `write` and made durable with one `fsync`, then the
//! journal records of that group are published to readers and followers and the waiting callers
//! are answered. Frames are `[u32 body length][first 8 bytes of sha256(body)][body]`. Audit
//! objects come from puts or carried by the append of the records naming them (one job, objects
//! first); either way an object is in the log no later than any record appended after it. The
//! writer keeps the segment's file extended with zeros about a MiB ahead of its writes, written
//! with a group and synced by its `fdatasync`, so most groups overwrite space the file already has
//! and their `fdatasync` flushes data alone; recovery reads those zeros as the torn frame where
//! the segment ends.
//!
//! **Checkpoints.** Until its segment is checkpointed an audit object is served from memory
//! (`pending`; puts wait while too much is). Once the writer closes a segment (it passed
//! `journal_segment_bytes`, or it holds 1/16 of that and the log was quiet for
//! `journal_idle_close_ms`, or a checkpoint was asked for, or the service stops), the checkpointer
//! writes each run's objects of that segment into one new immutable object pack of the run
//! (`objects-<n>.pack`, numbered per run; frames of path, put time and bytes) and adds them to
//! the run's object index, writes each run's records into an immutable journal file
//! (`<first seq>-<last seq>.jrn`, frames of encoded records), writes a `sealed` marker for runs
//! sealed in it — every file written to a temp file, fsynced, renamed into place and its
//! directory fsynced — and only then deletes the segment (and fsyncs the directory). A tool call's
//! two audit objects so cost no file of their own: a run's objects share one pack per segment.
//! Segments are checkpointed strictly in order, so the journal files of a run are always its
//! records 1..n without a gap.
//!
//! **Reads.** A journal in memory is its journal-file index, the records not yet checkpointed
//! (the tail), its seal state and the index of its checkpointed objects (path → pack, offset,
//! size, digest). Older records are read from the journal files through a bounded cache; an object
//! is read from its pack with one positioned read and its frame checksum verified. A journal with
//! no tail that nobody holds or looked up since the previous checkpoint is dropped from memory
//! and reloaded from its directory when needed.
//!
//! **Start.** Every remaining segment is read up to its first torn frame and checkpointed before
//! the service serves: its objects go to new packs (those a cut-short checkpoint already packed
//! are skipped), records after a run's journal files are written to new ones, the segment is
//! deleted. A crash
//! at any point of a checkpoint leaves the segment in place, and the next start redoes it.

mod append;
mod checkpoint;
mod files;
mod frame;
mod journal;
mod objects;
mod recovery;
mod shared;
mod writer;

use std::{
    collections::{BTreeMap, VecDeque},
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard, PoisonError, atomic::Ordering, mpsc},
    thread::JoinHandle,
    time::Duration,
};

use tokio::sync::oneshot;
use toolplane_store::fs::{FileKind, Fs};

pub use journal::{JournalPage, RunJournal};
pub use objects::{LoadObject, LogObject};

use crate::{error::WsError, tree::Tree};

use checkpoint::Checkpointer;
use files::{FileCache, Files};
use recovery::recover_segment;
use shared::{Job, Note, Shared, evict_idle, journal_in};
use writer::Writer;

/// Bytes of audit objects waiting for their checkpoint above which puts wait.
const MAX_PENDING_BYTES: u64 = 256 * 1024 * 1024;
/// Largest segment: pending objects are bounded by the segments not yet checkpointed.
const MAX_SEGMENT_BYTES: u64 = MAX_PENDING_BYTES / 4;

/// `(cell, run)`.
pub type RunKey = (String, String);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_err(what: &str, path: &Path, e: io::Error) -> WsError {
    WsError::io(format!("{what} {}: {e}", path.display()))
}

fn unavailable(message: impl Into<String>) -> WsError {
    WsError::status(
        "workspace.journal_unavailable",
        tonic::Code::Unavailable,
        message,
    )
}

// ---------------------------------------------------------------------------------------------
// The log

/// The log and the journals it holds.
#[derive(Debug)]
pub struct Wal {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// The writer and the checkpointer until the first job starts their threads: a log nobody
    /// appends to (a start, a plane that only reads) runs no thread for them.
    unstarted: Mutex<Option<Unstarted>>,
    shared: Arc<Shared>,
    files: Arc<Files>,
    writer: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    tree: Arc<Tree>,
}

/// The log's two threads' work, before they run.
struct Unstarted {
    writer: Writer,
    jobs: mpsc::Receiver<Job>,
    checkpointer: Checkpointer,
    notes: mpsc::Receiver<Note>,
}

impl std::fmt::Debug for Unstarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Unstarted")
    }
}

impl Wal {
    /// Checkpoints the segments in `dir` (which must exist durably, with `runs/` in it). The
    /// writer and the checkpointer start with the first job; the writer creates the next segment
    /// with its first group. Blocking.
    pub fn open(
        fs: Arc<dyn Fs>,
        dir: PathBuf,
        tree: Arc<Tree>,
        segment_bytes: u64,
        idle_close: Option<Duration>,
    ) -> Result<Wal, WsError> {
        let shared = Arc::new(Shared::default());
        let files = Arc::new(Files {
            fs: Arc::clone(&fs),
            tree: Arc::clone(&tree),
            runs: dir.join("runs"),
            cache: Mutex::new(FileCache::default()),
        });
        let mut segments: Vec<u64> = fs
            .read_dir(&dir)
            .map_err(|e| io_err("list journal segments", &dir, e))?
            .into_iter()
            .filter(|e| e.kind == FileKind::File)
            .filter_map(|e| {
                let name = e.name.to_str()?.to_owned();
                name.strip_prefix("seg-")?
                    .strip_suffix(".wal")?
                    .parse()
                    .ok()
            })
            .collect();
        segments.sort_unstable();
        for n in &segments {
            recover_segment(&fs, &dir, *n, &shared, &files)?;
        }
        evict_idle(&shared);
        // The next segment is created by the first group written into it.
        let next = segments.last().map_or(1, |n| n + 1);
        let (tx, rx) = mpsc::channel::<Job>();
        let (notes_tx, notes_rx) = mpsc::channel::<Note>();
        let writer = Writer {
            fs: Arc::clone(&fs),
            dir: dir.clone(),
            file: None,
            segment: next,
            size: 0,
            zeroed: 0,
            segment_bytes: segment_bytes.min(MAX_SEGMENT_BYTES),
            idle_close,
            shared: Arc::clone(&shared),
            notes: notes_tx,
            buf: Vec::new(),
        };
        let checkpointer = Checkpointer {
            fs,
            dir,
            shared: Arc::clone(&shared),
            files: Arc::clone(&files),
            open: BTreeMap::new(),
            closed: VecDeque::new(),
        };
        Ok(Wal {
            tx: Mutex::new(Some(tx)),
            unstarted: Mutex::new(Some(Unstarted {
                writer,
                jobs: rx,
                checkpointer,
                notes: notes_rx,
            })),
            shared,
            files,
            writer: Mutex::new(None),
            checkpointer: Mutex::new(None),
            tree,
        })
    }

    /// Starts the writer's and the checkpointer's threads, unless they run already.
    fn start_threads(&self) -> Result<(), WsError> {
        let Some(parts) = lock(&self.unstarted).take() else {
            return Ok(());
        };
        let Unstarted {
            writer,
            jobs,
            checkpointer,
            notes,
        } = parts;
        let checkpointer = std::thread::Builder::new()
            .name("workspace-checkpoint".into())
            .spawn(move || checkpointer.run(notes))
            .map_err(|e| WsError::io(format!("start journal checkpointer: {e}")))?;
        *lock(&self.checkpointer) = Some(checkpointer);
        let handle = std::thread::Builder::new()
            .name("workspace-wal".into())
            .spawn(move || writer.run(jobs))
            .map_err(|e| WsError::io(format!("start journal writer: {e}")))?;
        *lock(&self.writer) = Some(handle);
        Ok(())
    }

    /// The journal of a run (empty if it has no record yet), loading it from its files when it
    /// is not in memory.
    pub async fn journal(&self, key: &RunKey) -> Result<Arc<RunJournal>, WsError> {
        if let Some(j) = lock(&self.shared.journals).get(key) {
            j.used.store(true, Ordering::Relaxed);
            return Ok(Arc::clone(j));
        }
        let shared = Arc::clone(&self.shared);
        let files = Arc::clone(&self.files);
        let key = key.clone();
        tokio::task::spawn_blocking(move || journal_in(&shared, &files, &key))
            .await
            .map_err(|e| WsError::io(format!("journal load task failed: {e}")))?
    }

    fn check(&self) -> Result<(), WsError> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err(unavailable(
                "the journal log failed to write or sync; restart the service",
            ));
        }
        Ok(())
    }

    fn send(&self, job: Job) -> Result<(), WsError> {
        let tx = lock(&self.tx);
        if tx.is_some() {
            // A thread that cannot start drops its half of the channel: the send below fails,
            // and the log is poisoned, so every later request says so at once.
            if let Err(e) = self.start_threads() {
                tracing::error!(error = %e, "the journal log cannot start");
                self.shared.poisoned.store(true, Ordering::Release);
            }
        }
        match tx.as_ref() {
            Some(tx) if tx.send(job).is_ok() => Ok(()),
            _ => Err(unavailable("the journal writer has stopped")),
        }
    }

    async fn wait(rx: oneshot::Receiver<Result<(), String>>) -> Result<(), WsError> {
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(unavailable(message)),
            Err(_) => Err(unavailable("the journal writer has stopped")),
        }
    }

    /// Waits while more than [`MAX_PENDING_BYTES`] of objects wait for their checkpoint.
    async fn backpressure(&self) {
        loop {
            let checkpointed = self.shared.checkpointed.notified();
            tokio::pin!(checkpointed);
            checkpointed.as_mut().enable();
            if self.shared.pending_bytes.load(Ordering::Acquire) <= MAX_PENDING_BYTES {
                return;
            }
            checkpointed.await;
        }
    }

    // `held`, `tree_may_hold_objects`, `hold`, `check_free`, `put_object` and the object reads
    // are in `objects.rs`; `claim`, `append`, `is_retry` and `seal` in `append.rs`.

    /// Journals held in memory; the others live only in their journal files until needed.
    pub fn resident_journals(&self) -> usize {
        lock(&self.shared.journals).len()
    }

    /// Audit objects waiting for their segment's checkpoint (held in memory until then).
    pub fn pending_count(&self) -> usize {
        self.shared.pending_count.load(Ordering::Acquire)
    }

    /// Closes the current segment and waits until it and every segment before it are
    /// checkpointed: every object in its run's pack, every record in a journal file, the
    /// segments deleted.
    pub async fn checkpoint(&self) -> Result<(), WsError> {
        self.check()?;
        let (tx, rx) = oneshot::channel();
        self.send(Job::Checkpoint { done: tx })?;
        Self::wait(rx).await
    }

    /// Stops the writer after the jobs already sent, checkpoints what it wrote (unless the log
    /// failed) and stops the checkpointer.
    pub fn shutdown(&self) {
        lock(&self.tx).take();
        lock(&self.unstarted).take();
        if let Some(handle) = lock(&self.writer).take() {
            let _ = handle.join();
        }
        if let Some(handle) = lock(&self.checkpointer).take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.shutdown();
    }
}
