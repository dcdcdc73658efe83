//! Invocations: opened with their snapshot — the profile, policies and catalog read once and
//! compiled into the tools this invocation may use — and ended as finished, returned, handed off,
//! failed, closed or cancelled.

use std::sync::Arc;

use serde_json::{Value, json};
use toolplane_core::Profile;
use toolplane_core::catalog::{CatalogEntry, ToolCatalog};
use toolplane_core::cycle::CycleDetector;
use toolplane_core::error as codes;
use toolplane_core::gate::ToolRequestGate;
use toolplane_core::policy::{PlatformPolicy, PolicyLayers, UserPolicy};
use toolplane_core::selector::ToolSelector;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::turn::{ToolChoice, ToolTurnContract};
use toolplane_model::ProviderFormat;

use super::runs::{driver_str, scope_of, unfinished_end};
use crate::context::Runtime;
use crate::context::ports::{InvocationWorkspace, SkillAccess};
use crate::error::RuntimeError;
use crate::state::{
    AuditObject, Driver, Event, Failure, HeldTurn, Invocation, InvocationInner, InvocationStatus,
    Run, RunRecord, RunStatus, TurnStage, now_ms, turn_id,
};

/// What opening an invocation produced.
#[derive(Debug)]
pub struct Opened {
    pub invocation: Arc<Invocation>,
    /// The provider request fields advertising the first turn's tools and tool choice.
    pub tools_json: Value,
    pub turn_id: String,
}

/// What the catalog said about the invocation's profile, read once.
struct Resolved {
    profile: Profile,
    version: u64,
    platform: PlatformPolicy,
    user: UserPolicy,
    catalog: ToolCatalog,
}

/// A compiled snapshot with its first turn.
struct Compiled {
    snapshot: InvocationToolSnapshot,
    turn: ToolTurnContract,
    tools_json: Value,
}

fn parse_policy<T: serde::de::DeserializeOwned + Default>(
    json: Option<&str>,
) -> Result<T, RuntimeError> {
    match json.map(str::trim).filter(|t| !t.is_empty()) {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| RuntimeError::dependency(format!("a stored policy is unreadable: {e}"))),
        None => Ok(T::default()),
    }
}

/// Fixes the run's budget when its root opens: the creator's limits narrowed by the root
/// profile's `runBudget`. Journalled as `run_budget_set` when there is a limit.
fn fix_run_budget(run: &Run, record: &RunRecord, profile: &Profile) -> Option<Event> {
    let limits = record.run_budget.narrowest(profile.run_budget);
    run.with_budget(|b| b.set_limits(limits));
    (!limits.is_unlimited()).then(|| {
        Event::new(
            "run_budget_set",
            json!({"maxToolCalls": limits.max_tool_calls, "maxModelTokens": limits.max_model_tokens, "profileId": profile.id}),
        )
    })
}

/// An invocation's state when it opens on `snapshot`: its first round, open, nothing held.
fn first_state(
    snapshot: InvocationToolSnapshot,
    profile: Profile,
    format: ProviderFormat,
    turn: ToolTurnContract,
) -> InvocationInner {
    let gate = ToolRequestGate::new(&snapshot);
    InvocationInner {
        snapshot: Arc::new(snapshot),
        cycle: CycleDetector::new(profile.tools.cycle),
        schemas: Default::default(),
        profile,
        format,
        turn,
        round: 1,
        gate,
        status: InvocationStatus::Open,
        failure: None,
        ended_ms: 0,
        returned: None,
        found: Vec::new(),
        search_index: None,
        held: None,
        interrupted: None,
        unknown_outcome: None,
        recovered: Default::default(),
        conversation: None,
        checkpoint_version: None,
    }
}

/// Refuses a request made under an epoch older than the run's.
pub fn check_epoch(run: &Run, epoch: Option<u64>) -> Result<(), RuntimeError> {
    match epoch {
        Some(e) if e != 0 && e < run.epoch() => Err(RuntimeError::new(
            codes::RUNTIME_STALE_EPOCH,
            format!("epoch {e} is older than the run's epoch {}", run.epoch()),
        )),
        _ => Ok(()),
    }
}

