//! The runtime: runs, invocations and their lifecycles, shared by the gRPC service, the
//! runtime-driven loop and the idle reaper.
//!
//! It owns the facts of runs and invocations and never file bytes or MCP connections: storage goes
//! through the workspace service, tools through their executors, profiles and tools through the
//! catalog — read once per invocation, when its snapshot is compiled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde_json::{Value, json};
use toolplane_core::Profile;
use toolplane_core::catalog::{CatalogEntry, ToolCatalog};
use toolplane_core::cycle::CycleDetector;
use toolplane_core::error::{self as codes, ErrorClass};
use toolplane_core::gate::ToolRequestGate;
use toolplane_core::policy::{PlatformPolicy, PolicyLayers, UserPolicy};
use toolplane_core::selector::ToolSelector;
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_core::turn::{CallIdPolicy, ToolChoice, ToolTurnContract};
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;
use toolplane_store::{FsStore, Key, Precondition, Store, StoreOptions};

use crate::config::RuntimeConfig;
use crate::convert;
use crate::error::RuntimeError;
use crate::journal::{AuditObject, Event, now_ms};
use crate::peers::Peers;
use crate::pipeline::{self, Terminal, TurnOutcome};
use crate::state::{
    Driver, Failure, Invocation, InvocationInner, InvocationStatus, Run, RunRecord, RunStatus,
    turn_id,
};

/// How long a cancel waits for a turn in flight to journal its calls before the run ends anyway.
/// A cancelled tool call answers at once; this bounds a turn stuck elsewhere.
const CANCEL_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What opening an invocation produced.
#[derive(Debug)]
pub struct Opened {
    pub invocation: Arc<Invocation>,
    /// The provider request fields advertising the first turn's tools and tool choice.
    pub tools_json: Value,
    pub turn_id: String,
}

/// The answer to one host-driven turn.
#[derive(Debug)]
pub struct HostTurn {
    pub outcome: TurnOutcome,
    pub result_messages: Value,
    pub status: InvocationStatus,
    pub next_turn_id: Option<String>,
    pub failure: Option<Failure>,
    /// The invocation that took the run over, when this turn handed off.
    pub handoff: Option<HandedOff>,
    /// Finished delegated tasks whose results go into the next model request.
    pub injected: Vec<crate::agents::Task>,
}

/// A handoff carried out: the target's new invocation and the brief it starts from.
#[derive(Debug)]
pub struct HandedOff {
    pub opened: Opened,
    pub brief: String,
    pub target: Profile,
    /// The target's own model endpoint (runtime-driven runs, targets that have one).
    pub endpoint: Option<crate::provider::Endpoint>,
}

/// How a turn left its invocation.
#[derive(Debug)]
pub struct TurnEnd {
    pub status: InvocationStatus,
    pub failure: Option<Failure>,
    pub handoff: Option<HandedOff>,
}

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
    pub run_tools: Vec<pb::RunToolHost>,
    pub plan_node_policy_json: Option<String>,
    pub world_info_json: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub allow_paths: Vec<String>,
    pub deny_paths: Vec<String>,
    pub work_dir: String,
    pub system_prompt: String,
    pub initial_user_message: String,
    pub driver: Option<Driver>,
}

