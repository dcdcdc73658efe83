//! One run's journal as readers see it: its journal-file index, the committed records not yet
//! checkpointed (the tail), its seal state and the index of its checkpointed audit objects.
//! Answers pages of records (the tail from memory, older records from journal files) and wakes
//! followers. Must never publish a record out of sequence or drop a tail record before the journal
//! file holding it is durable.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64},
    },
};

use tokio::sync::watch;
use toolplane_proto::v1::JournalEvent;

use super::{
    RunKey,
    files::{Files, ObjectIndex},
    lock,
};
use crate::error::WsError;

/// One page of a journal.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalPage {
    pub records: Vec<JournalEvent>,
    /// The sequence number after the page.
    pub next_seq: u64,
    /// The page reached the last committed record.
    pub at_end: bool,
    pub sealed: bool,
}

/// One run's journal as readers see it: the committed records, in sequence order.
#[derive(Debug)]
pub struct RunJournal {
    pub(super) key: RunKey,
    pub(super) files: Arc<Files>,
    pub(super) state: Mutex<JournalState>,
    pub(super) committed: watch::Sender<u64>,
    /// The run's checkpointed audit objects (the pending ones are in [`Shared::pending`]).
    pub(super) objects: Mutex<ObjectIndex>,
    /// The number of the run's last pack (0: none). Only the checkpointer writes packs.
    pub(super) last_pack: AtomicU64,
    /// Looked up since the last eviction pass: a journal in use is not dropped (reloading
    /// it would rebuild its object index from its packs).
    pub(super) used: AtomicBool,
    /// Whether the run's tree may have an entry at an audit path, found on the first put after
    /// a load ([`Wal::tree_may_hold_objects`]).
    pub(super) tree_objects: OnceLock<bool>,
}

#[derive(Debug, Default)]
pub(super) struct JournalState {
    /// Next sequence number a writer may claim (claimed numbers may still be in flight).
    pub(super) next_claim: u64,
    /// Journal files, `(first, last)`, contiguous from 1.
    pub(super) files: Vec<(u64, u64)>,
    /// Last record in journal files.
    pub(super) on_disk: u64,
    /// Committed records after `on_disk`, in order.
    pub(super) tail: VecDeque<JournalEvent>,
    pub(super) sealed: bool,
    /// The `sealed` marker is durable.
    pub(super) seal_on_disk: bool,
}

impl JournalState {
    pub(super) fn last(&self) -> u64 {
        self.on_disk + self.tail.len() as u64
    }
}

impl RunJournal {
    pub(super) fn load(key: RunKey, files: Arc<Files>) -> Result<RunJournal, WsError> {
        let (ranges, sealed, packs) = files.load(&key)?;
        let objects = files.load_objects(&key, &packs)?;
        let on_disk = ranges.last().map_or(0, |r| r.1);
        Ok(RunJournal {
            objects: Mutex::new(objects),
            last_pack: AtomicU64::new(packs.last().copied().unwrap_or(0)),
            used: AtomicBool::new(true),
            tree_objects: OnceLock::new(),
            key,
            files,
            state: Mutex::new(JournalState {
                next_claim: on_disk + 1,
                files: ranges,
                on_disk,
                tail: VecDeque::new(),
                sealed,
                seal_on_disk: sealed,
            }),
            committed: watch::channel(on_disk).0,
        })
    }

