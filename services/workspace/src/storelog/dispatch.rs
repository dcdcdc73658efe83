//! Where the engine keeps journals and audit objects: the local group-committed log of one process
//! ([`Wal`]) or the shared store of several replicas ([`StoreLog`]). One match per call; the local
//! path calls the log exactly as before. Must never decide a journal rule itself.

use std::{collections::BTreeMap, sync::Arc};

use tokio::sync::watch;
use toolplane_proto::v1::JournalEvent;

use super::StoreLog;
use crate::{
    error::WsError,
    wal::{JournalPage, LogObject, RunJournal, RunKey, Wal},
};

/// The engine's journals and audit objects.
#[derive(Debug, Clone)]
pub enum Log {
    /// This process's log under `<data>/journal/` (one process owns it).
    Local(Arc<Wal>),
    /// The shared store, for several replicas.
    Shared(Arc<StoreLog>),
}

/// One run's journal, to read and follow.
#[derive(Debug, Clone)]
pub enum JournalHandle {
    Local(Arc<RunJournal>),
    Shared(Arc<StoreLog>, RunKey),
}

impl Log {
    /// The local log, for what only it has (checkpoints, its memory figures).
    pub fn wal(&self) -> Option<&Arc<Wal>> {
        match self {
            Log::Local(wal) => Some(wal),
            Log::Shared(_) => None,
        }
    }

    /// Appends records (their `epoch` already set to `epoch`) with the audit objects they name;
    /// see [`Wal::append`] and [`StoreLog::append`]. The local log is fenced by the manifest's
    /// epoch alone (one process); the shared one also by its head's.
    pub async fn append(
        &self,
        key: &RunKey,
        epoch: u64,
        expected_seq: u64,
        records: Vec<JournalEvent>,
        objects: Vec<(String, Vec<u8>)>,
    ) -> Result<u64, WsError> {
        match self {
            Log::Local(wal) => wal.append(key, expected_seq, records, objects).await,
            Log::Shared(log) => log.append(key, epoch, expected_seq, records, objects).await,
        }
    }

    /// Seals a run's journal. Called once the manifest says the run is finished, which is what
    /// refuses later appends; the seal ends followers and closes the journal itself.
    pub async fn seal(&self, key: &RunKey) -> Result<(), WsError> {
        match self {
            Log::Local(wal) => wal.seal(key).await,
            Log::Shared(log) => log.seal(key).await,
        }
    }

    /// Raises the journal's fence to `epoch` (shared store only: the local log has one driver
    /// process, fenced by the manifest).
    pub async fn fence(&self, key: &RunKey, epoch: u64) -> Result<(), WsError> {
        match self {
            Log::Local(_) => Ok(()),
            Log::Shared(log) => log.fence(key, epoch).await,
        }
    }

    /// A run's journal, to read and follow.
    pub async fn journal(&self, key: &RunKey) -> Result<JournalHandle, WsError> {
        match self {
            Log::Local(wal) => Ok(JournalHandle::Local(wal.journal(key).await?)),
            Log::Shared(log) => Ok(JournalHandle::Shared(Arc::clone(log), key.clone())),
        }
    }

    /// Stores an audit object create-only (`sync`: durable before the answer; the shared store
    /// always is).
    pub async fn put_object(
        &self,
        key: &RunKey,
        path: &str,
        bytes: Vec<u8>,
        sync: bool,
        allow_identical: bool,
    ) -> Result<bool, WsError> {
        match self {
            Log::Local(wal) => {
                wal.put_object(key, path, bytes, sync, allow_identical)
                    .await
            }
            Log::Shared(log) => log.put_object(key, path, bytes, allow_identical).await,
        }
    }

    /// The bytes of the audit object at `path` of a run, if there is one.
    pub async fn object_bytes(
        &self,
        key: &RunKey,
        path: &str,
    ) -> Result<Option<Arc<Vec<u8>>>, WsError> {
        match self {
            Log::Local(wal) => wal.object_bytes(key, path).await,
            Log::Shared(log) => log.object_bytes(key, path).await,
        }
    }

    /// The audit objects of a run under a path prefix, by path, none read yet (read each with
    /// [`LogObject::read`], blocking).
    pub async fn objects_under(
        &self,
        key: &RunKey,
        prefix: &str,
    ) -> Result<BTreeMap<String, LogObject>, WsError> {
        match self {
            Log::Local(wal) => wal.objects_under(key, prefix).await,
            Log::Shared(log) => log.objects_under(key, prefix).await,
        }
    }

    /// Stops the local log's writer; the shared store has nothing to stop.
    pub fn shutdown(&self) {
        if let Log::Local(wal) = self {
            wal.shutdown();
        }
    }
}

impl JournalHandle {
    /// Records from `from` (1-based), at most `limit`.
    pub async fn read(&self, from: u64, limit: usize) -> Result<JournalPage, WsError> {
        match self {
            JournalHandle::Local(journal) => journal.read(from, limit).await,
            JournalHandle::Shared(log, key) => log.read(key, from, limit).await,
        }
    }

    /// A receiver that changes whenever records are committed or the journal is sealed (on a
    /// shared store, within [`super::POLL_INTERVAL`] for another replica's).
    pub async fn subscribe(&self) -> Result<watch::Receiver<u64>, WsError> {
        match self {
            JournalHandle::Local(journal) => Ok(journal.subscribe()),
            JournalHandle::Shared(log, key) => log.subscribe(key).await,
        }
    }

    pub async fn last_seq(&self) -> Result<u64, WsError> {
        match self {
            JournalHandle::Local(journal) => Ok(journal.last_seq()),
            JournalHandle::Shared(log, key) => log.last_seq(key).await,
        }
    }
}