#[derive(Debug)]
pub struct Runtime {
    pub cfg: RuntimeConfig,
    pub peers: Peers,
    store: Arc<dyn Store>,
    runs: Mutex<HashMap<String, Arc<Run>>>,
    invocations: Mutex<HashMap<String, Arc<Invocation>>>,
    /// Itself, for the background work it starts (delegated tasks).
    me: OnceLock<Weak<Runtime>>,
    pub metrics: crate::metrics::RuntimeMetrics,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn key(s: &str) -> Result<Key, RuntimeError> {
    Key::new(s).map_err(|e| RuntimeError::invalid(e.to_string()))
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

impl Runtime {
    /// Opens the runtime's store, connects (lazily) to its peers and fails every run a previous
    /// process left unfinished.
    pub async fn open(cfg: RuntimeConfig) -> Result<Arc<Runtime>, RuntimeError> {
        let fs = FsStore::open(&cfg.data_dir, StoreOptions::default())
            .await
            .map_err(|e| {
                RuntimeError::dependency(format!("opening {}: {e}", cfg.data_dir.display()))
            })?;
        let store: Arc<dyn Store> = Arc::new(fs);
        let rt = Arc::new(Runtime {
            peers: Peers::new(&cfg)?,
            cfg,
            store,
            runs: Mutex::new(HashMap::new()),
            invocations: Mutex::new(HashMap::new()),
            me: OnceLock::new(),
            metrics: crate::metrics::RuntimeMetrics::default(),
        });
        let _ = rt.me.set(Arc::downgrade(&rt));
        rt.recover().await;
        Ok(rt)
    }

    /// A shared handle to this runtime; `None` only while it is being dropped.
    pub fn arc(&self) -> Option<Arc<Runtime>> {
        self.me.get().and_then(Weak::upgrade)
    }

    /// A profile's own model endpoint, with this runtime's timeout and retries where the profile
    /// sets none: `None` when it names none, the reason when it cannot be used.
    pub fn endpoint_of(
        &self,
        profile: &Profile,
    ) -> Option<Result<crate::provider::Endpoint, String>> {
        profile.model.as_ref().map(|m| {
            crate::provider::Endpoint::from_profile(
                m,
                self.cfg.model_timeout,
                self.cfg.model_max_retries,
            )
        })
    }

    pub fn run(&self, id: &str) -> Result<Arc<Run>, RuntimeError> {
        lock(&self.runs)
            .get(id)
            .cloned()
            .ok_or_else(|| RuntimeError::not_found(format!("no run `{id}`")))
    }

    pub fn invocation(&self, id: &str) -> Result<Arc<Invocation>, RuntimeError> {
        lock(&self.invocations)
            .get(id)
            .cloned()
            .ok_or_else(|| RuntimeError::not_found(format!("no invocation `{id}`")))
    }

    pub fn runs(&self) -> Vec<Arc<Run>> {
        lock(&self.runs).values().cloned().collect()
    }

    pub fn invocations_of(&self, run_id: &str) -> Vec<Arc<Invocation>> {
        let mut v: Vec<Arc<Invocation>> = lock(&self.invocations)
            .values()
            .filter(|i| i.run.id == run_id)
            .cloned()
            .collect();
        v.sort_by_key(|i| i.created_ms);
        v
    }

    /// Writes the run record (compare-and-swap on the stored version).
    pub async fn persist_run(&self, run: &Run) -> Result<(), RuntimeError> {
        let record = run.snapshot();
        let k = key(&format!("runs/{}/{}.json", record.cell_id, record.run_id))?;
        let bytes =
            serde_json::to_vec(&record).map_err(|e| RuntimeError::invalid(e.to_string()))?;
        for _ in 0..3 {
            let expected = match self
                .store
                .head(&k)
                .await
                .map_err(|e| RuntimeError::dependency(e.to_string()))?
            {
                Some(v) => Precondition::Version(v),
                None => Precondition::Absent,
            };
            match self.store.put_cas(&k, bytes.clone(), expected).await {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == "store.conflict" => continue,
                Err(e) => {
                    return Err(RuntimeError::dependency(format!(
                        "saving run {}: {e}",
                        record.run_id
                    )));
                }
            }
        }
        Err(RuntimeError::dependency(format!(
            "saving run {}: too many concurrent updates",
            record.run_id
        )))
    }

    /// Runs left running by a previous process are failed as interrupted: nothing is silently
    /// lost, and the journal says so (docs/runtime.md).
    async fn recover(&self) {
        let Ok(prefix) = key("runs") else { return };
        let mut after: Option<Key> = None;
        loop {
            let page = match self.store.list(Some(&prefix), after.as_ref(), 1000).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "listing runs for recovery failed");
                    return;
                }
            };
            for k in &page.keys {
                let Ok(Some(obj)) = self.store.get(k).await else {
                    continue;
                };
                let Ok(record) = serde_json::from_slice::<RunRecord>(&obj.bytes) else {
                    continue;
                };
                let interrupted = !record.status.is_terminal();
                // A finished run's journal end is read back when someone asks (`last_seq`).
                let run = Arc::new(Run::new(record, 0));
                lock(&self.runs).insert(run.id.clone(), run.clone());
                if interrupted {
                    let next = self.journal_end(&run).await.map(|s| s + 1).unwrap_or(1);
                    let run = Arc::new(Run::new(run.snapshot(), next));
                    lock(&self.runs).insert(run.id.clone(), run.clone());
                    let failure = Failure {
                        code: codes::RUNTIME_INTERRUPTED.as_str().into(),
                        message: "the runtime stopped while this run was in progress; start it again to retry".into(),
                        retryable: true,
                    };
                    if let Err(e) = self.end_run(&run, RunStatus::Failed, Some(failure)).await {
                        tracing::warn!(run = %run.id, error = %e, "marking an interrupted run failed");
                    }
                }
            }
            match page.next_start_after {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }

    /// The run's last journal sequence number; for a finished run loaded after a restart it is
    /// read back from the workspace service the first time it is asked for.
    pub async fn last_seq(&self, run: &Run) -> u64 {
        if run.journal.is_unknown().await
            && let Some(end) = self.journal_end(run).await
        {
            run.journal.learn(end).await;
        }
        run.journal.last_seq().await
    }

    async fn journal_end(&self, run: &Run) -> Option<u64> {
        let mut from = 1;
        let mut last = 0;
        loop {
            let resp = self
                .peers
                .workspace()
                .read_journal(pb::ReadJournalRequest {
                    run_id: run.id.clone(),
                    from_seq: from,
                    page_size: 5000,
                    cell_id: run.cell.clone(),
                })
                .await
                .ok()?
                .into_inner();
            if let Some(r) = resp.records.last() {
                last = r.seq;
            }
            if resp.at_end || resp.records.is_empty() {
                return Some(last);
            }
            from = resp.next_seq;
        }
    }

    /// Creates a run: its workspace, its record and its first journal records.
    pub async fn create_run(&self, p: NewRun) -> Result<Arc<Run>, RuntimeError> {
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
        if lock(&self.runs).contains_key(&run_id) {
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
        let plan_node_policy = match &p.plan_node_policy_json {
            Some(text) if !text.trim().is_empty() => Some(
                serde_json::from_str(text)
                    .map_err(|e| RuntimeError::invalid(format!("plan node policy: {e}")))?,
            ),
            _ => None,
        };
        // Per-run tools are validated now so a bad spec fails before anything is created.
        convert::run_tools_to_entries(&p.run_tools)?;
        let run_tools = p
            .run_tools
            .iter()
            .map(|h| {
                let entries = convert::run_tools_to_entries(std::slice::from_ref(h))?;
                Ok(crate::state::RunToolHostRecord {
                    host_id: h.host_id.clone(),
                    endpoint: h
                        .endpoint
                        .as_ref()
                        .map(|e| e.url.clone())
                        .unwrap_or_default(),
                    descriptors: entries
                        .iter()
                        .filter_map(|e| e.descriptor().cloned())
                        .collect(),
                })
            })
            .collect::<Result<Vec<_>, toolplane_core::CoreError>>()?;
        let mode = if p.background {
            crate::state::RunMode::Background
        } else {
            crate::state::RunMode::Foreground
        };
        let manifest = pb::RunWorkspaceManifest {
            cell_id: cell_id.clone(),
            run_id: run_id.clone(),
            actor_id: p.actor_id.clone(),
            chat: Some(pb::ChatBinding {
                chat_id: chat_id.clone(),
                message_id: p.message_id.clone(),
            }),
            mode: if p.background {
                pb::RunMode::Background as i32
            } else {
                pb::RunMode::Foreground as i32
            },
            roots: Some(pb::WorkspaceRoots {
                visible: p.visible_roots.clone(),
                writable: p.writable_roots.clone(),
            }),
            persist_base_version: String::new(),
            message_artifact_root: String::new(),
            created_at_unix_ms: now_ms(),
            epoch: 1,
            status: pb::RunStatus::Created as i32,
        };
        let created = self
            .peers
            .workspace()
            .create_run_workspace(pb::CreateRunWorkspaceRequest {
                manifest: Some(manifest),
                epoch: 1,
            })
            .await
            .map_err(|s| status_error("creating the run workspace", s))?
            .into_inner()
            .manifest
            .unwrap_or_default();
        let roots = created.roots.unwrap_or_default();
        let record = RunRecord {
            run_id: run_id.clone(),
            cell_id: cell_id.clone(),
            actor_id: p.actor_id,
            session_id: p.session_id,
            chat_id,
            message_id: p.message_id,
            mode,
            profile_id: p.profile_id,
            status: RunStatus::Created,
            driver: p.driver.unwrap_or(Driver::Host),
            root_invocation_id: String::new(),
            active_invocation_id: String::new(),
            epoch: 1,
            created_ms: now_ms(),
            updated_ms: now_ms(),
            failure: None,
            committed: false,
            auto_published: false,
            labels: p.labels,
            run_tools,
            plan_node_policy,
            visible_roots: roots.visible,
            writable_roots: roots.writable,
            allow_paths: p.allow_paths,
            deny_paths: p.deny_paths,
            work_dir: p.work_dir,
            system_prompt: p.system_prompt,
            initial_user_message: p.initial_user_message,
        };
        let run = Arc::new(Run::new(record.clone(), 1));
        self.persist_run(&run).await?;
        lock(&self.runs).insert(run_id.clone(), run.clone());
        let mut events = vec![
            Event::new(
                "run_created",
                json!({"runId": run_id, "cellId": cell_id, "actorId": record.actor_id, "chatId": record.chat_id, "mode": mode_str(&record), "profileId": record.profile_id, "driver": driver_str(record.driver), "labels": record.labels}),
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
        if let Some(wi) = p.world_info_json.filter(|w| !w.trim().is_empty()) {
            self.peers
                .workspace()
                .put_world_info_activation(pb::PutWorldInfoActivationRequest {
                    run_id: run_id.clone(),
                    activation_json: wi,
                    epoch: 1,
                    cell_id: cell_id.clone(),
                })
                .await
                .map_err(|s| status_error("storing the world-info activation", s))?;
        }
        run.journal
            .append(&self.peers, 1, Vec::new(), events)
            .await?;
        Ok(run)
    }

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
        let resolved = self
            .peers
            .profiles()
            .resolve_profile(pb::ResolveProfileRequest {
                cell_id: record.cell_id.clone(),
                profile_id: profile_id.clone(),
                actor_id: record.actor_id.clone(),
            })
            .await
            .map_err(|s| status_error("resolving the profile", s))?
            .into_inner();
        let stored = resolved.profile.unwrap_or_default();
        let mut profile = Profile::from_json(&stored.profile_json)?;
        let platform: PlatformPolicy = parse_policy(resolved.platform_policy.as_ref())?;
        let user: UserPolicy = parse_policy(resolved.user_policy.as_ref())?;
        let mut entries: Vec<CatalogEntry> = Vec::with_capacity(resolved.tools.len());
        for listing in resolved.tools {
            // What registrations declared (category, progress-awareness) fills the consumer
            // levels of the category fallback, below anything the profile says itself.
            if let Some(id) = listing
                .descriptor
                .as_ref()
                .and_then(|d| toolplane_core::ToolId::parse(&d.id).ok())
            {
                let declared = match pb::ToolCategory::try_from(listing.category)
                    .unwrap_or(pb::ToolCategory::Unspecified)
                {
                    pb::ToolCategory::Exploration => Some(toolplane_core::Category::Exploration),
                    pb::ToolCategory::Action => Some(toolplane_core::Category::Action),
                    pb::ToolCategory::Unspecified => None,
                };
                if let Some(c) = declared {
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
            // A registered host's endpoint headers (e.g. `authorization`) go with its calls; the
            // snapshot keeps only the URL.
            if let Some((x, e)) = listing
                .external
                .as_ref()
                .and_then(|x| Some((x, x.endpoint.as_ref()?)))
            {
                self.peers
                    .set_external_headers(&x.host_id, &e.url, &e.headers);
            }
            match convert::listing_to_entry(listing) {
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
        let catalog = ToolCatalog::new(entries)?;
        let invocation_id = uuid::Uuid::new_v4().to_string();
        let snapshot = InvocationToolSnapshot::compile(CompileRequest {
            run_id: &run.id,
            invocation_id: &invocation_id,
            profile: &profile,
            layers: PolicyLayers {
                user: Some(&user),
                platform: Some(&platform),
                plan_node: record.plan_node_policy.as_ref(),
            },
            exit_policy: &exit,
            catalog: &catalog,
        })?;
        let turn = ToolTurnContract::all(&snapshot, 1, choice)?;
        let tools_json = Value::Object(toolplane_model::encode_tools(format, &turn, &snapshot)?);
        let snapshot_path = format!("input/invocations/{invocation_id}/tool_snapshot.json");
        let snapshot_bytes = serde_json::to_vec_pretty(&snapshot)
            .map_err(|e| RuntimeError::invalid(e.to_string()))?;

        self.peers
            .workspace()
            .open_invocation_workspace(pb::OpenInvocationWorkspaceRequest {
                run_id: run.id.clone(),
                invocation_id: invocation_id.clone(),
                roots: Some(pb::WorkspaceRoots {
                    visible: snapshot.workspace.visible.clone(),
                    writable: snapshot.workspace.writable.clone(),
                }),
                epoch: record.epoch,
                cell_id: record.cell_id.clone(),
                skills: Some(pb::SkillAccess {
                    visible: profile.skills.visible.clone(),
                    deny: profile.skills.deny.clone(),
                    max_read_chars_per_call: profile.skills.max_read_chars_per_call,
                    max_read_chars_per_run: profile.skills.max_read_chars_per_run,
                }),
            })
            .await
            .map_err(|s| status_error("opening the invocation workspace", s))?;

        let mut events = vec![Event::new(
            "agent_invocation_created",
            json!({"invocationId": invocation_id, "profileId": profile_id, "profileVersion": stored.version, "exitPolicy": exit, "driver": driver_str(driver), "providerFormat": format.as_str()}),
        )
        .inv(&invocation_id)];
        for o in &snapshot.omitted {
            events.push(Event::new("tool_omitted", json!({"invocationId": invocation_id, "tool": o.tool, "reason": o.reason.kind(), "detail": o.reason.describe()})).inv(&invocation_id).warn());
        }
        events.push(
            Event::new("context_assembled", json!({"invocationId": invocation_id, "snapshotPath": snapshot_path, "snapshot": snapshot.summary(), "contract": turn}))
                .inv(&invocation_id),
        );
        events.push(
            Event::new(
                "agent_invocation_started",
                json!({"invocationId": invocation_id, "round": 1}),
            )
            .inv(&invocation_id),
        );
        let snapshot_object = AuditObject {
            path: snapshot_path.clone(),
            content: snapshot_bytes,
            content_type: "application/json",
        };
        run.journal
            .append(&self.peers, record.epoch, vec![snapshot_object], events)
            .await?;

        let was_created = record.status == RunStatus::Created;
        // A delegated child works for its parent; the run's owner stays the parent.
        let takes_over = !matches!(exit, ExitPolicy::ReturnToParent { .. });
        let changes = record.root_invocation_id.is_empty()
            || takes_over
            || record.status != RunStatus::Running;
        if changes {
            run.update(|r| {
                if r.root_invocation_id.is_empty() {
                    r.root_invocation_id = invocation_id.clone();
                }
                if takes_over {
                    r.active_invocation_id = invocation_id.clone();
                }
                r.status = RunStatus::Running;
            });
            self.persist_run(run).await?;
        }
        if was_created {
            run.journal
                .append(
                    &self.peers,
                    record.epoch,
                    Vec::new(),
                    vec![Event::new(
                        "status_changed",
                        json!({"from": "created", "to": "running"}),
                    )],
                )
                .await?;
        }

        let gate = ToolRequestGate::new(&snapshot);
        let inner = InvocationInner {
            snapshot: Arc::new(snapshot),
            cycle: CycleDetector::new(profile.tools.cycle),
            profile,
            format,
            turn,
            round: 1,
            gate,
            status: InvocationStatus::Open,
            failure: None,
            ended_ms: 0,
            returned: None,
        };
        let inv = Arc::new(Invocation::new(
            invocation_id.clone(),
            run.clone(),
            driver,
            snapshot_path,
            stored.version,
            inner,
        ));
        lock(&self.invocations).insert(invocation_id.clone(), inv.clone());
        Ok(Opened {
            invocation: inv,
            tools_json,
            turn_id: turn_id(&invocation_id, 1),
        })
    }

    /// One host-driven turn: decode the provider-native calls through this turn's aliases, run them,
    /// encode the results, and advance the turn.
    pub async fn execute_host_turn(
        &self,
        inv: &Arc<Invocation>,
        turn: &str,
        format: ProviderFormat,
        calls: &Value,
        epoch: Option<u64>,
        model_response: Option<String>,
    ) -> Result<HostTurn, RuntimeError> {
        inv.touch();
        check_epoch(&inv.run, epoch)?;
        let mut inner = inv.inner.lock().await;
        if inner.status == InvocationStatus::HandedOff {
            return self.calls_after_handoff(inv, &inner, format, calls).await;
        }
        pipeline::ensure_open(&inner, &inv.id)?;
        if inv.run.is_cancelled() {
            return Err(RuntimeError::new(
                codes::RUNTIME_INVOCATION_NOT_OPEN,
                format!("the run of invocation {} was cancelled", inv.id),
            ));
        }
        let current = turn_id(&inv.id, inner.round);
        if turn != current {
            let e = RuntimeError::new(
                codes::RUNTIME_STALE_TURN,
                format!("calls are for turn `{turn}` but the current turn is `{current}`"),
            );
            return Err(e);
        }
        if format != inner.format {
            return Err(RuntimeError::invalid(format!(
                "the invocation speaks {}, the calls are {}",
                inner.format.as_str(),
                format.as_str()
            )));
        }
        if let Some(body) = model_response {
            let path = format!("model-responses/{}/round-{}.json", inv.id, inner.round);
            inv.run
                .journal
                .append(
                    &self.peers,
                    inv.run.epoch(),
                    vec![AuditObject {
                        path: path.clone(),
                        content: body.into_bytes(),
                        content_type: "application/json",
                    }],
                    vec![
                        Event::new(
                            "model_response_stored",
                            json!({"invocationId": inv.id, "round": inner.round, "path": path}),
                        )
                        .inv(&inv.id),
                    ],
                )
                .await?;
        }
        let decoded = match toolplane_model::decode_calls(format, &inner.turn, calls) {
            Ok(d) => d,
            Err(e) => {
                self.fail_invocation(
                    inv,
                    &mut inner,
                    Failure {
                        code: e.code.as_str().into(),
                        message: e.message.clone(),
                        retryable: false,
                    },
                )
                .await?;
                return Err(e.into());
            }
        };
        let calls = decoded.invocations.clone();
        let outcome = match pipeline::run_turn(self, inv, &mut inner, decoded.invocations).await {
            Ok(o) => o,
            Err(e) => {
                let retryable = e.code().class() == ErrorClass::System;
                self.fail_invocation(
                    inv,
                    &mut inner,
                    Failure {
                        code: e.code().as_str().into(),
                        message: e.0.message.clone(),
                        retryable,
                    },
                )
                .await?;
                return Err(e);
            }
        };
        let result_messages = Value::Array(toolplane_model::encode_results(
            format,
            &inner.turn,
            &calls,
            &outcome.results,
        )?);
        let end = self.after_turn(inv, &mut inner, &outcome).await?;
        let open = end.status == InvocationStatus::Open;
        let injected = if open {
            crate::agents::take_injections(self, inv).await?
        } else {
            Vec::new()
        };
        Ok(HostTurn {
            outcome,
            result_messages,
            status: end.status,
            next_turn_id: open.then(|| turn_id(&inv.id, inner.round)),
            failure: end.failure,
            handoff: end.handoff,
            injected,
        })
    }

    /// Calls sent to an invocation that handed the run off: none runs, each is answered with
    /// `agent.tool_after_finish` so the host's conversation stays well-formed.
    async fn calls_after_handoff(
        &self,
        inv: &Arc<Invocation>,
        inner: &InvocationInner,
        format: ProviderFormat,
        calls: &Value,
    ) -> Result<HostTurn, RuntimeError> {
        let decoded = toolplane_model::decode_calls(format, &inner.turn, calls)?;
        let active = inv.run.with(|r| r.active_invocation_id.clone());
        let mut outcome = TurnOutcome::default();
        let mut events = Vec::new();
        for call in &decoded.invocations {
            outcome.results.push(toolplane_core::result::AgentToolResult::error(
                call,
                codes::AGENT_TOOL_AFTER_FINISH,
                format!("you handed the run off (it is now invocation `{active}`); calls after a handoff are not run"),
            ));
            events.push(
                Event::new(
                    "tool_call_failed",
                    json!({"round": inner.round, "invocationId": inv.id, "callId": call.call_id, "toolId": call.tool_id.to_string(), "isError": true, "errorCode": codes::AGENT_TOOL_AFTER_FINISH.as_str(), "outcome": "not_sent"}),
                )
                .inv(&inv.id)
                .warn(),
            );
        }
        if !events.is_empty() {
            inv.run
                .journal
                .append(&self.peers, inv.run.epoch(), Vec::new(), events)
                .await?;
        }
        let result_messages = Value::Array(toolplane_model::encode_results(
            format,
            &inner.turn,
            &decoded.invocations,
            &outcome.results,
        )?);
        Ok(HostTurn {
            outcome,
            result_messages,
            status: InvocationStatus::HandedOff,
            next_turn_id: None,
            failure: None,
            handoff: None,
            injected: Vec::new(),
        })
    }

    /// Applies a turn's end: terminal tools end the invocation (and the run for a root), the round
    /// limit is enforced, otherwise the next turn opens.
    pub async fn after_turn(
        &self,
        inv: &Arc<Invocation>,
        inner: &mut InvocationInner,
        outcome: &TurnOutcome,
    ) -> Result<TurnEnd, RuntimeError> {
        let ended = |status, failure| TurnEnd {
            status,
            failure,
            handoff: None,
        };
        match &outcome.terminal {
            Some(Terminal::Finished) => {
                // Whatever this agent delegated and did not wait for ends with it.
                crate::agents::cancel_and_wait(&inv.run, Some(&inv.id)).await;
                self.end_invocation(inv, inner, InvocationStatus::Finished, None)
                    .await?;
                self.finish_run(&inv.run).await?;
                return Ok(ended(InvocationStatus::Finished, None));
            }
            Some(Terminal::Returned) => {
                self.end_invocation(inv, inner, InvocationStatus::Returned, None)
                    .await?;
                return Ok(ended(InvocationStatus::Returned, None));
            }
            Some(Terminal::HandedOff(request)) => {
                self.end_invocation(inv, inner, InvocationStatus::HandedOff, None)
                    .await?;
                let handoff = self.open_handoff(inv, inner, request).await?;
                return Ok(TurnEnd {
                    status: InvocationStatus::HandedOff,
                    failure: None,
                    handoff: Some(handoff),
                });
            }
            Some(Terminal::Failed(f)) => {
                self.fail_invocation(inv, inner, f.clone()).await?;
                return Ok(ended(InvocationStatus::Failed, Some(f.clone())));
            }
            None => {}
        }
        if inner.round >= inner.snapshot.max_rounds {
            let f = Failure {
                code: codes::AGENT_MAX_TOOL_ROUNDS_EXCEEDED.as_str().into(),
                message: format!(
                    "the invocation used all {} rounds without finishing",
                    inner.snapshot.max_rounds
                ),
                retryable: true,
            };
            self.fail_invocation(inv, inner, f.clone()).await?;
            return Ok(ended(InvocationStatus::Failed, Some(f)));
        }
        inner.round += 1;
        let choice = inner.turn.choice().clone();
        inner.turn = ToolTurnContract::all(&inner.snapshot, inner.round, choice)?;
        Ok(ended(InvocationStatus::Open, None))
    }

    /// Opens the handoff target's invocation: same run, same driver, the target's own snapshot.
    async fn open_handoff(
        &self,
        inv: &Arc<Invocation>,
        inner: &InvocationInner,
        request: &crate::agents::HandoffRequest,
    ) -> Result<HandedOff, RuntimeError> {
        // A runtime-driven target talks to its own model endpoint when it has one.
        let format = request
            .endpoint
            .as_ref()
            .map_or(inner.format, crate::provider::Endpoint::format);
        let opened = self
            .open_invocation(
                &inv.run,
                &request.target.id,
                ExitPolicy::Handoff {
                    from_invocation_id: inv.id.clone(),
                    depth: request.depth,
                },
                format,
                ToolChoice::Auto,
                inv.driver,
            )
            .await?;
        let mut ev = Event::new(
            "agent_handoff_accepted",
            json!({"fromInvocationId": inv.id, "invocationId": opened.invocation.id, "profileId": request.target.id, "depth": request.depth}),
        )
        .inv(&opened.invocation.id);
        ev.related.push(inv.id.clone());
        inv.run
            .journal
            .append(&self.peers, inv.run.epoch(), Vec::new(), vec![ev])
            .await?;
        Ok(HandedOff {
            opened,
            brief: request.brief.clone(),
            target: request.target.clone(),
            endpoint: request.endpoint.clone(),
        })
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

    async fn end_invocation(
        &self,
        inv: &Invocation,
        inner: &mut InvocationInner,
        status: InvocationStatus,
        failure: Option<Failure>,
    ) -> Result<(), RuntimeError> {
        inner.status = status;
        inner.failure = failure.clone();
        inner.ended_ms = now_ms();
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
        inv.run
            .journal
            .append(&self.peers, inv.run.epoch(), Vec::new(), vec![ev])
            .await?;
        let _ = self
            .peers
            .workspace()
            .close_invocation_workspace(pb::CloseInvocationWorkspaceRequest {
                run_id: inv.run.id.clone(),
                invocation_id: inv.id.clone(),
                epoch: inv.run.epoch(),
                cell_id: inv.run.cell.clone(),
            })
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
            let status = if record.committed {
                RunStatus::PartialSuccess
            } else {
                RunStatus::Failed
            };
            self.end_run(&inv.run, status, Some(failure)).await?;
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
        inv.run
            .journal
            .append(
                &self.peers,
                inv.run.epoch(),
                Vec::new(),
                vec![
                    Event::new(
                        "agent_invocation_closed",
                        json!({"invocationId": inv.id, "reason": reason}),
                    )
                    .inv(&inv.id),
                ],
            )
            .await?;
        Ok(())
    }

    /// The successful end of a run: `persist/` is promoted, the workspace sealed, `run_completed`.
    pub async fn finish_run(&self, run: &Run) -> Result<(), RuntimeError> {
        let record = run.snapshot();
        run.journal
            .append(
                &self.peers,
                record.epoch,
                Vec::new(),
                vec![
                    Event::new("agent_loop_finished", json!({"reason": "finish"})),
                    Event::new("commit_started", json!({})),
                ],
            )
            .await?;
        let promoted = self
            .peers
            .workspace()
            .promote_persist(pb::PromotePersistRequest {
                run_id: run.id.clone(),
                epoch: record.epoch,
                cell_id: record.cell_id.clone(),
            })
            .await;
        match promoted {
            Ok(resp) => {
                let r = resp.into_inner();
                run.journal.append(&self.peers, record.epoch, Vec::new(), vec![Event::new("persistent_changes_committed", json!({"persistVersion": r.persist_version, "changedPaths": r.changed_paths}))]).await?;
                self.end_run(run, RunStatus::Completed, None).await
            }
            Err(status) => {
                let failure = Failure {
                    code: crate::error::status_code_prefix(&status)
                        .unwrap_or("workspace.persist_conflict")
                        .into(),
                    message: status.message().into(),
                    retryable: true,
                };
                run.journal
                    .append(
                        &self.peers,
                        record.epoch,
                        Vec::new(),
                        vec![
                            Event::new(
                                "persistent_changes_commit_failed",
                                json!({"failure": failure}),
                            )
                            .warn(),
                        ],
                    )
                    .await?;
                let status = if record.committed {
                    RunStatus::PartialSuccess
                } else {
                    RunStatus::Failed
                };
                self.end_run(run, status, Some(failure)).await
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
        // Delegated tasks still running stop at their next step.
        run.agents.cancel(None);
        let record = before.clone();
        let kind = match status {
            RunStatus::Completed => "run_completed",
            RunStatus::PartialSuccess => "run_partial_success",
            RunStatus::Cancelled => "run_cancelled",
            _ => "run_failed",
        };
        let mut ev = Event::new(
            kind,
            json!({"status": status.as_str(), "failure": failure, "userRetryable": failure.as_ref().is_some_and(|f| f.retryable), "committed": record.committed}),
        );
        if status == RunStatus::Failed {
            ev = ev.error();
        } else if status == RunStatus::PartialSuccess {
            ev = ev.warn();
        }
        let journalled = run
            .journal
            .append(
                &self.peers,
                record.epoch,
                Vec::new(),
                vec![
                    Event::new(
                        "status_changed",
                        json!({"from": before.status.as_str(), "to": status.as_str()}),
                    ),
                    ev,
                ],
            )
            .await;
        // The status turns terminal only once the journal holds the end: whoever sees a finished
        // run can read its whole journal.
        let record = run.update(|r| {
            r.status = status;
            r.failure = failure.clone();
        });
        self.persist_run(run).await?;
        let pb_status = match status {
            RunStatus::Completed => pb::RunStatus::Completed,
            RunStatus::PartialSuccess => pb::RunStatus::PartialSuccess,
            RunStatus::Cancelled => pb::RunStatus::Cancelled,
            _ => pb::RunStatus::Failed,
        };
        let _ = self
            .peers
            .workspace()
            .finish_run_workspace(pb::FinishRunWorkspaceRequest {
                run_id: run.id.clone(),
                status: pb_status as i32,
                epoch: record.epoch,
                cell_id: record.cell_id.clone(),
            })
            .await;
        // Open invocations of a finished run end with it.
        for inv in self.invocations_of(&run.id) {
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
        journalled.map(|_| ())
    }

    /// Cooperative cancel: the loop and open invocations stop at their next step; executors see the
    /// cancelled run through their deadlines.
    pub async fn cancel_run(
        self: &Arc<Self>,
        run: &Arc<Run>,
        reason: &str,
    ) -> Result<(), RuntimeError> {
        let record = run.snapshot();
        if record.status.is_terminal() {
            return Ok(());
        }
        run.journal
            .append(
                &self.peers,
                record.epoch,
                Vec::new(),
                vec![Event::new(
                    "run_cancel_requested",
                    json!({"reason": reason}),
                )],
            )
            .await?;
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
        let open: Vec<Arc<Invocation>> = lock(&self.invocations)
            .values()
            .filter(|i| i.run.id == run.id)
            .cloned()
            .collect();
        // On a task of its own: a caller that stops waiting (a dropped request, a deadline) must
        // not leave a run cancelled but never ended.
        let rt = Arc::clone(self);
        let ending = Arc::clone(run);
        let ended = tokio::spawn(async move {
            crate::agents::cancel_and_wait(&ending, None).await;
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
        let idle: Vec<Arc<Invocation>> = lock(&self.invocations)
            .values()
            .filter(|i| {
                i.driver == Driver::Host && i.idle_for() >= self.cfg.invocation_idle_timeout
            })
            .cloned()
            .collect();
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

    /// The decode policy for a provider format (Gemini synthesises missing call ids).
    pub fn call_id_policy(format: ProviderFormat) -> CallIdPolicy {
        if format == ProviderFormat::Gemini {
            CallIdPolicy::SynthesiseMissing
        } else {
            CallIdPolicy::Required
        }
    }
}

fn parse_policy<T: serde::de::DeserializeOwned + Default>(
    doc: Option<&pb::PolicyDocument>,
) -> Result<T, RuntimeError> {
    match doc.map(|d| d.policy_json.trim()).filter(|t| !t.is_empty()) {
        Some(text) => serde_json::from_str(text)
            .map_err(|e| RuntimeError::dependency(format!("a stored policy is unreadable: {e}"))),
        None => Ok(T::default()),
    }
}

fn check_epoch(run: &Run, epoch: Option<u64>) -> Result<(), RuntimeError> {
    match epoch {
        Some(e) if e != 0 && e < run.epoch() => Err(RuntimeError::new(
            codes::RUNTIME_STALE_EPOCH,
            format!("epoch {e} is older than the run's epoch {}", run.epoch()),
        )),
        _ => Ok(()),
    }
}

/// A peer's refusal as a runtime error: its own code when it has one and is not a system failure.
pub fn status_error(what: &str, status: tonic::Status) -> RuntimeError {
    match status.code() {
        tonic::Code::NotFound => RuntimeError::not_found(format!("{what}: {}", status.message())),
        tonic::Code::InvalidArgument
        | tonic::Code::FailedPrecondition
        | tonic::Code::AlreadyExists => {
            RuntimeError::invalid(format!("{what}: {}", status.message()))
        }
        _ => RuntimeError::dependency(format!("{what}: {}", status.message())),
    }
}

fn mode_str(r: &RunRecord) -> &'static str {
    match r.mode {
        crate::state::RunMode::Foreground => "foreground",
        crate::state::RunMode::Background => "background",
    }
}

pub fn driver_str(d: Driver) -> &'static str {
    match d {
        Driver::Host => "host",
        Driver::Runtime => "runtime",
    }
}
