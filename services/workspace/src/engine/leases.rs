//! Run leases: which holder (a runtime replica) drives a run, under which epoch, until when. The
//! record lives in the store (`leases/<cell>/<run>.json`, written by compare-and-swap, so it works
//! on every backend and across replicas that share one). Every acquisition gets an epoch strictly
//! greater than any the run has seen (the lease's and the manifest's), and raises the manifest's
//! epoch before it answers: from then on every write of an older epoch is refused
//! (`workspace.stale_epoch`), and the raise waits for writes already admitted at the old epoch
//! in this process. On a shared store the journal's head is fenced too ([`crate::storelog`]):
//! a stale driver's append through another replica fails in the head's compare-and-swap.
//! Must never hand one epoch to two holders, nor let a live lease be taken by another holder.

use serde::{Deserialize, Serialize};
use toolplane_store::{Key, Precondition, StoreError, Version};

use crate::{
    engine::{Workspace, now_ms},
    error::WsError,
};

/// Longest lease a holder may ask for, in milliseconds.
pub const MAX_TTL_MS: u64 = 600_000;

/// A run's lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub cell_id: String,
    pub run_id: String,
    pub holder: String,
    pub epoch: u64,
    /// Unix milliseconds; 0 once released.
    pub expires_at_unix_ms: i64,
}

impl Lease {
    fn live(&self, now: i64) -> bool {
        self.expires_at_unix_ms > now
    }
}

/// The store key of a run's lease.
pub fn lease_key(cell: &str, run: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!("leases/{cell}/{run}.json"))?)
}

fn held(lease: &Lease) -> WsError {
    WsError::status(
        "workspace.lease_held",
        tonic::Code::FailedPrecondition,
        format!(
            "run {} is leased to {} (epoch {}) until {} ms",
            lease.run_id, lease.holder, lease.epoch, lease.expires_at_unix_ms
        ),
    )
}

fn stale(epoch: u64, lease: &Lease) -> WsError {
    WsError::status(
        "workspace.stale_epoch",
        tonic::Code::FailedPrecondition,
        format!(
            "epoch {epoch} is not the lease's: run {} is leased to {} at epoch {}",
            lease.run_id, lease.holder, lease.epoch
        ),
    )
}

fn expiry(ttl_ms: u64) -> Result<i64, WsError> {
    if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
        return Err(WsError::invalid_request(format!(
            "ttl_ms must be 1 to {MAX_TTL_MS}, not {ttl_ms}"
        )));
    }
    Ok(now_ms().saturating_add(ttl_ms as i64))
}

fn check_holder(holder: &str) -> Result<(), WsError> {
    if holder.is_empty() || holder.len() > 256 {
        return Err(WsError::invalid_request(
            "a lease needs a holder of 1 to 256 bytes",
        ));
    }
    Ok(())
}

impl Workspace {
    /// The stored lease of a run and its version, if any.
    pub async fn lease(&self, cell: &str, run: &str) -> Result<Option<(Lease, Version)>, WsError> {
        let key = lease_key(cell, run)?;
        let Some(object) = self.store().get(&key).await? else {
            return Ok(None);
        };
        let lease = serde_json::from_slice(&object.bytes)
            .map_err(|e| WsError::io(format!("corrupt lease {key}: {e}")))?;
        Ok(Some((lease, object.version)))
    }

