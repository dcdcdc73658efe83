//! Run ownership: with `[cluster] leases` on, a run is driven under a lease the workspace keeps
//! (docs/runtime.md "Run ownership"). The lease is taken before the run's workspace exists, its
//! epoch rides on every journal append and workspace tool call, and a background task renews it
//! every third of its TTL until the run ends (then gives it up). When the workspace says another
//! holder has the run (a renewal or an append refused as stale), or the mcp-proxy refuses a tool
//! call's epoch as stale, the run stops here: its in-flight work fails with `runtime.lease_lost`
//! and this runtime never writes for it again, not even its end. Must never retry a write as the
//! old owner.

use std::sync::Arc;
use std::time::Duration;

use toolplane_core::error as codes;

use crate::context::Runtime;
use crate::context::ports::{PortError, RunScope};
use crate::error::RuntimeError;
use crate::state::{Failure, Run, RunStatus};

use super::runs::{close_with_run, scope_of};

/// The renewal of a lease taken for a run being created; dropping it stops the renewal
/// ([`Runtime::hold_creation_lease`]).
#[derive(Debug)]
pub struct CreationLease(Option<tokio::task::JoinHandle<()>>);

impl Drop for CreationLease {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// How often a lease of `ttl_ms` is renewed: every third of its TTL, so two renewals can fail
/// before it lapses.
fn renewal_interval(ttl_ms: u64) -> Duration {
    Duration::from_millis((ttl_ms / 3).max(1))
}

/// Whether a lease refusal means another holder has the run (as opposed to a workspace that
/// could not be reached, which a later renewal retries).
fn lost(e: &PortError) -> bool {
    matches!(
        e.code(),
        Some("workspace.stale_epoch" | "workspace.lease_held" | "workspace.lease_not_found")
    )
}

/// Whether a fenced call was refused because a newer epoch of the run was seen: by the workspace
/// (`workspace.stale_epoch`) or, for an MCP tool call, by the mcp-proxy (`mcp.stale_epoch`).
/// Either way another runtime drives the run.
pub fn refused_as_stale(e: &PortError) -> bool {
    matches!(e.code(), Some("workspace.stale_epoch" | "mcp.stale_epoch"))
}

impl Runtime {
    /// The epoch to drive a new run under: with leases on, a lease taken for this runtime's
    /// holder; otherwise 1, the epoch of a single runtime.
    pub async fn take_run_lease(&self, cell: &str, run: &str) -> Result<u64, RuntimeError> {
        if !self.cfg.cluster.leases {
            return Ok(1);
        }
        let scope = RunScope {
            run_id: run.to_owned(),
            cell_id: cell.to_owned(),
            epoch: 0,
        };
        self.ports
            .workspace
            .acquire_run_lease(&scope, &self.lease_holder, self.cfg.cluster.lease_ttl_ms)
            .await
            .map_err(|e| e.into_error("taking the run's lease"))
    }

    /// Renews the lease just taken at `epoch` for a run being created, every third of its TTL,
    /// until the returned guard is dropped (once [`Runtime::keep_run_lease`] renews it). The
    /// creation's steps — its loop start, workspace, index and record, each a write to a shared
    /// store — can together take longer than the TTL on a loaded store; a lease that lapsed then
    /// would let another runtime take the half-created run for one whose creator died, and drop
    /// what it had written. Does nothing with leases off.
    pub fn hold_creation_lease(&self, cell: &str, run: &str, epoch: u64) -> CreationLease {
        if !self.cfg.cluster.leases {
            return CreationLease(None);
        }
        let Some(rt) = self.arc() else {
            return CreationLease(None);
        };
        let ttl = self.cfg.cluster.lease_ttl_ms;
        let every = renewal_interval(ttl);
        let scope = RunScope {
            run_id: run.to_owned(),
            cell_id: cell.to_owned(),
            epoch,
        };
        CreationLease(Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let renewed = rt
                    .ports
                    .workspace
                    .renew_run_lease(&scope, &rt.lease_holder, ttl)
                    .await;
                if let Err(e) = renewed {
                    tracing::warn!(run = %scope.run_id, error = %e.message, "renewing the lease of a run being created");
                }
            }
        })))
    }

    /// Renews the run's lease in the background until the run ends (the lease is then released)
    /// or another holder takes it ([`Runtime::lose_run`]). Does nothing with leases off.
    pub fn keep_run_lease(&self, run: Arc<Run>) {
        if !self.cfg.cluster.leases {
            return;
        }
        let Some(rt) = self.arc() else { return };
        let ttl = self.cfg.cluster.lease_ttl_ms;
        let every = renewal_interval(ttl);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if run.lease_lost() {
                    return;
                }
                let record = run.snapshot();
                let scope = scope_of(&record);
                let holder = rt.lease_holder.as_str();
                if record.status.is_terminal() {
                    let _ = rt.ports.workspace.release_run_lease(&scope, holder).await;
                    return;
                }
                match rt
                    .ports
                    .workspace
                    .renew_run_lease(&scope, holder, ttl)
                    .await
                {
                    Ok(()) => {}
                    Err(e) if lost(&e) => {
                        rt.lose_run(&run, &e.message);
                        return;
                    }
                    // The workspace fences every write meanwhile; the next renewal says whether
                    // the run is still this runtime's.
                    Err(e) => {
                        tracing::warn!(run = %run.id, error = %e.message, "renewing the run's lease");
                    }
                }
            }
        });
    }

    /// Stops driving a run whose lease another holder took: the run reads as failed
    /// (`runtime.lease_lost`) here, its loops, tool calls and delegated tasks stop, its open
    /// invocations close, and nothing more is written for it (its end included: the new holder
    /// owns the journal and the workspace).
    pub fn lose_run(&self, run: &Run, why: &str) {
        if !run.lose_lease() {
            return;
        }
        tracing::warn!(run = %run.id, reason = %why, "lost the run's lease; no longer driving it");
        let failure = Failure {
            code: codes::RUNTIME_LEASE_LOST.as_str().into(),
            message: format!("another runtime took this run's lease: {why}"),
            retryable: false,
        };
        // Claimed first, so that no end of the run is written by this runtime.
        run.begin_end();
        run.update(|r| {
            r.status = RunStatus::Failed;
            r.failure = Some(failure);
        });
        run.agents.cancel(None);
        run.cancel();
        for inv in self.invocations_of(&run.id) {
            close_with_run(&inv, RunStatus::Failed);
        }
    }
}
