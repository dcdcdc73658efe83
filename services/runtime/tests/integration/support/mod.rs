//! The runtime alone: its ports implemented in memory — a catalog of profiles and the builtin
//! tools, a workspace that keeps the journal, audit objects, files and chat commits, and tool
//! hosts that run the workspace's file tools — so that tests drive the real runtime without a
//! socket and read what a user would see: the journal, the files, the chat message.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolplane_core::builtin;
use toolplane_core::catalog::{CatalogEntry, ToolOrigin};
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolChoice;
use toolplane_model::ProviderFormat;
use toolplane_runtime::context::ports::{
    Catalog, CommittedMessage, CreatedWorkspace, ExecuteCall, Executed, InvocationWorkspace,
    JournalPage, ListedTool, ModelCall, Models, NewRunWorkspace, Outcome, PortError, PortErrorKind,
    ProfilePage, Promoted, RecordStream, ResolvedProfile, RunScope, StoredLevel, StoredProfile,
    StoredRecord, ToolHost, ToolHosts, Workspace,
};
use toolplane_runtime::context::{Ports, Runtime};
use toolplane_runtime::lifecycle::{NewRun, Opened};
use toolplane_runtime::model::provider::{CallError, Endpoint, ModelClient};
use toolplane_runtime::pipeline::HostTurn;
use toolplane_runtime::runloop::{self, RunStart};
use toolplane_runtime::state::{
    Approval, ApprovalState, AuditObject, Driver, Invocation, JournalAppend, Level, Run, RunStatus,
};
use toolplane_runtime::{RuntimeConfig, RuntimeError};
use toolplane_store::{MemoryStore, StoreOptions};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A workspace path whose tool calls take a minute to answer.
pub const SLOW_PATH: &str = "output/slow.md";

/// The peers of one runtime, in memory.
#[derive(Debug, Default)]
pub struct Memory {
    profiles: Mutex<BTreeMap<String, String>>,
    journals: Mutex<HashMap<String, Vec<StoredRecord>>>,
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    files: Mutex<BTreeMap<String, String>>,
    messages: Mutex<HashMap<String, String>>,
    executed: Mutex<Vec<String>>,
    /// Tools of other sources (MCP servers, external hosts), offered after the builtins; each
    /// answers with its structured result, when one is set.
    others: Mutex<Vec<(ToolOrigin, ToolDescriptor, Option<Value>)>>,
    sealed: Mutex<HashMap<String, RunStatus>>,
    /// How many model calls fail (retryably) before the models answer.
    model_failures: Arc<Mutex<u32>>,
    /// The cell's platform policy, as the catalog would return it.
    platform_policy: Mutex<Option<String>>,
    /// Run leases as the workspace keeps them (docs/workspace.md, "Epochs and run leases"): by
    /// run, the holder, the epoch and whether the lease is still live.
    leases: Mutex<HashMap<String, (String, u64, bool)>>,
    /// The epoch of the append that stored each journal record, by run.
    epochs: Mutex<HashMap<String, Vec<u64>>>,
    /// Whether the mcp-proxy refuses every MCP call as stale (`mcp.stale_epoch`): another
    /// runtime's epoch of the run was seen.
    mcp_stale: Mutex<bool>,
    /// How long creating a run's workspace takes (a loaded shared store).
    create_delay: Mutex<Duration>,
}

impl Memory {
    /// Offers `descriptor` from `origin` (an MCP server or an external host), answering with
    /// `structured`.
    pub fn add_tool(
        &self,
        origin: ToolOrigin,
        descriptor: ToolDescriptor,
        structured: Option<Value>,
    ) {
        lock(&self.others).push((origin, descriptor, structured));
    }

    /// Makes the mcp-proxy refuse every MCP call from now on as `mcp.stale_epoch`.
    pub fn refuse_mcp_calls_as_stale(&self) {
        *lock(&self.mcp_stale) = true;
    }

    /// Sets the cell's platform policy (JSON).
    pub fn set_platform_policy(&self, policy: Value) {
        *lock(&self.platform_policy) = Some(policy.to_string());
    }

    pub fn put_profile(&self, profile: Value) {
        let id = profile["id"].as_str().unwrap().to_owned();
        lock(&self.profiles).insert(id, profile.to_string());
    }

    /// The kinds of the run's journal records, in order.
    pub fn kinds(&self, run: &str) -> Vec<String> {
        self.journal(run).into_iter().map(|r| r.kind).collect()
    }

