//! What the log's parts share: the journals in memory (loading and eviction), the audit objects
//! waiting for their checkpoint, and the messages from callers to the writer (jobs) and from the
//! writer to the checkpointer (notes). Must never drop a journal that holds anything only in
//! memory.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::sync::{Notify, oneshot};
use toolplane_proto::v1::JournalEvent;

use super::{RunKey, files::Files, journal::RunJournal, lock};
use crate::error::WsError;

/// Audit objects whose segment is not checkpointed yet, per run and path.
pub(super) type PendingMap = HashMap<RunKey, BTreeMap<String, ObjectRef>>;

#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) poisoned: AtomicBool,
    pub(super) journals: Mutex<HashMap<RunKey, Arc<RunJournal>>>,
    /// Bumped (under the `journals` lock) whenever a journal is dropped from memory: a load
    /// that started before may have read files the dropped journal had already outgrown.
    pub(super) evictions: AtomicU64,
    /// Audit objects whose segment is not checkpointed yet, per run and path.
    pub(super) pending: Mutex<PendingMap>,
    pub(super) pending_bytes: AtomicU64,
    pub(super) pending_count: AtomicUsize,
    /// Woken whenever pending objects were checkpointed.
    pub(super) checkpointed: Notify,
    /// Segments the writer closed that the checkpointer has not checkpointed yet.
    pub(super) closed_waiting: AtomicUsize,
}

impl Shared {
    pub(super) fn unpend(&self, key: &RunKey, path: &str, bytes: &Arc<Vec<u8>>) {
        let mut pending = lock(&self.pending);
        if let Some(run) = pending.get_mut(key) {
            if run.get(path).is_some_and(|p| Arc::ptr_eq(&p.bytes, bytes)) {
                run.remove(path);
                self.pending_bytes
                    .fetch_sub(bytes.len() as u64, Ordering::AcqRel);
                self.pending_count.fetch_sub(1, Ordering::AcqRel);
            }
            if run.is_empty() {
                pending.remove(key);
            }
        }
    }
}

/// An audit object on its way through the log.
#[derive(Debug, Clone)]
pub(super) struct ObjectRef {
    pub(super) key: RunKey,
    pub(super) path: String,
    pub(super) bytes: Arc<Vec<u8>>,
    /// When it was put (Unix ms).
    pub(super) put_at: i64,
}

pub(super) enum After {
    Publish {
        journal: Arc<RunJournal>,
        records: Vec<JournalEvent>,
    },
    Object(ObjectRef),
    Seal {
        journal: Arc<RunJournal>,
    },
}

pub(super) type Ack = oneshot::Sender<Result<(), String>>;

pub(super) enum Job {
    Append {
        frames: Vec<u8>,
        after: Vec<After>,
        ack: Option<Ack>,
    },
    /// Close the current segment and checkpoint everything before it.
    Checkpoint { done: Ack },
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Append { frames, .. } => f
                .debug_struct("Append")
                .field("bytes", &frames.len())
                .finish(),
            Job::Checkpoint { .. } => f.write_str("Checkpoint"),
        }
    }
}

/// What the writer tells the checkpointer, in log order.
pub(super) enum Note {
    Committed {
        segment: u64,
        objects: Vec<ObjectRef>,
        /// Runs with records in the group, and their last record.
        runs: Vec<(Arc<RunJournal>, u64)>,
        seals: Vec<Arc<RunJournal>>,
    },
    Closed {
        segment: u64,
        done: Option<Ack>,
    },
}

pub(super) fn journal_in(
    shared: &Shared,
    files: &Arc<Files>,
    key: &RunKey,
) -> Result<Arc<RunJournal>, WsError> {
    loop {
        let generation = {
            let journals = lock(&shared.journals);
            if let Some(j) = journals.get(key) {
                j.used.store(true, Ordering::Relaxed);
                return Ok(Arc::clone(j));
            }
            shared.evictions.load(Ordering::Acquire)
        };
        // Loaded without the lock (it reads the run's files).
        let loaded = Arc::new(RunJournal::load(key.clone(), Arc::clone(files))?);
        let mut journals = lock(&shared.journals);
        // Another caller may have loaded it meanwhile: the first one in the map wins.
        if let Some(j) = journals.get(key) {
            return Ok(Arc::clone(j));
        }
        // A journal dropped while this one loaded may have written files this load missed
        // (a journal file, a pack): load again rather than bring back an outdated copy.
        if shared.evictions.load(Ordering::Acquire) == generation {
            journals.insert(key.clone(), Arc::clone(&loaded));
            return Ok(loaded);
        }
    }
}

/// Drops journals that nobody holds, that live entirely in their files and that nobody looked up
/// since the previous pass (so a run in use keeps its journal and object index in memory; an
/// idle one goes after one checkpoint interval).
pub(super) fn evict_idle(shared: &Shared) {
    let mut journals = lock(&shared.journals);
    let before = journals.len();
    journals.retain(|_, j| {
        Arc::strong_count(j) > 1 || !j.idle() || j.used.swap(false, Ordering::Relaxed)
    });
    if journals.len() != before {
        shared.evictions.fetch_add(1, Ordering::AcqRel);
    }
}
