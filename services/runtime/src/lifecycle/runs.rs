//! Runs: created with their workspace and first records, ended exactly once (finished with
//! `persist/` promoted, failed, cancelled), failed as interrupted after a restart unless a held
//! turn lets them resume.

use std::sync::Arc;

use serde_json::json;
use toolplane_core::error as codes;
use toolplane_core::policy::PlanNodePolicy;
use toolplane_core::run_budget::RunBudgetLimits;
use toolplane_store::Key;

use crate::context::Runtime;
use crate::context::held::LoopStart;
use crate::context::key;
use crate::context::ports::{CreatedWorkspace, NewRunWorkspace, RunScope};
use crate::error::RuntimeError;
use crate::state::{
    Driver, Event, Failure, Invocation, InvocationStatus, Run, RunMode, RunRecord, RunStatus,
    RunToolHostRecord, now_ms,
};

/// How long a cancel waits for a turn in flight to journal its calls before the run ends anyway.
/// A cancelled tool call answers at once; this bounds a turn stuck elsewhere.
const CANCEL_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Parameters of a new run.
#[derive(Debug, Clone, Default)]
pub struct NewRun {
    pub run_id: String,
    pub cell_id: String,
    pub actor_id: String,
    pub session_id: String,
    pub chat_id: String,
    pub message_id: Option<String>,
    pub background: bool,
    pub profile_id: String,
    pub visible_roots: Vec<String>,
    pub writable_roots: Vec<String>,
    /// Per-run tool hosts from the run spec, already read.
    pub run_tools: Vec<RunToolHostRecord>,
    pub plan_node_policy_json: Option<String>,
    pub world_info_json: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub allow_paths: Vec<String>,
    pub deny_paths: Vec<String>,
    pub work_dir: String,
    pub system_prompt: String,
    pub initial_user_message: String,
    pub driver: Option<Driver>,
    /// The run's own budget; the root profile's `runBudget` narrows it when the root opens.
    pub run_budget: RunBudgetLimits,
    /// A runtime-driven run's loop start, kept in cluster mode until the loop's first
    /// checkpoint.
    pub loop_start: Option<LoopStart>,
}

fn valid_id(what: &str, id: &str) -> Result<(), RuntimeError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !id.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::invalid(format!(
            "{what} `{}` must be 1-128 letters, digits, `-`, `_` or `.`",
            id.chars().take(40).collect::<String>()
        )))
    }
}

/// A new run's ids and plan node policy, checked before anything is created.
struct Checked {
    run_id: String,
    cell_id: String,
    chat_id: String,
    plan_node_policy: Option<PlanNodePolicy>,
}

impl Runtime {
    /// Creates a run: its workspace, its record and its first journal records.
    pub async fn create_run(&self, p: NewRun) -> Result<Arc<Run>, RuntimeError> {
        let c = self.check_new_run(&p)?;
        let _creating = self.creating(&c.cell_id, &c.run_id);
        // With leases on, the run is this runtime's from before its workspace exists.
        let epoch = self.take_run_lease(&c.cell_id, &c.run_id).await?;
        let _renewed = self.hold_creation_lease(&c.cell_id, &c.run_id, epoch);
        if let Some(start) = &p.loop_start {
            self.save_loop_start(&c.cell_id, &c.run_id, start).await?;
        }
        let created = self
            .ports
            .workspace
            .create_run_workspace(NewRunWorkspace {
                cell_id: c.cell_id.clone(),
                run_id: c.run_id.clone(),
                actor_id: p.actor_id.clone(),
                chat_id: c.chat_id.clone(),
                message_id: p.message_id.clone(),
                background: p.background,
                visible_roots: p.visible_roots.clone(),
                writable_roots: p.writable_roots.clone(),
                created_ms: now_ms(),
            })
            .await
            .map_err(|e| e.into_error("creating the run workspace"))?;
        let world_info = p.world_info_json.clone();
        let mut record = new_record(p, &c, &created, epoch);
        if self.cfg.cluster.leases {
            record.holder = self.lease_holder.clone();
            record.holder_url = self.cfg.cluster.advertise.clone();
        }
        let run = Arc::new(Run::new(record.clone(), 1));
        self.index(&format!("ids/runs/{}", c.run_id), &c.cell_id)
            .await?;
        self.persist_run(&run).await?;
        self.insert_run(run.clone());
        let events = first_events(&record, &created);
        if let Some(wi) = world_info.filter(|w| !w.trim().is_empty()) {
            let scope = RunScope {
                run_id: c.run_id.clone(),
                cell_id: c.cell_id.clone(),
                epoch,
            };
            self.ports
                .workspace
                .put_world_info_activation(&scope, wi)
                .await
                .map_err(|e| e.into_error("storing the world-info activation"))?;
        }
        self.keep_run_lease(Arc::clone(&run));
        self.append(&run, epoch, Vec::new(), events).await?;
        Ok(run)
    }

