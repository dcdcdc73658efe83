//! Taking a run over (cluster mode, docs/runtime.md "Taking a run over"): a runtime that finds a
//! run unfinished in the shared store whose lease nobody holds — its driver died, or stopped and
//! handed it over — takes the lease (a new, greater epoch: from then on every write of the old
//! driver is refused) and rebuilds the run from what the old driver left: the run record, the
//! journal's end, and the active invocation's checkpoint (its gate, cycle detector, turn, the
//! run's budget, and a runtime-driven loop's conversation). A turn that was running is kept as
//! interrupted: its calls' outcomes are unknown, and they are answered `tool.outcome_unknown`
//! instead of being run again (unless their tool is idempotent or read-only). The loop of a
//! runtime-driven run is started again by the layer above.
//!
//! And handing runs over: a stopping runtime finishes its in-flight turns (up to
//! `[cluster] drain_ms`), then gives up every run's lease without ending the run, so another
//! runtime takes it over at once instead of after the lease's TTL.
//!
//! Must never let two runtimes drive one run: only the lease decides, and the lease is taken
//! before anything of the run is rebuilt or written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolplane_core::error as codes;

use crate::context::Runtime;
use crate::context::ports::RunScope;
use crate::error::RuntimeError;
use crate::lifecycle::ended::{finishing, journalled_end};
use crate::state::{Event, Failure, Run, RunStatus};

/// Who drives a run, as a request for it finds out.
#[derive(Debug)]
pub enum Driver {
    /// This runtime: it already did, or it just took the run over (`taken_over`).
    Here { run: Arc<Run>, taken_over: bool },
    /// Another runtime holds the run's lease; `url` is where it can be reached (empty: it
    /// advertises none).
    Elsewhere { holder: String, url: String },
    /// The run has ended: nothing drives it.
    Ended,
}

impl Runtime {
    /// Who drives run `run_id` of `cell`, taking it over when its lease is free (cluster mode).
    /// `runtime.not_found` when no record of it is stored. Without leases another runtime's run
    /// is always elsewhere.
    pub async fn driver_of(&self, cell: &str, run_id: &str) -> Result<Driver, RuntimeError> {
        if let Ok(run) = self.run_in(run_id, Some(cell))
            && !run.lease_lost()
        {
            return Ok(Driver::Here {
                run,
                taken_over: false,
            });
        }
        let Some(stored) = self.stored_run(run_id, Some(cell)).await? else {
            return Err(RuntimeError::not_found(format!("no run `{run_id}`")));
        };
        let record = stored.snapshot();
        if record.status.is_terminal() {
            return Ok(Driver::Ended);
        }
        let elsewhere = Driver::Elsewhere {
            holder: record.holder.clone(),
            url: record.holder_url.clone(),
        };
        self.check_not_draining()?;
        if !self.cfg.cluster.leases || record.holder == self.lease_holder {
            return Ok(elsewhere);
        }
        let _one = self.takeovers.lock().await;
        // Taken over meanwhile by this process (the sweep and a request at once).
        if let Ok(run) = self.run_in(run_id, Some(cell))
            && !run.lease_lost()
        {
            return Ok(Driver::Here {
                run,
                taken_over: false,
            });
        }
        let scope = RunScope {
            run_id: run_id.to_owned(),
            cell_id: cell.to_owned(),
            epoch: 0,
        };
        let epoch = match self
            .ports
            .workspace
            .acquire_run_lease(&scope, &self.lease_holder, self.cfg.cluster.lease_ttl_ms)
            .await
        {
            Ok(epoch) => epoch,
            Err(e) if e.code() == Some("workspace.lease_held") => return Ok(elsewhere),
            Err(e) => return Err(e.into_error("taking the run's lease over")),
        };
        match self.rebuild(record, epoch).await {
            Ok(run) => Ok(Driver::Here {
                run,
                taken_over: true,
            }),
            Err(e) => {
                // The lease is given back, so that another runtime can try.
                self.give_lease_back(RunScope { epoch, ..scope }).await;
                Err(e)
            }
        }
    }

