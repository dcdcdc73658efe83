//! Held turns in the runtime's store: a host-driven invocation's turn with calls held for
//! approval is written under `held/<cell>/<run>/<invocation>.json` when it is held, rewritten as
//! each held call is answered, and removed when the turn is collected or the invocation or run
//! ends — so a restarted runtime can rebuild the invocation with its turn still held
//! (docs/approvals.md, "Restarts"). In cluster mode the same record is the active invocation's
//! checkpoint, and a runtime-driven run also keeps `held/<cell>/<run>/start`: how its loop
//! starts, until its first checkpoint (docs/runtime.md, "Taking a run over").

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolplane_core::error as codes;
use toolplane_store::{Key, Precondition, Version};

use super::{Runtime, key};
use crate::error::RuntimeError;
use crate::state::{Driver, HeldRecord, HeldTurn, Invocation, InvocationInner, TurnStage};

fn record_key(cell: &str, run: &str, invocation: &str) -> Result<Key, RuntimeError> {
    key(&format!("held/{cell}/{run}/{invocation}.json"))
}

fn start_key(cell: &str, run: &str) -> Result<Key, RuntimeError> {
    key(&format!("held/{cell}/{run}/start"))
}

/// How a runtime-driven run's loop starts (cluster mode), kept from the run's creation to its
/// end. Until the loop's first checkpoint it names the model endpoint (without its key) and the
/// spec's round limit, so that a runtime taking the run over before then starts the loop again
/// from the first message; after it, it only marks the run as open, so that the takeover sweep
/// finds it whatever else is stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopStart {
    pub endpoint: Option<Value>,
    pub max_rounds: u32,
}

impl Runtime {
    /// Writes an invocation's record (a held turn, or a checkpoint): one compare-and-swap against
    /// `known` (the version this runtime last wrote), else against the version stored, read again
    /// when another write moved it. Durable when this returns; the version written. A stored
    /// record of a newer epoch (another runtime took the run over) is never overwritten: the write
    /// fails with `runtime.lease_lost`.
    pub async fn persist_held(
        &self,
        r: &HeldRecord,
        known: Option<Version>,
    ) -> Result<Version, RuntimeError> {
        let k = record_key(&r.cell_id, &r.run_id, &r.invocation_id)?;
        let bytes = serde_json::to_vec(r).map_err(|e| RuntimeError::invalid(e.to_string()))?;
        let dep = |e: toolplane_store::StoreError| {
            RuntimeError::dependency(format!(
                "saving the record of invocation {}: {e}",
                r.invocation_id
            ))
        };
        let mut expected = known.map(Precondition::Version);
        for _ in 0..3 {
            let pre = match expected.take() {
                Some(p) => p,
                None => match self.store().get(&k).await.map_err(dep)? {
                    Some(obj) => {
                        let stored =
                            serde_json::from_slice::<HeldRecord>(&obj.bytes).map_or(0, |s| s.epoch);
                        if stored > r.epoch {
                            return Err(RuntimeError::new(
                                codes::RUNTIME_LEASE_LOST,
                                format!(
                                    "the record of invocation {} is of epoch {stored}, newer than this runtime's {}",
                                    r.invocation_id, r.epoch
                                ),
                            ));
                        }
                        Precondition::Version(obj.version)
                    }
                    None => Precondition::Absent,
                },
            };
            match self.store().put_cas(&k, bytes.clone(), pre).await {
                Ok(v) => return Ok(v),
                Err(e) if e.code() == "store.conflict" => continue,
                Err(e) => return Err(dep(e)),
            }
        }
        Err(RuntimeError::dependency(format!(
            "saving the record of invocation {}: too many concurrent updates",
            r.invocation_id
        )))
    }

    /// Whether invocations keep checkpoints for a takeover: with run leases on (cluster mode).
    pub fn checkpoints_on(&self) -> bool {
        self.cfg.cluster.leases
    }