    /// Records from `from` (1-based), at most `limit`. The tail is answered from memory; older
    /// records come from the journal files.
    pub async fn read(self: &Arc<Self>, from: u64, limit: usize) -> Result<JournalPage, WsError> {
        let from = from.max(1);
        {
            let state = lock(&self.state);
            if from > state.on_disk || limit == 0 {
                return Ok(Self::page_from_tail(&state, from, limit, Vec::new()));
            }
        }
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.read_blocking(from, limit))
            .await
            .map_err(|e| WsError::io(format!("journal read task failed: {e}")))?
    }

    /// The page from `from` made of `records` (already read from files) and the tail.
    fn page_from_tail(
        state: &JournalState,
        from: u64,
        limit: usize,
        mut records: Vec<JournalEvent>,
    ) -> JournalPage {
        let next = from + records.len() as u64;
        let start = usize::try_from(next.saturating_sub(state.on_disk + 1)).unwrap_or(usize::MAX);
        let room = limit.saturating_sub(records.len());
        records.extend(state.tail.iter().skip(start).take(room).cloned());
        let next_seq = from + records.len() as u64;
        JournalPage {
            at_end: next_seq > state.last(),
            sealed: state.sealed,
            next_seq,
            records,
        }
    }

    fn read_blocking(&self, from: u64, limit: usize) -> Result<JournalPage, WsError> {
        let mut records: Vec<JournalEvent> = Vec::new();
        let mut next = from;
        loop {
            let file = {
                let state = lock(&self.state);
                if next > state.on_disk || records.len() >= limit {
                    return Ok(Self::page_from_tail(&state, from, limit, records));
                }
                let i = state.files.partition_point(|&(_, last)| last < next);
                match state.files.get(i) {
                    Some(&range) => range,
                    None => {
                        return Err(WsError::io(format!(
                            "journal of run {} has no file holding record {next}",
                            self.key.1
                        )));
                    }
                }
            };
            let chunk = self.files.read_file(&self.key, file.0, file.1)?;
            let skip = usize::try_from(next - file.0).unwrap_or(usize::MAX);
            let room = limit - records.len();
            let before = records.len();
            records.extend(chunk.iter().skip(skip).take(room).cloned());
            next += (records.len() - before) as u64;
            if records.len() == before {
                return Err(WsError::io(format!(
                    "journal file of run {} ends before record {next}",
                    self.key.1
                )));
            }
        }
    }

    /// A receiver that changes whenever records are committed or the journal is sealed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    pub fn last_seq(&self) -> u64 {
        lock(&self.state).last()
    }

    pub(super) fn publish(&self, records: Vec<JournalEvent>) {
        let last = {
            let mut state = lock(&self.state);
            for record in records {
                // Records arrive in claim order; a gap would be a bug in claiming, never hidden.
                if record.seq == state.last() + 1 {
                    state.tail.push_back(record);
                }
            }
            state.last()
        };
        self.committed.send_replace(last);
    }

    pub(super) fn seal(&self) {
        let last = {
            let mut state = lock(&self.state);
            state.sealed = true;
            state.last()
        };
        // Wake followers even when no record was added.
        self.committed.send_modify(|v| *v = last);
    }

    /// Writes the tail's records up to `upto` into journal files (and the seal marker when
    /// `seal`), then drops them from the tail. Only the checkpointer calls this.
    pub(super) fn checkpoint(&self, upto: u64, seal: bool) -> Result<(), WsError> {
        let (records, seal_needed) = {
            let state = lock(&self.state);
            let n = usize::try_from(upto.saturating_sub(state.on_disk)).unwrap_or(usize::MAX);
            let records: Vec<JournalEvent> = state.tail.iter().take(n).cloned().collect();
            (records, seal && state.sealed && !state.seal_on_disk)
        };
        let ranges = self.files.write(&self.key, &records)?;
        if seal_needed {
            self.files.write_sealed(&self.key)?;
        }
        let mut state = lock(&self.state);
        for (first, last) in ranges {
            if first == state.on_disk + 1 {
                let n = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
                let n = n.min(state.tail.len());
                state.tail.drain(..n);
                state.on_disk = last;
                state.files.push((first, last));
            }
        }
        state.seal_on_disk |= seal_needed;
        Ok(())
    }

    /// Nothing of this journal lives only in memory: it can be reloaded from its files.
    pub(super) fn idle(&self) -> bool {
        let state = lock(&self.state);
        state.tail.is_empty()
            && state.next_claim == state.on_disk + 1
            && state.sealed == state.seal_on_disk
    }
}