    pub fn journal(&self, run: &str) -> Vec<StoredRecord> {
        lock(&self.journals).get(run).cloned().unwrap_or_default()
    }

    /// The payloads of the run's records of `kind`.
    pub fn payloads(&self, run: &str, kind: &str) -> Vec<Value> {
        self.journal(run)
            .into_iter()
            .filter(|r| r.kind == kind)
            .map(|r| serde_json::from_str(&r.payload_json).unwrap())
            .collect()
    }

    pub fn file(&self, path: &str) -> Option<String> {
        lock(&self.files).get(path).cloned()
    }

    pub fn object(&self, path: &str) -> Option<Vec<u8>> {
        lock(&self.objects).get(path).cloned()
    }

    /// The run's chat message as committed.
    pub fn message(&self, run: &str) -> Option<String> {
        lock(&self.messages).get(run).cloned()
    }

    /// The run's workspace as sealed at its end.
    pub fn sealed(&self, run: &str) -> Option<RunStatus> {
        lock(&self.sealed).get(run).copied()
    }

    /// The next `n` model calls fail with a retryable 503.
    pub fn fail_model_calls(&self, n: u32) {
        *lock(&self.model_failures) = n;
    }

    /// The tools the hosts ran, in order.
    pub fn executed(&self) -> Vec<String> {
        lock(&self.executed).clone()
    }
}

fn not_found(what: &str) -> PortError {
    PortError::new(
        PortErrorKind::NotFound,
        format!("catalog.not_found: {what}"),
    )
}

#[async_trait]
impl Catalog for Memory {
    async fn resolve_profile(
        &self,
        _cell_id: &str,
        profile_id: &str,
        _actor_id: &str,
    ) -> Result<ResolvedProfile, PortError> {
        let profile = self.get_profile("", profile_id).await?;
        let mut tools: Vec<ListedTool> = builtin::descriptors()
            .into_iter()
            .map(|d| ListedTool {
                id: Some(d.id().clone()),
                category: None,
                progress_aware: false,
                entry: CatalogEntry::usable(ToolOrigin::Builtin, d),
            })
            .collect();
        for (origin, d, _) in lock(&self.others).iter() {
            tools.push(ListedTool {
                id: Some(d.id().clone()),
                category: None,
                progress_aware: false,
                entry: CatalogEntry::usable(origin.clone(), d.clone()),
            });
        }
        Ok(ResolvedProfile {
            profile,
            platform_policy_json: lock(&self.platform_policy).clone(),
            user_policy_json: None,
            tools,
        })
    }

    async fn get_profile(
        &self,
        _cell_id: &str,
        profile_id: &str,
    ) -> Result<StoredProfile, PortError> {
        let json = lock(&self.profiles)
            .get(profile_id)
            .cloned()
            .ok_or_else(|| not_found(profile_id))?;
        Ok(StoredProfile {
            profile_json: json,
            version: 1,
        })
    }

    async fn list_profiles(
        &self,
        _cell_id: &str,
        _page_size: u32,
        _page_token: &str,
    ) -> Result<ProfilePage, PortError> {
        Ok(ProfilePage {
            profiles: lock(&self.profiles)
                .values()
                .map(|json| StoredProfile {
                    profile_json: json.clone(),
                    version: 1,
                })
                .collect(),
            next_page_token: String::new(),
        })
    }
}

fn stored(r: &toolplane_runtime::state::Record) -> StoredRecord {
    StoredRecord {
        seq: r.seq,
        id: r.id.clone(),
        run_id: r.run_id.clone(),
        timestamp_ms: r.timestamp_ms,
        level: match r.level {
            Level::Info => StoredLevel::Info,
            Level::Warn => StoredLevel::Warn,
            Level::Error => StoredLevel::Error,
        },
        kind: r.kind.to_owned(),
        payload_json: r.payload.to_string(),
        caused_by: r.caused_by.clone(),
        invocation_id: r.invocation_id.clone().unwrap_or_default(),
        related: r.related.clone(),
    }
}

impl Memory {
    /// Makes creating a run's workspace take `delay`.
    pub fn slow_creation(&self, delay: Duration) {
        *lock(&self.create_delay) = delay;
    }

    /// Ends run `run`'s lease as if its TTL passed without a renewal (its holder died).
    pub fn expire_lease(&self, run: &str) {
        if let Some(l) = lock(&self.leases).get_mut(run) {
            l.2 = false;
        }
    }