impl Runtime {
    /// Opens an invocation: reads the profile, policies and catalog once, compiles and persists
    /// the snapshot, and returns the first turn's tools in the requested provider format.
    pub async fn open_invocation(
        &self,
        run: &Arc<Run>,
        profile_id: &str,
        exit: ExitPolicy,
        format: ProviderFormat,
        choice: ToolChoice,
        driver: Driver,
    ) -> Result<Opened, RuntimeError> {
        let record = run.snapshot();
        let profile_id = openable(run, &record, profile_id)?;
        let resolved = self.resolve(&record, &profile_id).await?;
        let invocation_id = uuid::Uuid::new_v4().to_string();
        let Compiled {
            snapshot,
            turn,
            tools_json,
        } = compile(
            run,
            &invocation_id,
            &resolved,
            &record,
            &exit,
            format,
            choice,
        )?;
        let snapshot_path = format!("input/invocations/{invocation_id}/tool_snapshot.json");
        let snapshot_bytes = serde_json::to_vec_pretty(&snapshot)
            .map_err(|e| RuntimeError::invalid(e.to_string()))?;
        self.open_workspace(&record, &invocation_id, &snapshot, &resolved.profile)
            .await?;
        let mut events = vec![Event::new(
            "agent_invocation_created",
            json!({"invocationId": invocation_id, "profileId": profile_id, "profileVersion": resolved.version, "exitPolicy": exit, "driver": driver_str(driver), "providerFormat": format.as_str()}),
        )
        .inv(&invocation_id)];
        events.extend(snapshot_events(
            &invocation_id,
            &snapshot_path,
            &snapshot,
            &turn,
        ));
        if record.root_invocation_id.is_empty() {
            events.extend(fix_run_budget(run, &record, &resolved.profile));
        }
        let snapshot_object = AuditObject {
            path: snapshot_path.clone(),
            content: snapshot_bytes,
            content_type: "application/json",
        };
        if self.checkpoints_on() {
            let entry = format!("{}/{}", run.cell, run.id);
            self.index(&format!("ids/invocations/{invocation_id}"), &entry)
                .await?;
        }
        self.append(run, record.epoch, vec![snapshot_object], events)
            .await?;
        self.take_over(run, &record, &invocation_id, &exit).await?;
        let inv = Arc::new(Invocation::new(
            invocation_id.clone(),
            run.clone(),
            driver,
            snapshot_path,
            resolved.version,
            first_state(snapshot, resolved.profile, format, turn),
        ));
        self.insert_invocation(inv.clone());
        // A host-driven invocation can be taken over from its first turn; a runtime-driven one's
        // loop writes its checkpoints itself, with its conversation.
        if driver == Driver::Host {
            let mut inner = inv.inner.lock().await;
            let between = HeldTurn::between(1, None);
            self.checkpoint(&inv, &mut inner, TurnStage::Between, &between)
                .await;
        }
        Ok(Opened {
            invocation: inv,
            tools_json,
            turn_id: turn_id(&invocation_id, 1),
        })
    }

    /// Opens the invocation's view of the run's workspace: the snapshot's roots and the profile's
    /// skills.
    async fn open_workspace(
        &self,
        record: &RunRecord,
        invocation_id: &str,
        snapshot: &InvocationToolSnapshot,
        profile: &Profile,
    ) -> Result<(), RuntimeError> {
        self.ports
            .workspace
            .open_invocation_workspace(InvocationWorkspace {
                run: scope_of(record),
                invocation_id: invocation_id.to_owned(),
                visible_roots: snapshot.workspace.visible.clone(),
                writable_roots: snapshot.workspace.writable.clone(),
                skills: SkillAccess {
                    visible: profile.skills.visible.clone(),
                    deny: profile.skills.deny.clone(),
                    max_read_chars_per_call: profile.skills.max_read_chars_per_call,
                    max_read_chars_per_run: profile.skills.max_read_chars_per_run,
                },
            })
            .await
            .map_err(|e| e.into_error("opening the invocation workspace"))
    }

