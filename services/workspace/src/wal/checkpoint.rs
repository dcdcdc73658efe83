//! The checkpointer thread: gathers what each segment holds from the writer's notes and, once a
//! segment is closed, writes its runs' objects into new packs, its records into journal files and
//! the seal markers, then deletes the segment. Must never delete a segment before everything it
//! holds is durable elsewhere, and checkpoints segments strictly in order.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    io,
    path::PathBuf,
    sync::{Arc, atomic::Ordering, mpsc},
};

use toolplane_store::fs::Fs;

use super::{
    RunKey,
    files::Files,
    frame::segment_name,
    io_err,
    journal::RunJournal,
    lock,
    shared::{Ack, Note, ObjectRef, Shared, evict_idle, journal_in},
};
use crate::error::WsError;

/// Writes each run's objects of a segment into a new pack of the run (its packs are numbered
/// 1, 2, … per run, so a run that lives through restarts never reuses a name) and adds them to
/// the run's index; only then are they dropped from `pending`.
pub(super) fn store_objects(
    shared: &Shared,
    files: &Arc<Files>,
    objects: &[ObjectRef],
) -> Result<(), WsError> {
    let mut by_run: BTreeMap<&RunKey, Vec<&ObjectRef>> = BTreeMap::new();
    for o in objects {
        by_run.entry(&o.key).or_default().push(o);
    }
    for (key, objects) in by_run {
        let journal = journal_in(shared, files, key)?;
        // Objects already packed by a checkpoint that a crash cut short are not packed again.
        let objects: Vec<&ObjectRef> = {
            let index = lock(&journal.objects);
            objects
                .into_iter()
                .filter(|o| !index.contains_key(&o.path))
                .collect()
        };
        if objects.is_empty() {
            continue;
        }
        let pack = journal.last_pack.load(Ordering::Acquire) + 1;
        let entries = files.write_pack(key, pack, &objects)?;
        journal.last_pack.store(pack, Ordering::Release);
        lock(&journal.objects).extend(entries);
    }
    for o in objects {
        shared.unpend(&o.key, &o.path, &o.bytes);
    }
    shared.checkpointed.notify_waiters();
    Ok(())
}

/// What a segment still open (or closed but not yet checkpointed) holds.
#[derive(Default)]
pub(super) struct SegmentWork {
    pub(super) runs: HashMap<RunKey, (Arc<RunJournal>, u64)>,
    pub(super) seals: Vec<Arc<RunJournal>>,
    pub(super) objects: Vec<ObjectRef>,
}

pub(super) struct Checkpointer {
    pub(super) fs: Arc<dyn Fs>,
    pub(super) dir: PathBuf,
    pub(super) shared: Arc<Shared>,
    pub(super) files: Arc<Files>,
    pub(super) open: BTreeMap<u64, SegmentWork>,
    /// Closed segments not yet checkpointed, in order, with whoever waits for them.
    pub(super) closed: VecDeque<(u64, Vec<Ack>)>,
}

impl Checkpointer {
    pub(super) fn run(mut self, rx: mpsc::Receiver<Note>) {
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            let mut close = Vec::new();
            while let Some(note) = next.take() {
                match note {
                    Note::Committed {
                        segment,
                        objects: o,
                        runs,
                        seals,
                    } => {
                        let work = self.open.entry(segment).or_default();
                        for (journal, last) in runs {
                            let entry = work
                                .runs
                                .entry(journal.key.clone())
                                .or_insert_with(|| (Arc::clone(&journal), 0));
                            entry.1 = entry.1.max(last);
                        }
                        work.seals.extend(seals);
                        work.objects.extend(o);
                    }
                    Note::Closed { segment, done } => close.push((segment, done)),
                }
                if close.is_empty() {
                    next = rx.try_recv().ok();
                }
            }
            if close.is_empty() {
                continue;
            }
            for (segment, done) in close {
                match self.closed.back_mut() {
                    Some((s, waiters)) if *s == segment => {
                        // One checkpoint answers both notes: the count drops once for it.
                        self.shared.closed_waiting.fetch_sub(1, Ordering::AcqRel);
                        waiters.extend(done);
                    }
                    _ => self.closed.push_back((segment, done.into_iter().collect())),
                }
            }
            // Also retries segments a failed checkpoint kept.
            self.checkpoint_closed();
        }
    }

    /// Checkpoints closed segments in order, stopping at the first that fails (it stays, and is
    /// retried with the next closed segment or at the next start).
    fn checkpoint_closed(&mut self) {
        while let Some((segment, _)) = self.closed.front() {
            let segment = *segment;
            let result = self.checkpoint(segment);
            match result {
                Ok(()) => {
                    self.shared.closed_waiting.fetch_sub(1, Ordering::AcqRel);
                    if let Some((_, waiters)) = self.closed.pop_front() {
                        for w in waiters {
                            let _ = w.send(Ok(()));
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, segment, "journal checkpoint failed; the segment is kept");
                    // Segments after it wait for it: their waiters learn now.
                    for (_, waiters) in self.closed.iter_mut() {
                        for w in waiters.drain(..) {
                            let _ = w.send(Err(format!("workspace.io: checkpoint failed: {e}")));
                        }
                    }
                    return;
                }
            }
        }
        evict_idle(&self.shared);
    }

    fn checkpoint(&mut self, segment: u64) -> Result<(), WsError> {
        // Everything of earlier segments is done (they were checkpointed first).
        let mut work = self.open.remove(&segment).unwrap_or_default();
        // Objects before the records that may name them.
        if let Err(e) = store_objects(&self.shared, &self.files, &work.objects) {
            self.open.insert(segment, work);
            return Err(e);
        }
        work.objects.clear();
        let mut result = Ok(());
        for (journal, last) in work.runs.values() {
            result = result.and_then(|()| journal.checkpoint(*last, false));
        }
        for journal in &work.seals {
            result = result.and_then(|()| journal.checkpoint(0, true));
        }
        if let Err(e) = result {
            // Journal files already written are whole; the rest is redone next time.
            self.open.insert(segment, work);
            return Err(e);
        }
        let path = self.dir.join(segment_name(segment));
        match self.fs.remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("delete journal segment", &path, e)),
        }
        self.fs
            .sync_dir(&self.dir)
            .map_err(|e| io_err("sync journal directory", &self.dir, e))
    }
}