    async fn put_lease(&self, lease: &Lease, expected: Precondition) -> Result<bool, WsError> {
        let key = lease_key(&lease.cell_id, &lease.run_id)?;
        let bytes = serde_json::to_vec(lease).map_err(|e| WsError::io(e.to_string()))?;
        match self.store().put_cas(&key, bytes, expected).await {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes a run's lease for `holder` with a new epoch: when it is free, released, expired, or
    /// this holder's own. The run's manifest (when it exists) is raised to the new epoch before
    /// this returns.
    pub async fn acquire_lease(
        &self,
        cell: &str,
        run: &str,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<Lease, WsError> {
        check_holder(holder)?;
        let expires = expiry(ttl_ms)?;
        let manifest = match self.run(cell, run).await {
            Ok(found) => Some(found),
            Err(e) if e.code() == "workspace.run_not_found" => None,
            Err(e) => return Err(e),
        };
        for _ in 0..16 {
            let current = self.lease(cell, run).await?;
            let mut floor = 0;
            if let Some(m) = &manifest {
                floor = self.runs().current(m).await?.epoch;
            }
            let (previous, expected) = match current {
                Some((lease, version)) => {
                    if lease.live(now_ms()) && lease.holder != holder {
                        return Err(held(&lease));
                    }
                    (lease.epoch, Precondition::Version(version))
                }
                None => (0, Precondition::Absent),
            };
            // An epoch a request raised to the largest value leaves no next one: refused, never
            // wrapped around to 0.
            let Some(epoch) = previous.max(floor).checked_add(1) else {
                return Err(WsError::invalid_request(
                    "the run's epoch is at its largest value; no lease can follow it",
                ));
            };
            let lease = Lease {
                cell_id: cell.to_owned(),
                run_id: run.to_owned(),
                holder: holder.to_owned(),
                epoch,
                expires_at_unix_ms: expires,
            };
            if !self.put_lease(&lease, expected).await? {
                continue;
            }
            if let Some(m) = &manifest {
                // Writes admitted at the old epoch finish first; later ones see the new epoch.
                let _fence = m.fence.write().await;
                self.runs().check_epoch(m, lease.epoch, true).await?;
            }
            // On a shared store, the journal's head too: an append of an older epoch through
            // any replica is refused from here on, even one admitted before the raise.
            self.log()
                .fence(&(cell.to_owned(), run.to_owned()), lease.epoch)
                .await?;
            return Ok(lease);
        }
        Err(WsError::io("lease acquisition kept conflicting"))
    }

    /// Extends `holder`'s lease at `epoch` by `ttl_ms` from now. An expired lease nobody took
    /// since is renewed (its epoch is still the run's); a lease at a newer epoch, or another
    /// holder's, is `workspace.stale_epoch`: the caller lost the run.
    pub async fn renew_lease(
        &self,
        cell: &str,
        run: &str,
        holder: &str,
        epoch: u64,
        ttl_ms: u64,
    ) -> Result<Lease, WsError> {
        check_holder(holder)?;
        let expires = expiry(ttl_ms)?;
        for _ in 0..16 {
            let Some((lease, version)) = self.lease(cell, run).await? else {
                return Err(WsError::status(
                    "workspace.lease_not_found",
                    tonic::Code::NotFound,
                    format!("run {run} has no lease; acquire one first"),
                ));
            };
            if lease.epoch != epoch || lease.holder != holder || lease.expires_at_unix_ms == 0 {
                return Err(stale(epoch, &lease));
            }
            let renewed = Lease {
                expires_at_unix_ms: expires,
                ..lease
            };
            if self
                .put_lease(&renewed, Precondition::Version(version))
                .await?
            {
                return Ok(renewed);
            }
        }
        Err(WsError::io("lease renewal kept conflicting"))
    }

    /// Gives `holder`'s lease at `epoch` up; the record keeps its epoch so the next acquisition
    /// gets a greater one. Releasing a lease already released, or moved on, does nothing.
    pub async fn release_lease(
        &self,
        cell: &str,
        run: &str,
        holder: &str,
        epoch: u64,
    ) -> Result<(), WsError> {
        check_holder(holder)?;
        for _ in 0..16 {
            let Some((lease, version)) = self.lease(cell, run).await? else {
                return Ok(());
            };
            if lease.epoch != epoch || lease.holder != holder || lease.expires_at_unix_ms == 0 {
                return Ok(());
            }
            let released = Lease {
                expires_at_unix_ms: 0,
                ..lease
            };
            if self
                .put_lease(&released, Precondition::Version(version))
                .await?
            {
                return Ok(());
            }
        }
        Err(WsError::io("lease release kept conflicting"))
    }
}
