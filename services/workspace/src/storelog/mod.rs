//! The journal and the audit objects of runs on a shared store ([`StoreLog`]), for a workspace
//! service running as several replicas over one `Store` (PostgreSQL, S3 with conditional puts, a
//! routed mix), and [`Log`], which lets the engine run on it or on the local group-committed log
//! ([`crate::wal::Wal`]). Owns these keys of the engine's namespace:
//!
//! - `heads/<cell>/<run>`: the fence (`epoch`), the next sequence number, the seal, the segments already moved
//!   out and the tail of encoded records ([`head::Head`]). Every append and seal is one
//!   compare-and-swap of the head, so the fence and the records are checked and written in one
//!   atomic conditional write: a driver whose epoch was superseded never gets a record in.
//! - `log/<cell>/<run>/seg/<first:020>-<last:020>`: create-only, immutable segments of records moved out of a tail
//!   grown over [`TAIL_BYTES`].
//! - `log/<cell>/<run>/obj/<audit path>`: create-only audit objects (put time, then bytes), written before the
//!   head that commits records naming them.
//!
//! The head, the one mutable key, lives apart from the create-only bytes under `log/`, so a routed
//! store keeps heads in its records backend (`workspace/heads` among its record prefixes) and the
//! bytes in an object store (docs/storage.md, "Routing").
//!
//! Must never make a record durable before an object it names, accept an append of an epoch below
//! the head's, accept a second record for a sequence number, or overwrite an audit object.
//! docs/workspace.md, "The journal on a shared store", explains the protocol.

mod append;
mod dispatch;
mod follow;
mod head;
mod objects;

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::sync::watch;
use toolplane_proto::v1::JournalEvent;
use toolplane_store::{Key, Store, Version};

pub use dispatch::{JournalHandle, Log};
pub use follow::POLL_INTERVAL;
pub use head::Head;

use crate::{
    error::WsError,
    wal::{JournalPage, RunKey},
};

use follow::Followers;
use head::{decode_record, decode_segment};
use objects::ObjectCache;

/// A tail over this many bytes is moved into a segment by the next append: a head stays small
/// enough to read and rewrite on every append. Every append rewrites the whole head, so this
/// bounds the bytes a database rewrites (and logs) per append; BENCHMARKS.md, "Cluster mode".
pub const TAIL_BYTES: usize = 16 * 1024;
/// Encoded bytes of the segments kept decoded in memory, over all runs (a segment can hold one
/// large append, so records alone would not bound it); as much as the local log's cache.
const CACHED_SEGMENT_BYTES: usize = 32 * 1024 * 1024;
/// Most compare-and-swap rounds one append, fence or seal tries before it gives up.
const MAX_ROUNDS: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The journals and audit objects of runs on a shared store.
#[derive(Debug)]
pub struct StoreLog {
    /// The engine's namespace (`workspace/`).
    store: Arc<dyn Store>,
    segments: Mutex<SegmentCache>,
    objects: Mutex<ObjectCache>,
    followers: Followers,
}

/// A segment: its run, first and last sequence numbers.
type SegmentId = (RunKey, u64, u64);

/// Decoded segments, oldest first out; segments are immutable, so a cached one is never stale.
#[derive(Debug, Default)]
struct SegmentCache {
    /// Each segment's records and its encoded size.
    map: HashMap<SegmentId, (Arc<Vec<JournalEvent>>, usize)>,
    order: VecDeque<SegmentId>,
    bytes: usize,
}

fn run_prefix(key: &RunKey) -> String {
    format!("log/{}/{}", key.0, key.1)
}

fn head_key(key: &RunKey) -> Result<Key, WsError> {
    Ok(Key::new(format!("heads/{}/{}", key.0, key.1))?)
}

fn segment_key(key: &RunKey, first: u64, last: u64) -> Result<Key, WsError> {
    Ok(Key::new(format!(
        "{}/seg/{first:020}-{last:020}",
        run_prefix(key)
    ))?)
}

/// The run's head in `store` and its version (`None`: no head yet, read as [`Head::empty`]).
async fn read_head(store: &dyn Store, key: &RunKey) -> Result<(Head, Option<Version>), WsError> {
    match store.get(&head_key(key)?).await? {
        Some(object) => Ok((Head::decode(&object.bytes)?, Some(object.version))),
        None => Ok((Head::empty(), None)),
    }
}

/// The version of the run's head in `store` alone (`None`: no head yet), without its bytes.
async fn head_version(store: &dyn Store, key: &RunKey) -> Result<Option<Version>, WsError> {
    Ok(store.head(&head_key(key)?).await?)
}

