//! Run fencing: an `Execute` carries the epoch of the run lease its caller holds
//! (`ToolContext.epoch`, docs/runtime.md "Run ownership"), and a call whose epoch is older than
//! the newest this proxy's store has seen for the run is refused with `mcp.stale_epoch` before
//! anything is sent to the MCP server. A newer epoch raises the stored one. Epoch 0 is not fenced
//! (calls not made for a run under a lease).
//!
//! The newest epoch of a run is the record `fence/<cell>/<run>.json` in the proxy's namespace,
//! written only by compare-and-swap, so replicas sharing one store agree on it: of two raises
//! racing, one conflicts, re-reads and either finds its epoch stale or raises again. Epochs only
//! grow, so an in-memory copy ([`Fence`]'s cache) is a lower bound of the stored one at all times:
//! an epoch below it is refused without reading the store. With a store no other process shares
//! the cache is exact and an epoch equal to it costs nothing; with a shared store every fenced
//! call reads the record once (one `get`), and a raise writes it once.
//!
//! The cache holds at most [`MAX_CACHED_RUNS`] runs, dropping the oldest entry first; a dropped run
//! is read from the store on its next call. Stored records are never deleted by the proxy: a
//! record removed while an old owner of its run still lives would let that owner call again. This
//! module decides nothing about registrations or calls beyond the epoch.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use toolplane_store::{Key, Precondition, Store, StoreError};

use crate::error::{MCP_INVALID_REQUEST, MCP_STALE_EPOCH, MCP_STORE_FAILED, ProxyError};
use crate::registration::shown;

/// Most runs whose newest epoch is kept in memory.
pub const MAX_CACHED_RUNS: usize = 4096;

/// Raises of one run's record that may conflict in a row before the call fails as a store
/// failure (each conflict means another replica raised the same run meanwhile).
const MAX_CAS_ATTEMPTS: usize = 8;

/// The version of the stored fence record's format.
const FENCE_FORMAT: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct FenceRecord {
    format: u32,
    epoch: u64,
}

/// The newest epoch seen per run, by cell then run id (nested so that a call looks its run up with
/// the `&str`s it has, without building a key), and the runs in the order they were first seen.
#[derive(Debug, Default)]
struct Newest {
    epochs: HashMap<String, HashMap<String, u64>>,
    order: VecDeque<(String, String)>,
}

impl Newest {
    fn get(&self, cell: &str, run: &str) -> Option<u64> {
        self.epochs.get(cell)?.get(run).copied()
    }

    fn raise(&mut self, cell: &str, run: &str, epoch: u64) {
        if let Some(known) = self.epochs.get_mut(cell).and_then(|runs| runs.get_mut(run)) {
            *known = (*known).max(epoch);
            return;
        }
        while self.order.len() >= MAX_CACHED_RUNS {
            let Some((old_cell, old_run)) = self.order.pop_front() else {
                break;
            };
            if let Some(runs) = self.epochs.get_mut(&old_cell) {
                runs.remove(&old_run);
                if runs.is_empty() {
                    self.epochs.remove(&old_cell);
                }
            }
        }
        self.order.push_back((cell.to_owned(), run.to_owned()));
        self.epochs
            .entry(cell.to_owned())
            .or_default()
            .insert(run.to_owned(), epoch);
    }
}

/// The run fence of one proxy process.
#[derive(Debug)]
pub struct Fence {
    store: Arc<dyn Store>,
    /// Whether other processes write the same store (`[store]` postgres or S3).
    shared: AtomicBool,
    newest: Mutex<Newest>,
}