    /// Puts a file into the workspace, as an earlier run left it.
    pub fn put_file(&self, path: &str, content: &str) {
        lock(&self.files).insert(path.to_owned(), content.to_owned());
    }

    /// The holder and epoch of run `run`'s lease, live or not.
    pub fn lease(&self, run: &str) -> Option<(String, u64)> {
        lock(&self.leases).get(run).map(|(h, e, _)| (h.clone(), *e))
    }

    /// The epoch of each journal record of `run`, in journal order.
    pub fn epochs(&self, run: &str) -> Vec<u64> {
        lock(&self.epochs).get(run).cloned().unwrap_or_default()
    }

    fn stale(&self, run: &str, epoch: u64) -> Option<PortError> {
        let leases = lock(&self.leases);
        let (_, newest, _) = leases.get(run)?;
        (epoch < *newest).then(|| {
            PortError::new(
                PortErrorKind::FailedPrecondition,
                format!("workspace.stale_epoch: epoch {epoch} is older than {newest}"),
            )
        })
    }

    fn put_object(&self, object: AuditObject) -> Result<(), PortError> {
        let mut objects = lock(&self.objects);
        if objects.contains_key(&object.path) {
            return Err(PortError::new(
                PortErrorKind::AlreadyExists,
                format!("workspace.audit_exists: {}", object.path),
            ));
        }
        objects.insert(object.path, object.content);
        Ok(())
    }
}

#[async_trait]
impl Workspace for Memory {
    async fn create_run_workspace(
        &self,
        ws: NewRunWorkspace,
    ) -> Result<CreatedWorkspace, PortError> {
        let delay = *lock(&self.create_delay);
        tokio::time::sleep(delay).await;
        Ok(CreatedWorkspace {
            visible_roots: ws.visible_roots,
            writable_roots: ws.writable_roots,
            persist_base_version: String::new(),
        })
    }

    async fn put_world_info_activation(
        &self,
        _run: &RunScope,
        _activation_json: String,
    ) -> Result<(), PortError> {
        Ok(())
    }

    async fn open_invocation_workspace(&self, _ws: InvocationWorkspace) -> Result<(), PortError> {
        Ok(())
    }

    async fn close_invocation_workspace(
        &self,
        _run: &RunScope,
        _invocation_id: &str,
    ) -> Result<(), PortError> {
        Ok(())
    }

    async fn promote_persist(&self, _run: &RunScope) -> Result<Promoted, PortError> {
        Ok(Promoted::default())
    }

    async fn finish_run_workspace(
        &self,
        run: &RunScope,
        status: RunStatus,
    ) -> Result<(), PortError> {
        lock(&self.sealed).insert(run.run_id.clone(), status);
        Ok(())
    }

    async fn commit_run_message(
        &self,
        run: &RunScope,
        source_path: &str,
        append: bool,
    ) -> Result<CommittedMessage, PortError> {
        let Some(text) = self.file(source_path) else {
            return Err(PortError::new(
                PortErrorKind::FailedPrecondition,
                format!("workspace.not_found: no file {source_path}"),
            ));
        };
        let mut messages = lock(&self.messages);
        let message = messages.entry(run.run_id.clone()).or_default();
        if append {
            message.push_str(&text);
        } else {
            *message = text;
        }
        Ok(CommittedMessage {
            message_id: format!("{}:answer", run.run_id),
            content: message.clone(),
        })
    }

    async fn append_journal(&self, group: JournalAppend) -> Result<(), PortError> {
        if let Some(e) = self.stale(&group.run_id, group.epoch) {
            return Err(e);
        }
        lock(&self.epochs)
            .entry(group.run_id.clone())
            .or_default()
            .extend(group.records.iter().map(|_| group.epoch));
        let mut journals = lock(&self.journals);
        let journal = journals.entry(group.run_id.clone()).or_default();
        let expected = journal.last().map_or(1, |r| r.seq + 1);
        if group.expected_seq != expected {
            return Err(PortError::new(
                PortErrorKind::FailedPrecondition,
                format!("workspace.journal_conflict: expected {expected}"),
            ));
        }
        for o in group.objects {
            self.put_object(o)?;
        }
        journal.extend(group.records.iter().map(stored));
        Ok(())
    }

    async fn put_audit_object(
        &self,
        _run: &RunScope,
        object: AuditObject,
    ) -> Result<(), PortError> {
        self.put_object(object)
    }

    async fn get_object(&self, _run: &RunScope, path: &str) -> Result<Option<Vec<u8>>, PortError> {
        Ok(self.object(path))
    }