    /// Writes the invocation's checkpoint (cluster mode; nothing otherwise): its state with `turn`
    /// at `stage` (docs/runtime.md, "Taking a run over"). One compare-and-swap against the
    /// version the previous checkpoint left; read again when another write moved it. Only the
    /// run's active invocation keeps one (a delegated child of a taken-over run is failed as
    /// interrupted, as after a restart). A failed write is logged: the run goes on, and a
    /// takeover starts from the checkpoint before.
    pub async fn checkpoint(
        &self,
        inv: &Invocation,
        inner: &mut InvocationInner,
        stage: TurnStage,
        turn: &HeldTurn,
    ) {
        if !self.checkpoints_on()
            || inv.run.lease_lost()
            || inv.run.with(|r| r.active_invocation_id != inv.id)
        {
            return;
        }
        let record = HeldRecord::at(inv, inner, turn, stage);
        let known = inner.checkpoint_version.take();
        let first = known.is_none();
        match self.persist_held(&record, known).await {
            Ok(v) => {
                inner.checkpoint_version = Some(v);
                // From its first checkpoint on, a loop goes on from its checkpoints.
                if first && inv.driver == Driver::Runtime {
                    self.mark_loop_started(&inv.run.cell, &inv.run.id).await;
                }
            }
            Err(e) if e.code() == codes::RUNTIME_LEASE_LOST => {
                self.lose_run(&inv.run, &e.0.message);
            }
            Err(e) => {
                tracing::warn!(invocation = %inv.id, error = %e, "the invocation's checkpoint was not saved; a takeover starts from the one before");
            }
        }
    }

    /// Removes an invocation's held turn record, if there is one.
    pub async fn forget_held(&self, cell: &str, run: &str, invocation: &str) {
        tracing::debug!(run, invocation, "removing the invocation's record");
        let Ok(k) = record_key(cell, run, invocation) else {
            return;
        };
        if let Err(e) = self.store().delete(&k, None).await {
            tracing::warn!(invocation, error = %e, "removing a collected held turn failed");
        }
    }

    /// Saves how a new runtime-driven run's loop starts (cluster mode; nothing otherwise).
    pub async fn save_loop_start(
        &self,
        cell: &str,
        run: &str,
        start: &LoopStart,
    ) -> Result<(), RuntimeError> {
        if !self.checkpoints_on() {
            return Ok(());
        }
        let bytes = serde_json::to_vec(start).map_err(|e| RuntimeError::invalid(e.to_string()))?;
        self.store()
            .put_create(&start_key(cell, run)?, bytes)
            .await
            .map_err(|e| RuntimeError::dependency(format!("saving how run {run} starts: {e}")))?;
        Ok(())
    }

    /// How run `run`'s loop starts, when it is stored and the loop has not checkpointed yet.
    pub async fn loop_start(&self, cell: &str, run: &str) -> Option<LoopStart> {
        let obj = self.store().get(&start_key(cell, run).ok()?).await.ok()??;
        serde_json::from_slice::<LoopStart>(&obj.bytes)
            .ok()
            .filter(|s| s.endpoint.is_some())
    }

    /// Keeps the run's start record without its endpoint: its loop has a checkpoint to go on
    /// from. A failed write is logged (a takeover before the next checkpoint could start the
    /// loop again).
    async fn mark_loop_started(&self, cell: &str, run: &str) {
        let Ok(k) = start_key(cell, run) else {
            return;
        };
        let started = LoopStart {
            endpoint: None,
            max_rounds: 0,
        };
        let Ok(bytes) = serde_json::to_vec(&started) else {
            return;
        };
        let written = match self.store().head(&k).await {
            Ok(Some(v)) => self
                .store()
                .put_cas(&k, bytes, Precondition::Version(v))
                .await
                .map(|_| ()),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::warn!(run, error = %e, "marking the run's loop as started failed");
        }
    }

    /// Every held turn record of a run (unreadable ones are skipped with a warning; the start
    /// record is not one).
    pub async fn held_of_run(&self, cell: &str, run: &str) -> Vec<HeldRecord> {
        let mut out = Vec::new();
        for k in self.held_keys(cell, run).await {
            if !k.as_str().ends_with(".json") {
                continue;
            }
            match self.store().get(&k).await {
                Ok(Some(obj)) => match serde_json::from_slice::<HeldRecord>(&obj.bytes) {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        tracing::warn!(key = %k, error = %e, "an unreadable held turn record")
                    }
                },
                Ok(None) => {}
                Err(e) => tracing::warn!(key = %k, error = %e, "reading a held turn failed"),
            }
        }
        out
    }

    /// Removes every held turn record of a run (it ended, or cannot resume).
    pub async fn forget_held_of_run(&self, cell: &str, run: &str) {
        tracing::debug!(run, "removing the run's records");
        for k in self.held_keys(cell, run).await {
            if let Err(e) = self.store().delete(&k, None).await {
                tracing::warn!(key = %k, error = %e, "removing a held turn failed");
            }
        }
    }

    async fn held_keys(&self, cell: &str, run: &str) -> Vec<Key> {
        self.list_keys(&format!("held/{cell}/{run}"))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(run, error = %e, "listing held turns failed");
                Vec::new()
            })
    }
}