/// A run id as the workspace accepts it (and so every run a runtime creates): 1-128 characters of
/// `[A-Za-z0-9._:-]`, not starting with `.` — one segment of a store key.
fn valid_run_id(run: &str) -> bool {
    !run.is_empty()
        && run.len() <= 128
        && !run.starts_with('.')
        && run
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

fn key(cell: &str, run: &str) -> Result<Key, ProxyError> {
    Key::new(format!("fence/{cell}/{run}.json")).map_err(ProxyError::from)
}

fn stale(run: &str, epoch: u64, newest: u64) -> ProxyError {
    ProxyError::new(
        MCP_STALE_EPOCH,
        format!(
            "epoch {epoch} of run {run} is older than the newest epoch {newest}: another runtime drives the run; the call was not sent"
        ),
    )
    .with_meta("run_id", run)
    .with_meta("epoch", epoch.to_string())
    .with_meta("newest_epoch", newest.to_string())
}

fn store_failed(e: StoreError) -> ProxyError {
    ProxyError::new(MCP_STORE_FAILED, format!("the run's fence record: {e}"))
}

impl Fence {
    /// `store` is the proxy's namespace; the fence starts as the only writer of it.
    pub fn new(store: Arc<dyn Store>) -> Fence {
        Fence {
            store,
            shared: AtomicBool::new(false),
            newest: Mutex::new(Newest::default()),
        }
    }

    /// Declares whether other processes write the same store (`StoreConfig::is_shared`).
    pub fn set_shared(&self, shared: bool) {
        self.shared.store(shared, Ordering::Relaxed);
    }

    fn cached(&self, cell: &str, run: &str) -> Option<u64> {
        self.newest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cell, run)
    }

    fn remember(&self, cell: &str, run: &str, epoch: u64) {
        self.newest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .raise(cell, run, epoch);
    }

    /// Admits a call of `run` (in `cell`, already validated) at `epoch`, raising the run's newest
    /// epoch when `epoch` is newer; `mcp.stale_epoch` when it is older.
    pub async fn admit(&self, cell: &str, run: &str, epoch: u64) -> Result<(), ProxyError> {
        if epoch == 0 {
            return Ok(());
        }
        if !valid_run_id(run) {
            return Err(ProxyError::new(
                MCP_INVALID_REQUEST,
                format!(
                    "run id `{}` of a call with epoch {epoch}: use 1-128 characters of [A-Za-z0-9._:-], not starting with `.`",
                    shown(run)
                ),
            ));
        }
        let shared = self.shared.load(Ordering::Relaxed);
        match self.cached(cell, run) {
            Some(newest) if epoch < newest => return Err(stale(run, epoch, newest)),
            Some(newest) if epoch == newest && !shared => return Ok(()),
            _ => {}
        }
        let key = key(cell, run)?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (stored, expected) = match self.store.get(&key).await.map_err(store_failed)? {
                Some(obj) => {
                    let record: FenceRecord = serde_json::from_slice(&obj.bytes)
                        .ok()
                        .filter(|r: &FenceRecord| r.format == FENCE_FORMAT)
                        .ok_or_else(|| {
                            ProxyError::new(
                                MCP_STORE_FAILED,
                                format!("the fence record of run {run} is unreadable"),
                            )
                        })?;
                    (record.epoch, Precondition::Version(obj.version))
                }
                None => (0, Precondition::Absent),
            };
            if epoch <= stored {
                self.remember(cell, run, stored);
                return if epoch < stored {
                    Err(stale(run, epoch, stored))
                } else {
                    Ok(())
                };
            }
            // Every run starts at epoch 1, and nothing below it is fenced: a first epoch raises
            // nothing worth a write (a runtime without leases sends only epoch 1).
            if epoch == 1 {
                self.remember(cell, run, 1);
                return Ok(());
            }
            let bytes = serde_json::to_vec(&FenceRecord {
                format: FENCE_FORMAT,
                epoch,
            })
            .map_err(|e| ProxyError::new(MCP_STORE_FAILED, format!("fence record: {e}")))?;
            match self.store.put_cas(&key, bytes, expected).await {
                Ok(_) => {
                    self.remember(cell, run, epoch);
                    return Ok(());
                }
                // Another process raised the run meanwhile: read what it wrote.
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(store_failed(e)),
            }
        }
        Err(ProxyError::new(
            MCP_STORE_FAILED,
            format!("the fence record of run {run} kept changing under {MAX_CAS_ATTEMPTS} raises"),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use toolplane_store::MemoryStore;

    fn fence() -> (Fence, Arc<dyn Store>) {
        let store: Arc<dyn Store> =
            Arc::new(MemoryStore::new(toolplane_store::StoreOptions::default()));
        (Fence::new(Arc::clone(&store)), store)
    }

    #[tokio::test]
    async fn an_older_epoch_is_refused_and_a_newer_one_raises() {
        let (fence, _) = fence();
        fence.admit("default", "r1", 2).await.unwrap();
        fence.admit("default", "r1", 2).await.unwrap();
        let e = fence.admit("default", "r1", 1).await.unwrap_err();
        assert_eq!(e.code, MCP_STALE_EPOCH);
        assert_eq!(
            e.meta,
            [
                ("run_id", "r1".to_owned()),
                ("epoch", "1".to_owned()),
                ("newest_epoch", "2".to_owned())
            ]
        );
        fence.admit("default", "r1", 0).await.unwrap();
        fence.admit("default", "r2", 1).await.unwrap();
        fence.admit("default", "r1", 3).await.unwrap();
        assert_eq!(
            fence.admit("default", "r1", 2).await.unwrap_err().code,
            MCP_STALE_EPOCH
        );
        assert_eq!(
            fence.admit("other", "r1", 1).await.map_err(|e| e.code),
            Ok(()),
            "runs are per cell"
        );
    }

    #[tokio::test]
    async fn two_fences_over_one_shared_store_agree() {
        let (a, store) = fence();
        let b = Fence::new(store);
        a.set_shared(true);
        b.set_shared(true);
        a.admit("default", "r", 2).await.unwrap();
        b.admit("default", "r", 2).await.unwrap();
        b.admit("default", "r", 3).await.unwrap();
        assert_eq!(
            a.admit("default", "r", 2).await.unwrap_err().code,
            MCP_STALE_EPOCH,
            "A read B's raise although its own cache said 2"
        );
    }

    #[tokio::test]
    async fn a_dropped_cache_entry_is_read_back_from_the_store() {
        let (fence, _) = fence();
        fence.admit("default", "r0", 5).await.unwrap();
        for i in 1..=MAX_CACHED_RUNS {
            fence.admit("default", &format!("r{i}"), 1).await.unwrap();
        }
        assert_eq!(fence.newest.lock().unwrap().order.len(), MAX_CACHED_RUNS);
        assert_eq!(fence.cached("default", "r0"), None, "the oldest run left");
        assert_eq!(
            fence.admit("default", "r0", 4).await.unwrap_err().code,
            MCP_STALE_EPOCH
        );
    }

    #[tokio::test]
    async fn a_malformed_run_id_with_an_epoch_is_invalid() {
        let (fence, _) = fence();
        for bad in ["", "../x", "a/b", ".hidden", "a b", &"r".repeat(129)] {
            let e = fence.admit("default", bad, 1).await.unwrap_err();
            assert_eq!(e.code, MCP_INVALID_REQUEST, "{bad:?}");
        }
        fence.admit("default", "", 0).await.unwrap();
        // Every run id the runtime and the workspace accept is fenced.
        for good in ["Run-1", "r:1.x_y", &"R".repeat(128)] {
            fence.admit("default", good, 1).await.unwrap();
        }
    }
}