    fn check_new_run(&self, p: &NewRun) -> Result<Checked, RuntimeError> {
        let run_id = if p.run_id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            p.run_id.clone()
        };
        valid_id("run id", &run_id)?;
        let cell_id = if p.cell_id.is_empty() {
            "default".to_owned()
        } else {
            p.cell_id.clone()
        };
        valid_id("cell id", &cell_id)?;
        if self.has_run(&run_id) {
            return Err(RuntimeError::invalid(format!(
                "run `{run_id}` already exists"
            )));
        }
        let chat_id = if p.chat_id.is_empty() {
            run_id.clone()
        } else {
            p.chat_id.clone()
        };
        for (what, v) in [
            ("message", p.initial_user_message.len()),
            ("system prompt", p.system_prompt.len()),
        ] {
            if v > 1024 * 1024 {
                return Err(RuntimeError::invalid(format!("the {what} is over 1 MiB")));
            }
        }
        p.run_budget
            .validate("run_budget")
            .map_err(RuntimeError::invalid)?;
        let plan_node_policy = match &p.plan_node_policy_json {
            Some(text) if !text.trim().is_empty() => Some(
                serde_json::from_str(text)
                    .map_err(|e| RuntimeError::invalid(format!("plan node policy: {e}")))?,
            ),
            _ => None,
        };
        Ok(Checked {
            run_id,
            cell_id,
            chat_id,
            plan_node_policy,
        })
    }

    /// Runs left running by a previous process: a run whose active invocation had a turn held
    /// for approval is rebuilt with that turn still held (`resume_held`); every other one is
    /// failed as interrupted — nothing is silently lost, and the journal says so
    /// (docs/runtime.md, docs/approvals.md).
    /// Returns the runtime-driven runs rebuilt this way: their loops are to be driven on.
    ///
    /// Not over a shared store (PostgreSQL, S3): its unfinished runs may be driven by other
    /// runtimes that are alive, so a starting runtime leaves them alone (docs/runtime.md, "Run
    /// ownership").
    pub async fn recover(&self) -> Vec<Arc<Run>> {
        if self.cfg.store_config().is_shared() {
            tracing::info!(
                "the store is shared with other runtimes: runs left unfinished are neither failed nor resumed at start"
            );
            return Vec::new();
        }
        self.load_approvals().await;
        let mut resumed = Vec::new();
        let Ok(prefix) = key("runs") else {
            return resumed;
        };
        let mut after: Option<Key> = None;
        loop {
            let page = match self.store().list(Some(&prefix), after.as_ref(), 1000).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "listing runs for recovery failed");
                    return resumed;
                }
            };
            for k in &page.keys {
                if let Some(run) = self.recover_one(k).await
                    && run.snapshot().driver == Driver::Runtime
                {
                    resumed.push(run);
                }
            }
            match page.next_start_after {
                Some(n) => after = Some(n),
                None => return resumed,
            }
        }
    }

    /// Reads one run back; the run when it was rebuilt to go on.
    async fn recover_one(&self, k: &Key) -> Option<Arc<Run>> {
        let obj = self.store().get(k).await.ok()??;
        let record = serde_json::from_slice::<RunRecord>(&obj.bytes).ok()?;
        let interrupted = !record.status.is_terminal();
        // A finished run's journal end is read back when someone asks (`last_seq`).
        let run = Arc::new(Run::new(record, 0));
        self.insert_run(run.clone());
        if !interrupted {
            return None;
        }
        let (end, tail) = self.journal_tail(&run).await.unwrap_or_default();
        let run = Arc::new(Run::new(run.snapshot(), end + 1));
        self.insert_run(run.clone());
        if self.end_from_journal(&run, &tail).await {
            return None;
        }
        if self.resume_held(&run).await {
            return Some(run);
        }
        let failure = Failure {
            code: codes::RUNTIME_INTERRUPTED.as_str().into(),
            message: "the runtime stopped while this run was in progress; start it again to retry"
                .into(),
            retryable: true,
        };
        self.lapse_approvals(
            &run.id,
            "the runtime restarted while the call was held; the run was failed as interrupted",
        )
        .await;
        if let Err(e) = self.end_run(&run, RunStatus::Failed, Some(failure)).await {
            tracing::warn!(run = %run.id, error = %e, "marking an interrupted run failed");
        }
        None
    }

    /// The successful end of a run: `persist/` is promoted, the workspace sealed, `run_completed`.
    pub async fn finish_run(&self, run: &Run) -> Result<(), RuntimeError> {
        let record = run.snapshot();
        let events = vec![
            Event::new("agent_loop_finished", json!({"reason": "finish"})),
            Event::new("commit_started", json!({})),
        ];
        self.append(run, record.epoch, Vec::new(), events).await?;
        match self
            .ports
            .workspace
            .promote_persist(&scope_of(&record))
            .await
        {
            Ok(r) => {
                let ev = Event::new(
                    "persistent_changes_committed",
                    json!({"persistVersion": r.persist_version, "changedPaths": r.changed_paths}),
                );
                self.append(run, record.epoch, Vec::new(), vec![ev]).await?;
                self.end_run(run, RunStatus::Completed, None).await
            }
            Err(e) => {
                let failure = Failure {
                    code: e.code().unwrap_or("workspace.persist_conflict").into(),
                    message: e.message.clone(),
                    retryable: true,
                };
                let ev = Event::new(
                    "persistent_changes_commit_failed",
                    json!({"failure": failure}),
                )
                .warn();
                self.append(run, record.epoch, Vec::new(), vec![ev]).await?;
                self.end_run(run, unfinished_end(&record), Some(failure))
                    .await
            }
        }
    }

    /// Ends a run with a terminal status, journals it, seals its workspace and saves the record.
    pub async fn end_run(
        &self,
        run: &Run,
        status: RunStatus,
        failure: Option<Failure>,
    ) -> Result<(), RuntimeError> {
        let before = run.snapshot();
        // A cancelled run is ended by its cancel, as cancelled, whatever else ends meanwhile (a
        // turn that failed or ran out of rounds, a loop stopped by the cancel).
        if run.is_cancelled() && status != RunStatus::Cancelled {
            return Ok(());
        }
        // One end per run, even when a cancel and the loop's own failure race.
        if before.status.is_terminal() || !run.begin_end() {
            return Ok(());
        }
        // A run this runtime no longer drives is ended by its new driver, never here.
        if run.lease_lost() {
            return Err(crate::context::journal::lease_lost(run));
        }
        // Delegated tasks still running stop at their next step.
        run.agents.cancel(None);
        // Calls still held can no longer run.
        self.lapse_approvals(&run.id, &format!("the run ended ({})", status.as_str()))
            .await;
        let events = end_events(&before, status, failure.as_ref());
        let journalled = self.append(run, before.epoch, Vec::new(), events).await;
        // The status turns terminal only once the journal holds the end: whoever sees a finished
        // run can read its whole journal. Its checkpoints go once the record says so: a driver
        // that stops in between leaves a run that is taken over and finished from the journal's
        // end (`finish_journalled_end`), never driven again.
        self.save_end(run, status, failure).await?;
        // Open invocations of a finished run end with it.
        for inv in self.invocations_of(&run.id) {
            close_with_run(&inv, status);
        }
        journalled.map(|_| ())
    }

    /// Saves a run's terminal record (the journal holds its end already), then removes its
    /// checkpoints and seals its workspace.
    pub(crate) async fn save_end(
        &self,
        run: &Run,
        status: RunStatus,
        failure: Option<Failure>,
    ) -> Result<(), RuntimeError> {
        let record = run.update(|r| {
            r.status = status;
            r.failure = failure;
        });
        self.persist_run(run).await?;
        self.forget_held_of_run(&run.cell, &run.id).await;
        let _ = self
            .ports
            .workspace
            .finish_run_workspace(&scope_of(&record), status)
            .await;
        Ok(())
    }

    /// Cooperative cancel: the loop and open invocations stop at their next step; executors see
    /// the cancelled run through their deadlines.
    pub async fn cancel_run(
        self: &Arc<Self>,
        run: &Arc<Run>,
        reason: &str,
    ) -> Result<(), RuntimeError> {
        let record = run.snapshot();
        if record.status.is_terminal() {
            return Ok(());
        }
        let ev = Event::new("run_cancel_requested", json!({"reason": reason}));
        self.append(run, record.epoch, Vec::new(), vec![ev]).await?;
        let failure = Failure {
            code: codes::RUNTIME_CANCELLED.as_str().into(),
            message: if reason.is_empty() {
                "cancelled".into()
            } else {
                reason.into()
            },
            retryable: true,
        };
        // The cancel reaches everything first: tool calls in flight are dropped (their hosts told
        // to stop) and answered as cancelled, loops stop at their next step, delegated tasks wind
        // down. Their records land before the run's end: the turns in flight are waited for
        // (each holds its invocation's lock), and only then does the run end. Any other end
        // meanwhile is left to this one (`end_run`), so the run ends as cancelled, not failed.
        run.cancel();
        // A cancelled run never resumes after a restart, even one before its end is recorded.
        self.forget_held_of_run(&run.cell, &run.id).await;
        let open = self.invocations_where(|i| i.run.id == run.id);
        // On a task of its own: a caller that stops waiting (a dropped request, a deadline) must
        // not leave a run cancelled but never ended.
        let rt = Arc::clone(self);
        let ending = Arc::clone(run);
        let ended = tokio::spawn(async move {
            ending.agents.cancel_and_wait(None).await;
            let deadline = tokio::time::Instant::now() + CANCEL_TURN_WAIT;
            for inv in open {
                if tokio::time::timeout_at(deadline, inv.inner.lock())
                    .await
                    .is_err()
                {
                    tracing::warn!(invocation = %inv.id, "a turn still ran when its run was cancelled; its calls may be missing from the journal");
                }
            }
            rt.end_run(&ending, RunStatus::Cancelled, Some(failure))
                .await
        });
        ended.await.map_err(|e| {
            RuntimeError::new(
                codes::RUNTIME_INTERRUPTED,
                format!("ending the cancelled run stopped: {e}"),
            )
        })?
    }

    /// Closes host-driven invocations that saw no request for the idle timeout.
    pub async fn reap_idle(&self) {
        let idle = self.invocations_where(|i| {
            i.driver == Driver::Host && i.idle_for() >= self.cfg.invocation_idle_timeout
        });
        for inv in idle {
            let Ok(mut inner) = inv.inner.try_lock() else {
                continue;
            };
            if inner.status != InvocationStatus::Open {
                continue;
            }
            let failure = Failure {
                code: codes::RUNTIME_IDLE_TIMEOUT.as_str().into(),
                message: format!(
                    "no request for {} s",
                    self.cfg.invocation_idle_timeout.as_secs()
                ),
                retryable: true,
            };
            if let Err(e) = self.fail_invocation(&inv, &mut inner, failure).await {
                tracing::warn!(invocation = %inv.id, error = %e, "closing an idle invocation failed");
            }
        }
    }
}