    async fn acquire_run_lease(
        &self,
        run: &RunScope,
        holder: &str,
        _ttl_ms: u64,
    ) -> Result<u64, PortError> {
        let mut leases = lock(&self.leases);
        let epoch = match leases.get(&run.run_id) {
            Some((h, e, true)) => {
                return Err(PortError::new(
                    PortErrorKind::FailedPrecondition,
                    format!("workspace.lease_held: leased to {h} at epoch {e}"),
                ));
            }
            Some((_, e, false)) => e + 1,
            None => 1,
        };
        leases.insert(run.run_id.clone(), (holder.to_owned(), epoch, true));
        Ok(epoch)
    }

    async fn renew_run_lease(
        &self,
        run: &RunScope,
        holder: &str,
        _ttl_ms: u64,
    ) -> Result<(), PortError> {
        match lock(&self.leases).get_mut(&run.run_id) {
            Some((h, e, live)) if h == holder && *e == run.epoch => {
                *live = true;
                Ok(())
            }
            _ => Err(PortError::new(
                PortErrorKind::FailedPrecondition,
                "workspace.stale_epoch: the lease moved on",
            )),
        }
    }

    async fn release_run_lease(&self, run: &RunScope, holder: &str) -> Result<(), PortError> {
        if let Some((h, e, live)) = lock(&self.leases).get_mut(&run.run_id)
            && h == holder
            && *e == run.epoch
        {
            *live = false;
        }
        Ok(())
    }

    async fn read_journal(
        &self,
        run_id: &str,
        _cell_id: &str,
        from_seq: u64,
        _page_size: u32,
    ) -> Result<JournalPage, PortError> {
        let records: Vec<StoredRecord> = self
            .journal(run_id)
            .into_iter()
            .filter(|r| r.seq >= from_seq)
            .collect();
        let next_seq = records.last().map_or(from_seq, |r| r.seq + 1);
        Ok(JournalPage {
            records,
            next_seq,
            at_end: true,
        })
    }

    async fn follow_journal(
        &self,
        run_id: &str,
        cell_id: &str,
        from_seq: u64,
    ) -> Result<RecordStream, PortError> {
        let page = self.read_journal(run_id, cell_id, from_seq, 0).await?;
        Ok(Box::pin(futures::stream::iter(
            page.records.into_iter().map(|r| Ok(Some(r))),
        )))
    }
}

#[async_trait]
impl ToolHosts for Memory {
    async fn execute(
        &self,
        host: ToolHost<'_>,
        call: ExecuteCall<'_>,
    ) -> Result<Result<Executed, PortError>, RuntimeError> {
        let c = call.call;
        // A call of an older epoch than the run's lease is refused, as the workspace does.
        if let Some(e) = self.stale(&call.context.run_id, call.context.epoch) {
            return Ok(Err(e));
        }
        lock(&self.executed).push(c.tool_id.to_string());
        if host == ToolHost::McpProxy && *lock(&self.mcp_stale) {
            return Ok(Err(PortError::new(
                PortErrorKind::FailedPrecondition,
                format!(
                    "mcp.stale_epoch: epoch {} of run {} is older than the newest epoch {}",
                    call.context.epoch,
                    call.context.run_id,
                    call.context.epoch + 1
                ),
            )));
        }
        if host != ToolHost::Workspace {
            let Some(structured) = lock(&self.others)
                .iter()
                .find(|(_, d, _)| d.id() == &c.tool_id)
                .map(|(_, _, s)| s.clone())
            else {
                return Ok(Err(PortError::new(
                    PortErrorKind::Unavailable,
                    "no such host",
                )));
            };
            let mut result = AgentToolResult::ok(c, "external ok");
            if let Some(s) = structured {
                result = result.with_structured(s);
            }
            return Ok(Ok(Executed {
                result: Ok(result),
                outcome: Outcome::Known,
                raw: None,
            }));
        }
        let args = c.arguments.as_object().cloned().unwrap_or_default();
        let path = args.get("path").and_then(Value::as_str).unwrap_or("");
        // A workspace tool that takes a minute, as a search over a huge tree may.
        if path == SLOW_PATH {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        let result = if c.tool_id.is_builtin(builtin::WORKSPACE_WRITE_FILE) {
            let content = args.get("content").and_then(Value::as_str).unwrap_or("");
            let mut files = lock(&self.files);
            let file = files.entry(path.to_owned()).or_default();
            if args.get("mode").and_then(Value::as_str) == Some("append") {
                file.push_str(content);
            } else {
                *file = content.to_owned();
            }
            AgentToolResult::ok(c, format!("wrote {path}"))
        } else if c.tool_id.is_builtin(builtin::WORKSPACE_READ_FILE) {
            match self.file(path) {
                Some(text) => AgentToolResult::ok(c, text),
                None => AgentToolResult::error(
                    c,
                    toolplane_core::error::TOOL_INVALID_ARGUMENTS,
                    format!("no file {path}"),
                ),
            }
        } else {
            AgentToolResult::ok(c, "done")
        };
        Ok(Ok(Executed {
            result: Ok(result),
            outcome: Outcome::Known,
            raw: None,
        }))
    }
}

/// The real model client (scripted endpoints run in-process) behind calls that may be made to fail.
#[derive(Debug)]
struct Flaky {
    client: ModelClient,
    failures: Arc<Mutex<u32>>,
}

#[async_trait]
impl ModelCall for Flaky {
    fn endpoint(&self) -> &Endpoint {
        self.client.endpoint()
    }