    /// Reads the profile, its policies and its tools from the catalog; the run's own tools join
    /// them.
    async fn resolve(
        &self,
        record: &RunRecord,
        profile_id: &str,
    ) -> Result<Resolved, RuntimeError> {
        let resolved = self
            .ports
            .catalog
            .resolve_profile(&record.cell_id, profile_id, &record.actor_id)
            .await
            .map_err(|e| e.into_error("resolving the profile"))?;
        let mut profile = Profile::from_json(&resolved.profile.profile_json)?;
        let platform: PlatformPolicy = parse_policy(resolved.platform_policy_json.as_deref())?;
        let user: UserPolicy = parse_policy(resolved.user_policy_json.as_deref())?;
        let mut entries: Vec<CatalogEntry> = Vec::with_capacity(resolved.tools.len());
        for listing in resolved.tools {
            // What registrations declared (category, progress-awareness) fills the consumer
            // levels of the category fallback, below anything the profile says itself.
            if let Some(id) = listing.id {
                if let Some(c) = listing.category {
                    profile
                        .tools
                        .extra_categories
                        .entry(id.clone())
                        .or_insert(c);
                }
                if listing.progress_aware && !profile.tools.extra_progress_aware.contains(&id) {
                    profile.tools.extra_progress_aware.push(id);
                }
            }
            match listing.entry {
                Ok(e) => entries.push(e),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a catalog listing the runtime cannot read")
                }
            }
        }
        // Per-run tools come with the run spec and are offered to every invocation of the run;
        // profile denies and policy layers still apply.
        for host in &record.run_tools {
            for d in &host.descriptors {
                entries.push(CatalogEntry::usable(
                    toolplane_core::ToolOrigin::RunSpec {
                        host_id: host.host_id.clone(),
                        endpoint: host.endpoint.clone(),
                    },
                    d.clone(),
                )?);
            }
            profile
                .tools
                .allow
                .push(ToolSelector::parse(&format!("ext/{}:*", host.host_id))?);
        }
        Ok(Resolved {
            profile,
            version: resolved.profile.version,
            platform,
            user,
            catalog: ToolCatalog::new(entries)?,
        })
    }

    /// Makes a new invocation the run's owner (unless it is a delegated child) and the run
    /// running.
    async fn take_over(
        &self,
        run: &Arc<Run>,
        record: &RunRecord,
        invocation_id: &str,
        exit: &ExitPolicy,
    ) -> Result<(), RuntimeError> {
        let was_created = record.status == RunStatus::Created;
        // A delegated child works for its parent; the run's owner stays the parent.
        let takes_over = !matches!(exit, ExitPolicy::ReturnToParent { .. });
        let changes = record.root_invocation_id.is_empty()
            || takes_over
            || record.status != RunStatus::Running;
        if changes {
            run.update(|r| {
                if r.root_invocation_id.is_empty() {
                    r.root_invocation_id = invocation_id.to_owned();
                }
                if takes_over {
                    r.active_invocation_id = invocation_id.to_owned();
                }
                r.status = RunStatus::Running;
            });
            self.persist_run(run).await?;
        }
        if was_created {
            let ev = Event::new(
                "status_changed",
                json!({"from": "created", "to": "running"}),
            );
            self.append(run, record.epoch, Vec::new(), vec![ev]).await?;
        }
        Ok(())
    }

    /// Ends an invocation ending status `status`, journals it and closes its workspace view.
    pub async fn end_invocation(
        &self,
        inv: &Invocation,
        inner: &mut InvocationInner,
        status: InvocationStatus,
        failure: Option<Failure>,
    ) -> Result<(), RuntimeError> {
        inner.status = status;
        inner.failure = failure.clone();
        inner.ended_ms = now_ms();
        let recorded = inner.held.take().is_some() | inner.checkpoint_version.take().is_some();
        let kind = match status {
            InvocationStatus::Failed => "agent_invocation_failed",
            InvocationStatus::Cancelled => "agent_invocation_cancelled",
            InvocationStatus::HandedOff => "agent_invocation_transferred",
            _ => "agent_invocation_completed",
        };
        let mut ev = Event::new(kind, json!({"invocationId": inv.id, "status": format!("{status:?}").to_lowercase(), "rounds": inner.round, "calls": inner.gate.used_total(), "failure": failure})).inv(&inv.id);
        if status == InvocationStatus::Failed {
            ev = ev.error();
        }
        self.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
            .await?;
        // A turn still held (or a checkpoint) ends with its invocation: nothing to rebuild. It
        // goes once the journal says so, so that a driver stopping in between leaves either the
        // record or the invocation's end (docs/runtime.md, "A run that was ending"). A runtime
        // that lost the run leaves the record to its new driver.
        if recorded && !inv.run.lease_lost() {
            self.forget_held(&inv.run.cell, &inv.run.id, &inv.id).await;
        }
        let scope = scope_of(&inv.run.snapshot());
        let _ = self
            .ports
            .workspace
            .close_invocation_workspace(&scope, &inv.id)
            .await;
        Ok(())
    }

    /// Fails an invocation; a failed root of a host-driven run fails the run too.
    pub async fn fail_invocation(
        &self,
        inv: &Invocation,
        inner: &mut InvocationInner,
        failure: Failure,
    ) -> Result<(), RuntimeError> {
        if inner.status != InvocationStatus::Open {
            return Ok(());
        }
        self.end_invocation(inv, inner, InvocationStatus::Failed, Some(failure.clone()))
            .await?;
        let record = inv.run.snapshot();
        if record.active_invocation_id == inv.id && inv.driver == Driver::Host {
            self.end_run(&inv.run, unfinished_end(&record), Some(failure))
                .await?;
        }
        Ok(())
    }

    /// Closes an invocation at the host's request (or after the idle timeout).
    pub async fn close_invocation(
        &self,
        inv: &Arc<Invocation>,
        reason: &str,
        epoch: Option<u64>,
    ) -> Result<(), RuntimeError> {
        check_epoch(&inv.run, epoch)?;
        let mut inner = inv.inner.lock().await;
        if inner.status != InvocationStatus::Open {
            return Ok(());
        }
        self.end_invocation(inv, &mut inner, InvocationStatus::Closed, None)
            .await?;
        let ev = Event::new(
            "agent_invocation_closed",
            json!({"invocationId": inv.id, "reason": reason}),
        )
        .inv(&inv.id);
        self.append(&inv.run, inv.run.epoch(), Vec::new(), vec![ev])
            .await?;
        Ok(())
    }

    /// Ends an open invocation as cancelled (a delegated task whose parent finished or whose run
    /// ended).
    pub async fn cancel_invocation(&self, inv: &Invocation) {
        let mut inner = inv.inner.lock().await;
        if inner.status != InvocationStatus::Open {
            return;
        }
        if let Err(e) = self
            .end_invocation(inv, &mut inner, InvocationStatus::Cancelled, None)
            .await
        {
            tracing::warn!(invocation = %inv.id, error = %e, "journalling a cancelled invocation failed");
        }
    }
}