/// How a run ends that did not finish: partly successful when an answer was committed.
pub fn unfinished_end(record: &RunRecord) -> RunStatus {
    if record.committed {
        RunStatus::PartialSuccess
    } else {
        RunStatus::Failed
    }
}

pub fn scope_of(record: &RunRecord) -> RunScope {
    RunScope {
        run_id: record.run_id.clone(),
        cell_id: record.cell_id.clone(),
        epoch: record.epoch,
    }
}

/// An open invocation of a run that just ended ends with it (unless a turn holds it).
pub(super) fn close_with_run(inv: &Invocation, status: RunStatus) {
    if let Ok(mut inner) = inv.inner.try_lock()
        && inner.status == InvocationStatus::Open
    {
        inner.status = if status == RunStatus::Cancelled {
            InvocationStatus::Cancelled
        } else {
            InvocationStatus::Closed
        };
        inner.ended_ms = now_ms();
    }
}

/// The records of a run's end: the status change and the end itself.
fn end_events(before: &RunRecord, status: RunStatus, failure: Option<&Failure>) -> Vec<Event> {
    let kind = match status {
        RunStatus::Completed => "run_completed",
        RunStatus::PartialSuccess => "run_partial_success",
        RunStatus::Cancelled => "run_cancelled",
        _ => "run_failed",
    };
    let mut ev = Event::new(
        kind,
        json!({"status": status.as_str(), "failure": failure, "userRetryable": failure.is_some_and(|f| f.retryable), "committed": before.committed}),
    );
    if status == RunStatus::Failed {
        ev = ev.error();
    } else if status == RunStatus::PartialSuccess {
        ev = ev.warn();
    }
    vec![
        Event::new(
            "status_changed",
            json!({"from": before.status.as_str(), "to": status.as_str()}),
        ),
        ev,
    ]
}