impl StoreLog {
    /// A log over `store` (the engine's namespace).
    pub fn new(store: Arc<dyn Store>) -> StoreLog {
        StoreLog {
            store,
            segments: Mutex::new(SegmentCache::default()),
            objects: Mutex::new(ObjectCache::default()),
            followers: Followers::default(),
        }
    }

    /// The run's head and its version (`None`: no head yet, read as [`Head::empty`]).
    async fn load_head(&self, key: &RunKey) -> Result<(Head, Option<Version>), WsError> {
        read_head(self.store.as_ref(), key).await
    }

    /// A receiver of the run's last committed sequence number: changed by this replica's appends
    /// and seals at once, by those of other replicas within [`POLL_INTERVAL`].
    pub async fn subscribe(&self, key: &RunKey) -> Result<watch::Receiver<u64>, WsError> {
        self.followers.subscribe(&self.store, key).await
    }

    /// Runs whose head this replica polls now (somebody follows them here).
    pub fn followed_runs(&self) -> usize {
        self.followers.followed()
    }

    /// The last committed sequence number of a run's journal (0: none).
    pub async fn last_seq(&self, key: &RunKey) -> Result<u64, WsError> {
        Ok(self.load_head(key).await?.0.last_seq())
    }

    /// Records from `from` (1-based), at most `limit`: one read of the head, then the segments
    /// holding older records (from memory once read).
    pub async fn read(
        &self,
        key: &RunKey,
        from: u64,
        limit: usize,
    ) -> Result<JournalPage, WsError> {
        let (head, _) = self.load_head(key).await?;
        self.page(key, &head, from, limit).await
    }

    /// The page from `from` of the journal whose head is `head`.
    async fn page(
        &self,
        key: &RunKey,
        head: &Head,
        from: u64,
        limit: usize,
    ) -> Result<JournalPage, WsError> {
        let from = from.max(1);
        let mut records: Vec<JournalEvent> = Vec::new();
        let mut next = from;
        let tail_first = head.tail_first();
        while next < tail_first && records.len() < limit {
            let i = head.segments.partition_point(|&(_, last)| last < next);
            let Some(&(first, last)) = head.segments.get(i) else {
                return Err(WsError::io(format!(
                    "journal of run {} has no segment holding record {next}",
                    key.1
                )));
            };
            let segment = self.segment(key, first, last).await?;
            let skip = usize::try_from(next - first).unwrap_or(usize::MAX);
            let before = records.len();
            let room = limit - before;
            records.extend(segment.iter().skip(skip).take(room).cloned());
            if records.len() == before {
                return Err(WsError::io(format!(
                    "journal segment of run {} ends before record {next}",
                    key.1
                )));
            }
            next += (records.len() - before) as u64;
        }
        if next >= tail_first {
            let skip = usize::try_from(next - tail_first).unwrap_or(usize::MAX);
            let room = limit - records.len();
            for bytes in head.tail.iter().skip(skip).take(room) {
                records.push(decode_record(bytes)?);
            }
        }
        let next_seq = from + records.len() as u64;
        Ok(JournalPage {
            at_end: next_seq > head.last_seq(),
            sealed: head.sealed,
            next_seq,
            records,
        })
    }

    /// A segment's records, from the cache or the store.
    async fn segment(
        &self,
        key: &RunKey,
        first: u64,
        last: u64,
    ) -> Result<Arc<Vec<JournalEvent>>, WsError> {
        let id = (key.clone(), first, last);
        if let Some((found, _)) = lock(&self.segments).map.get(&id) {
            return Ok(Arc::clone(found));
        }
        let skey = segment_key(key, first, last)?;
        let Some(object) = self.store.get(&skey).await? else {
            return Err(WsError::io(format!(
                "journal segment {first}-{last} of run {} is missing",
                key.1
            )));
        };
        let records = Arc::new(decode_segment(&object.bytes)?);
        if records.len() as u64 != last - first + 1 {
            return Err(WsError::io(format!(
                "journal segment {first}-{last} of run {} holds {} records",
                key.1,
                records.len()
            )));
        }
        let size = object.bytes.len();
        let mut cache = lock(&self.segments);
        if cache
            .map
            .insert(id.clone(), (Arc::clone(&records), size))
            .is_none()
        {
            cache.order.push_back(id);
            cache.bytes += size;
        }
        while cache.bytes > CACHED_SEGMENT_BYTES {
            let Some(old) = cache.order.pop_front() else {
                break;
            };
            if let Some((_, gone)) = cache.map.remove(&old) {
                cache.bytes -= gone;
            }
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests;