    fn resumable_endpoint(&self) -> Endpoint {
        self.client.resumable_endpoint()
    }

    async fn call(
        &self,
        system: &str,
        history: &[Value],
        tools: &serde_json::Map<String, Value>,
        round: u32,
    ) -> Result<String, CallError> {
        {
            let mut left = lock(&self.failures);
            if *left > 0 {
                *left -= 1;
                return Err(CallError {
                    retryable: true,
                    status: Some(503),
                    message: "the model is overloaded".into(),
                    retry_after: None,
                });
            }
        }
        self.client.call(system, history, tools, round).await
    }
}

impl Models for Memory {
    fn client(&self, _cell: &str, endpoint: Endpoint) -> Result<Box<dyn ModelCall>, String> {
        Ok(Box::new(Flaky {
            client: ModelClient::new(endpoint, &Default::default())?,
            failures: Arc::clone(&self.model_failures),
        }))
    }
}

/// A runtime over memory, with retries and awaits short enough for tests.
pub struct Alone {
    pub rt: Arc<Runtime>,
    pub mem: Arc<Memory>,
    pub store: Arc<MemoryStore>,
    pub cfg: RuntimeConfig,
}

pub async fn alone() -> Alone {
    alone_with(|_| {}).await
}

/// A runtime over memory whose configuration `change` adjusts.
pub async fn alone_with(change: impl Fn(&mut RuntimeConfig)) -> Alone {
    let mem = Arc::new(Memory::default());
    let store = Arc::new(MemoryStore::new(StoreOptions::default()));
    let mut cfg = test_config();
    change(&mut cfg);
    Alone {
        rt: over_with(&mem, &store, cfg.clone()).await,
        mem,
        store,
        cfg,
    }
}

fn test_config() -> RuntimeConfig {
    RuntimeConfig {
        model_retry_backoff: Duration::from_millis(1),
        agent_await_timeout: Duration::from_secs(5),
        ..RuntimeConfig::default()
    }
}

/// A runtime over these peers and this store, as a process starting on them would be.
async fn over(mem: &Arc<Memory>, store: &Arc<MemoryStore>) -> Arc<Runtime> {
    over_with(mem, store, test_config()).await
}

async fn over_with(
    mem: &Arc<Memory>,
    store: &Arc<MemoryStore>,
    cfg: RuntimeConfig,
) -> Arc<Runtime> {
    let ports = Ports {
        catalog: mem.clone(),
        workspace: mem.clone(),
        tools: mem.clone(),
        models: mem.clone(),
    };
    Runtime::assemble(cfg, ports, store.clone()).await
}

/// A profile that works in the workspace and may delegate to and hand off to anyone.
pub fn agent(id: &str, extra: Value) -> Value {
    let mut p = json!({
        "id": id,
        "tools": {"allow": ["builtin:workspace.*", "builtin:agent.*", "builtin:dice.roll"], "maxRounds": 8},
        "delegation": {"canDelegate": true, "canHandoff": true, "targets": ["*"], "callable": true, "allowAsHandoffTarget": true}
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            p[k] = v;
        }
    }
    p
}

/// A scripted model endpoint that plays `turns` (OpenAI assistant messages).
pub fn scripted(turns: Value) -> Endpoint {
    Endpoint {
        kind: toolplane_core::profile::ModelKind::Scripted,
        format: toolplane_model::ProviderFormat::OpenAiChat,
        context_budget_tokens: None,
        base_url: String::new(),
        model: "script".into(),
        api_key: None,
        api_key_env: None,
        timeout: Duration::from_secs(10),
        max_retries: 0,
        max_output_tokens: None,
        temperature: None,
        extra_body: serde_json::Map::new(),
        headers: Vec::new(),
        script: Some(turns.as_array().unwrap().clone()),
    }
}

/// A runtime-driven run of the `writer` profile in `output/`, asked "What is the answer?".
pub fn writer_run(run_id: &str) -> NewRun {
    NewRun {
        run_id: run_id.into(),
        profile_id: "writer".into(),
        visible_roots: vec!["output/".into()],
        writable_roots: vec!["output/".into()],
        initial_user_message: "What is the answer?".into(),
        ..NewRun::default()
    }
}

/// One scripted assistant turn calling `calls` (`(alias, arguments)`).
pub fn turn(calls: &[(&str, Value)]) -> Value {
    json!({"tool_calls": calls.iter().map(|(name, args)| json!({"function": {"name": name, "arguments": args}})).collect::<Vec<_>>()})
}

impl Alone {
    /// A new runtime process on the same store and peers (the old one is gone).
    pub async fn restart(&self) -> Arc<Runtime> {
        over_with(&self.mem, &self.store, self.cfg.clone()).await
    }