fn new_record(p: NewRun, c: &Checked, created: &CreatedWorkspace, epoch: u64) -> RunRecord {
    let now = now_ms();
    RunRecord {
        run_id: c.run_id.clone(),
        cell_id: c.cell_id.clone(),
        actor_id: p.actor_id,
        session_id: p.session_id,
        chat_id: c.chat_id.clone(),
        message_id: p.message_id,
        mode: if p.background {
            RunMode::Background
        } else {
            RunMode::Foreground
        },
        profile_id: p.profile_id,
        status: RunStatus::Created,
        driver: p.driver.unwrap_or(Driver::Host),
        root_invocation_id: String::new(),
        active_invocation_id: String::new(),
        epoch,
        holder: String::new(),
        holder_url: String::new(),
        created_ms: now,
        updated_ms: now,
        failure: None,
        committed: false,
        auto_published: false,
        labels: p.labels,
        run_tools: p.run_tools,
        plan_node_policy: c.plan_node_policy.clone(),
        visible_roots: created.visible_roots.clone(),
        writable_roots: created.writable_roots.clone(),
        allow_paths: p.allow_paths,
        deny_paths: p.deny_paths,
        work_dir: p.work_dir,
        system_prompt: p.system_prompt,
        initial_user_message: p.initial_user_message,
        run_budget: p.run_budget,
    }
}

fn first_events(record: &RunRecord, created: &CreatedWorkspace) -> Vec<Event> {
    let mut events = vec![
        Event::new(
            "run_created",
            json!({"runId": record.run_id, "cellId": record.cell_id, "actorId": record.actor_id, "chatId": record.chat_id, "mode": mode_str(record), "profileId": record.profile_id, "driver": driver_str(record.driver), "labels": record.labels}),
        ),
        Event::new(
            "workspace_initialized",
            json!({"visibleRoots": record.visible_roots, "writableRoots": record.writable_roots}),
        ),
    ];
    if !created.persist_base_version.is_empty() {
        events.push(Event::new(
            "persistent_projection_initialized",
            json!({"persistBaseVersion": created.persist_base_version}),
        ));
    }
    events
}

fn mode_str(r: &RunRecord) -> &'static str {
    match r.mode {
        RunMode::Foreground => "foreground",
        RunMode::Background => "background",
    }
}

pub fn driver_str(d: Driver) -> &'static str {
    match d {
        Driver::Host => "host",
        Driver::Runtime => "runtime",
    }
}
