//! Following a journal on a shared store: a watch per followed run, fed by this replica's own
//! appends and seals at once and by a poll of the head every [`POLL_INTERVAL`] (a record appended
//! through another replica reaches a follower here that much later, at most). The poll runs only
//! while somebody follows the run and stops with its last receiver. Must never poll a run nobody
//! follows.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::watch;
use toolplane_store::Store;

use super::{head_version, lock, read_head};
use crate::{error::WsError, wal::RunKey};

/// How often a followed journal's head is read for records appended through other replicas: the
/// most a follower waits for one beyond the store's own latency.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The followed runs of this replica.
#[derive(Debug, Default)]
pub(super) struct Followers {
    runs: Arc<Mutex<HashMap<RunKey, Arc<Followed>>>>,
}

#[derive(Debug)]
struct Followed {
    /// The last committed sequence number (changed also on a seal, to wake followers).
    committed: watch::Sender<u64>,
}

impl Followers {
    /// Runs this replica follows (polls) now.
    pub(super) fn followed(&self) -> usize {
        lock(&self.runs).len()
    }

    /// Tells this replica's followers of `key` that records up to `last` are committed (or that
    /// the journal is sealed). Nothing to do when nobody follows it.
    pub(super) fn committed(&self, key: &RunKey, last: u64, sealed: bool) {
        if let Some(f) = lock(&self.runs).get(key) {
            f.committed.send_if_modified(|v| {
                let changed = last > *v || sealed;
                *v = (*v).max(last);
                changed
            });
        }
    }

    /// A receiver of `key`'s last committed sequence number, starting the run's poll unless it
    /// runs already.
    pub(super) async fn subscribe(
        &self,
        store: &Arc<dyn Store>,
        key: &RunKey,
    ) -> Result<watch::Receiver<u64>, WsError> {
        let (head, _) = read_head(store.as_ref(), key).await?;
        let mut runs = lock(&self.runs);
        if let Some(f) = runs.get(key) {
            f.committed.send_if_modified(|v| {
                let changed = head.last_seq() > *v;
                *v = (*v).max(head.last_seq());
                changed
            });
            return Ok(f.committed.subscribe());
        }
        let (tx, rx) = watch::channel(head.last_seq());
        let followed = Arc::new(Followed { committed: tx });
        runs.insert(key.clone(), Arc::clone(&followed));
        tokio::spawn(poll(
            Arc::clone(store),
            Arc::clone(&self.runs),
            key.clone(),
            followed,
            head.sealed,
        ));
        Ok(rx)
    }
}

/// Reads the head of a followed run every [`POLL_INTERVAL`] and wakes its followers when it
/// changed, until the last receiver is gone (then the run is forgotten, under the lock
/// `subscribe` takes, so a new follower starts a new poll).
async fn poll(
    store: Arc<dyn Store>,
    runs: Arc<Mutex<HashMap<RunKey, Arc<Followed>>>>,
    key: RunKey,
    followed: Arc<Followed>,
    mut sealed: bool,
) {
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The head's version when it was last read whole: a poll asks for the version alone and
    // reads the head (its tail can hold a large append) only when another write changed it.
    let mut seen = None;
    loop {
        ticker.tick().await;
        {
            let mut map = lock(&runs);
            if followed.committed.receiver_count() == 0 {
                if map.get(&key).is_some_and(|f| Arc::ptr_eq(f, &followed)) {
                    map.remove(&key);
                }
                return;
            }
        }
        if sealed {
            // Nothing more can come; the poll stays only to forget the run with its followers.
            continue;
        }
        match head_version(store.as_ref(), &key).await {
            Ok(version) if version.is_some() && version == seen => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(run = %key.1, error = %e, "journal follow poll failed");
                continue;
            }
        }
        match read_head(store.as_ref(), &key).await {
            Ok((head, version)) => {
                seen = version;
                let last = head.last_seq();
                let newly_sealed = head.sealed && !sealed;
                sealed = head.sealed;
                followed.committed.send_if_modified(|v| {
                    let changed = last > *v || newly_sealed;
                    *v = (*v).max(last);
                    changed
                });
            }
            Err(e) => {
                tracing::warn!(run = %key.1, error = %e, "journal follow poll failed");
            }
        }
    }
}