    /// The run rebuilt under the lease just taken at `epoch`: in the book, its record saved as
    /// this runtime's, its lease renewed, its active invocation rebuilt from its checkpoint (a
    /// runtime-driven run whose active invocation has none cannot go on: it is failed as
    /// interrupted).
    async fn rebuild(
        &self,
        mut record: crate::state::RunRecord,
        epoch: u64,
    ) -> Result<Arc<Run>, RuntimeError> {
        let from = std::mem::take(&mut record.holder);
        let from_epoch = record.epoch;
        record.epoch = epoch;
        record.holder = self.lease_holder.clone();
        record.holder_url = self.cfg.cluster.advertise.clone();
        let probe = Run::new(record.clone(), 0);
        let (end, tail) = self
            .journal_tail(&probe)
            .await
            .ok_or_else(|| RuntimeError::dependency("reading the run's journal end"))?;
        let run = Arc::new(Run::new(record, end + 1));
        // The old driver journalled the run's end and stopped before saving it: only the
        // record is left to finish, under this runtime's epoch.
        if let Some((status, failure)) = tail.last().and_then(journalled_end) {
            self.insert_run(Arc::clone(&run));
            self.finish_journalled_end(&run, status, failure).await?;
            return Ok(run);
        }
        self.persist_run(&run).await?;
        self.insert_run(Arc::clone(&run));
        self.keep_run_lease(Arc::clone(&run));
        let ev = Event::new(
            "run_taken_over",
            json!({"fromHolder": from, "fromEpoch": from_epoch, "holder": self.lease_holder, "epoch": epoch}),
        )
        .warn();
        self.append(&run, epoch, Vec::new(), vec![ev]).await?;
        // The old driver was finishing the run: the finish is completed here, nothing driven.
        let active = run.with(|r| r.active_invocation_id.clone());
        if let Some(step) = finishing(&tail, &active) {
            self.complete_finish(&run, step).await?;
            return Ok(run);
        }
        // A host-driven run whose active invocation left no checkpoint had it closed: the host
        // opens the next. A runtime-driven loop cannot go on without one, unless it never wrote
        // one: then it starts again from the first message.
        let driver = run.with(|r| r.driver);
        // The held turn's approvals, so they are listed and decided here.
        self.load_run_approvals(&run.cell, &run.id).await;
        if !self.resume_held(&run).await
            && driver == crate::state::Driver::Runtime
            && self.loop_start(&run.cell, &run.id).await.is_none()
        {
            let failure = Failure {
                code: codes::RUNTIME_INTERRUPTED.as_str().into(),
                message: "the runtime driving this run stopped, and its active invocation left no checkpoint to go on from; start it again to retry".into(),
                retryable: true,
            };
            self.end_run(&run, RunStatus::Failed, Some(failure)).await?;
        }
        tracing::info!(run = %run.id, epoch, "took the run over");
        Ok(run)
    }

    /// Removes what a runtime that stopped while creating run `run_id` left under `held/` (the
    /// run has no record): once its lease is free, the run can no longer be created by it.
    pub async fn drop_unborn(&self, cell: &str, run_id: &str) {
        // Being created here: its lease is this process's, and taking it again would succeed.
        if self.is_creating(cell, run_id) {
            return;
        }
        let scope = RunScope {
            run_id: run_id.to_owned(),
            cell_id: cell.to_owned(),
            epoch: 0,
        };
        let Ok(epoch) = self
            .ports
            .workspace
            .acquire_run_lease(&scope, &self.lease_holder, self.cfg.cluster.lease_ttl_ms)
            .await
        else {
            return;
        };
        self.forget_held_of_run(cell, run_id).await;
        self.give_lease_back(RunScope { epoch, ..scope }).await;
    }

    /// Releases a lease this runtime took at `scope.epoch`; a failure leaves it to expire.
    async fn give_lease_back(&self, scope: RunScope) {
        let _ = self
            .ports
            .workspace
            .release_run_lease(&scope, &self.lease_holder)
            .await;
    }

    /// Hands every run this runtime drives over to the others (cluster mode): waits up to
    /// `[cluster] drain_ms` for in-flight turns to end, then stops driving each run — without
    /// ending it — and gives its lease up, so another runtime takes it over at once. A
    /// runtime-driven loop stops where it is: the turn it was in is taken over as interrupted.
    pub async fn hand_over_runs(&self) {
        if !self.cfg.cluster.leases {
            return;
        }
        let deadline = Instant::now() + Duration::from_millis(self.cfg.cluster.drain_ms);
        for inv in self.invocations_where(|_| true) {
            let left = deadline.saturating_duration_since(Instant::now());
            // A turn in flight holds the invocation's lock until it ends.
            let _ = tokio::time::timeout(left, inv.inner.lock()).await;
        }
        for run in self.runs() {
            let record = run.snapshot();
            // The end is claimed before the lease is given up: a loop that sees its lease lost
            // then ends nothing, and a run whose own end is under way is left to it.
            if record.status.is_terminal() || run.lease_lost() || !run.begin_end() {
                continue;
            }
            run.lose_lease();
            run.agents.cancel(None);
            run.cancel();
            let scope = RunScope {
                run_id: run.id.clone(),
                cell_id: run.cell.clone(),
                epoch: record.epoch,
            };
            match self
                .ports
                .workspace
                .release_run_lease(&scope, &self.lease_holder)
                .await
            {
                Ok(()) => tracing::info!(run = %run.id, "handed the run over"),
                Err(e) => {
                    tracing::warn!(run = %run.id, error = %e.message, "giving the run's lease up failed; another runtime takes it over when it expires")
                }
            }
        }
    }
}