/// The profile a new invocation of `run` opens, when the run can take one.
fn openable(run: &Run, record: &RunRecord, profile_id: &str) -> Result<String, RuntimeError> {
    if record.status.is_terminal() || record.status == RunStatus::Cancelling {
        return Err(RuntimeError::new(
            codes::RUNTIME_INVOCATION_NOT_OPEN,
            format!("run {} is {}", run.id, record.status.as_str()),
        ));
    }
    let profile_id = if profile_id.is_empty() {
        record.profile_id.clone()
    } else {
        profile_id.to_owned()
    };
    if profile_id.is_empty() {
        return Err(RuntimeError::invalid(
            "no profile: name one in the request or when creating the run",
        ));
    }
    Ok(profile_id)
}

/// Compiles the snapshot and the first turn's contract and tool fields.
fn compile(
    run: &Run,
    invocation_id: &str,
    r: &Resolved,
    record: &RunRecord,
    exit: &ExitPolicy,
    format: ProviderFormat,
    choice: ToolChoice,
) -> Result<Compiled, RuntimeError> {
    let snapshot = InvocationToolSnapshot::compile(CompileRequest {
        run_id: &run.id,
        invocation_id,
        profile: &r.profile,
        layers: PolicyLayers {
            user: Some(&r.user),
            platform: Some(&r.platform),
            plan_node: record.plan_node_policy.as_ref(),
        },
        exit_policy: exit,
        catalog: &r.catalog,
    })?;
    let turn = ToolTurnContract::advertised(&snapshot, 1, choice, &[])?;
    let tools_json = Value::Object(toolplane_model::encode_tools(format, &turn, &snapshot)?);
    Ok(Compiled {
        snapshot,
        turn,
        tools_json,
    })
}

/// The records of a compiled snapshot: omitted tools, the assembled context, the start.
fn snapshot_events(
    invocation_id: &str,
    snapshot_path: &str,
    snapshot: &InvocationToolSnapshot,
    turn: &ToolTurnContract,
) -> Vec<Event> {
    let mut events = Vec::new();
    for o in &snapshot.omitted {
        events.push(Event::new("tool_omitted", json!({"invocationId": invocation_id, "tool": o.tool, "reason": o.reason.kind(), "detail": o.reason.describe()})).inv(invocation_id).warn());
    }
    events.push(
        Event::new("context_assembled", json!({"invocationId": invocation_id, "snapshotPath": snapshot_path, "snapshot": snapshot.summary(), "contract": turn}))
            .inv(invocation_id),
    );
    events.push(
        Event::new(
            "agent_invocation_started",
            json!({"invocationId": invocation_id, "round": 1}),
        )
        .inv(invocation_id),
    );
    events
}