    /// A host-driven run of `profile` with its root invocation open (OpenAI chat format).
    pub async fn host_run(&self, run_id: &str, profile: &str) -> Opened {
        let run = self
            .rt
            .create_run(NewRun {
                run_id: run_id.into(),
                profile_id: profile.into(),
                visible_roots: vec!["output/".into()],
                writable_roots: vec!["output/".into()],
                driver: Some(Driver::Host),
                ..NewRun::default()
            })
            .await
            .unwrap();
        self.rt
            .open_invocation(
                &run,
                "",
                ExitPolicy::Root,
                ProviderFormat::OpenAiChat,
                ToolChoice::Auto,
                Driver::Host,
            )
            .await
            .unwrap()
    }

    /// Starts a runtime-driven run on `model`, with its profile's round limit.
    pub async fn start(&self, run: NewRun, model: Endpoint) -> Arc<Run> {
        let start = RunStart {
            run,
            endpoint: Some(model),
            max_rounds: 0,
        };
        runloop::start(self.rt.clone(), start).await.unwrap()
    }

    /// The first host-driven turn of an opened invocation: see [`host_turn`].
    pub async fn first_turn(
        &self,
        opened: &Opened,
        calls: &Value,
    ) -> Result<HostTurn, RuntimeError> {
        host_turn(&self.rt, &opened.invocation, &opened.turn_id, calls).await
    }
}

/// One host-driven turn of OpenAI chat `calls` for `turn`, without an epoch, a stored model
/// response or a change of tool choice: what most tests send.
pub async fn host_turn(
    rt: &Runtime,
    inv: &Arc<Invocation>,
    turn: &str,
    calls: &Value,
) -> Result<HostTurn, RuntimeError> {
    rt.execute_host_turn(inv, turn, ProviderFormat::OpenAiChat, calls, None, None)
        .await
}

/// OpenAI `tool_calls` as a host sends them: `(call id, alias, arguments)`.
pub fn calls(list: &[(&str, &str, Value)]) -> Value {
    json!({"role": "assistant", "tool_calls": list.iter().map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect::<Vec<_>>()})
}

/// Waits (at most two seconds) until `done` holds.
pub async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..400 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

/// The approvals of `run` still waiting for a decision.
pub fn pending(a: &Alone, run: &str) -> Vec<Approval> {
    a.rt.approvals
        .list(|x| x.run_id == run && x.state == ApprovalState::Pending)
}

/// A writer whose file writes need approval (its profile asks).
pub fn held_writer(a: &Alone) {
    a.mem.put_profile(agent(
        "writer",
        json!({"tools": {"allow": ["builtin:workspace.*"], "approvalRequired": ["builtin:workspace.write_file"], "maxRounds": 8}}),
    ));
}

/// A scripted model's three turns: write `output/main.md`, commit, finish.
pub fn write_commit_finish() -> Value {
    json!([
        turn(&[(
            "workspace_write_file",
            json!({"path": "output/main.md", "content": "The answer is 42."})
        )]),
        turn(&[("workspace_commit", json!({}))]),
        turn(&[("workspace_finish", json!({"summary": "done"}))]),
    ])
}
