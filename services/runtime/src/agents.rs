//! Agents calling agents (FEATURES A1–A5; seed 000 §7.1): `agent.list`, `agent.delegate`,
//! `agent.await`, `task.return`, `agent.handoff` and sub-agents offered as tools.
//!
//! A delegated task is a return-mode child invocation of the target profile: its own snapshot
//! (commit, finish and delegation removed, `task.return` injected), an empty read-state, the
//! target's budgets, driven by the runtime on the target's model endpoint. Every run keeps a
//! [`RunAgents`] book of its tasks; the run's scheduler starts each task in the background, at
//! most `delegation.maxConcurrentChildren` of one parent at a time, so the parent never blocks on
//! `agent.delegate` — host-driven or runtime-driven alike. A finished task's result reaches the
//! parent once: through `agent.await`, or injected into the parent's next model request
//! (runtime-driven) or next `ExecuteToolCalls` response (host-driven).
//!
//! A child's snapshot never holds the tools it must not use (commit, finish, `agent.*`, sub-agent
//! tools: the core's compiler removes them), so the handlers here do not check for children.
//!
//! Owns the task book and the policy checks between a caller and a target; the turn pipeline and
//! the loop own everything else (journal, audit, the child's model calls).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, Semaphore, watch};
use toolplane_core::Profile;
use toolplane_core::error::{
    self as codes, AGENT_CHILDREN_UNFINISHED, AGENT_HANDOFF_DEPTH_EXCEEDED, AGENT_NO_MODEL,
    AGENT_NOT_ALLOWED, AGENT_TASK_LIMIT, AGENT_UNAVAILABLE, AGENT_UNKNOWN_TASK, ErrorClass,
    ErrorCode, TOOL_INVALID_ARGUMENTS,
};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolChoice;
use toolplane_proto::v1 as pb;

use crate::control::Effect;
use crate::error::RuntimeError;
use crate::journal::{AuditObject, Event, now_ms};
use crate::pipeline::Dispatched;
use crate::provider::{Endpoint, ModelClient, user_message};
use crate::runloop::{self, LoopEnd};
use crate::runtime::Runtime;
use crate::state::{Driver, Failure, Invocation, InvocationInner, Run};

/// Most delegated tasks one run may hold.
pub const MAX_TASKS_PER_RUN: usize = 1000;
/// Longest task brief or handoff brief.
pub const MAX_BRIEF_BYTES: usize = 64 * 1024;
/// Longest `task.return` summary.
pub const MAX_SUMMARY_BYTES: usize = 256 * 1024;
/// Most profiles `agent.list` looks at.
const MAX_LISTED_PROFILES: usize = 1000;
/// How long a finishing or cancelled parent waits for its children to wind down.
const CHILD_WIND_DOWN: Duration = Duration::from_secs(5);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lifecycle of a delegated task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
    pub fn pb(self) -> i32 {
        (match self {
            TaskStatus::Queued => pb::TaskStatus::Queued,
            TaskStatus::Running => pb::TaskStatus::Running,
            TaskStatus::Completed => pb::TaskStatus::Completed,
            TaskStatus::Failed => pb::TaskStatus::Failed,
            TaskStatus::Cancelled => pb::TaskStatus::Cancelled,
        }) as i32
    }
}

/// What a child handed back with `task.return`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    pub summary: String,
    pub artifacts: Vec<String>,
    /// `completed` or `failed`, as the child reported it.
    pub status: String,
    /// `agent-results/<child invocation>.json`.
    pub result_path: String,
    /// `summaries/<child invocation>-result.md`.
    pub summary_path: String,
}

/// One delegated task.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub task_id: String,
    pub parent_invocation_id: String,
    /// Empty until the child invocation is opened.
    pub child_invocation_id: String,
    pub profile_id: String,
    pub brief: String,
    pub status: TaskStatus,
    pub result: Option<TaskResult>,
    pub failure: Option<Failure>,
    pub created_ms: i64,
    pub ended_ms: i64,
    /// The parent has seen the result (through `agent.await` or an injection).
    #[serde(skip)]
    pub delivered: bool,
}

/// A task's stop signal: its parent finished, or the run ended.
#[derive(Debug, Default)]
pub struct CancelFlag {
    set: AtomicBool,
    notify: Notify,
}

impl CancelFlag {
    pub fn cancel(&self) {
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }
}

/// What stops a loop: the run's cancel, and for a child its own task's cancel.
#[derive(Debug, Clone)]
pub struct Stop {
    run: Arc<Run>,
    task: Option<Arc<CancelFlag>>,
}

impl Stop {
    pub fn run(run: Arc<Run>) -> Self {
        Stop { run, task: None }
    }
    pub fn task(run: Arc<Run>, flag: Arc<CancelFlag>) -> Self {
        Stop {
            run,
            task: Some(flag),
        }
    }
    pub fn is_set(&self) -> bool {
        self.run.is_cancelled() || self.task.as_ref().is_some_and(|t| t.is_set())
    }
    /// Resolves once the stop is set (at once if it already is).
    pub async fn wait(&self) {
        let run_note = self.run.cancel_notify.notified();
        tokio::pin!(run_note);
        run_note.as_mut().enable();
        let task_note = self.task.as_ref().map(|t| t.notify.notified());
        tokio::pin!(task_note);
        if let Some(n) = task_note.as_mut().as_pin_mut() {
            n.enable();
        }
        if self.is_set() {
            return;
        }
        match task_note.as_pin_mut() {
            Some(t) => tokio::select! { () = run_note => {}, () = t => {} },
            None => run_note.await,
        }
    }
}

/// A task registered but not started yet: it starts once the call that delegated it is journalled.
#[derive(Debug)]
struct Pending {
    task_id: String,
    target: Profile,
    endpoint: Endpoint,
    slots: u32,
}

/// The run's task book and scheduler state.
#[derive(Debug)]
pub struct RunAgents {
    tasks: Mutex<Vec<Task>>,
    changed: watch::Sender<u64>,
    flags: Mutex<HashMap<String, Arc<CancelFlag>>>,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    pending: Mutex<Vec<Pending>>,
    /// Delegation targets as each delegating invocation first read them: (parent, profile id) →
    /// the profile and its model endpoint. Like a snapshot, read once per invocation.
    targets: Mutex<HashMap<(String, String), (Profile, Endpoint)>>,
}

impl Default for RunAgents {
    fn default() -> Self {
        RunAgents {
            tasks: Mutex::new(Vec::new()),
            changed: watch::Sender::new(0),
            flags: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            targets: Mutex::new(HashMap::new()),
        }
    }
}

impl RunAgents {
    pub fn tasks(&self) -> Vec<Task> {
        lock(&self.tasks).clone()
    }

    pub fn task(&self, id: &str) -> Option<Task> {
        lock(&self.tasks).iter().find(|t| t.task_id == id).cloned()
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut Task)) -> Option<Task> {
        let out = {
            let mut tasks = lock(&self.tasks);
            let t = tasks.iter_mut().find(|t| t.task_id == id)?;
            f(t);
            t.clone()
        };
        self.changed.send_modify(|v| *v += 1);
        Some(out)
    }

    /// Tasks of `parent` that are queued or running.
    pub fn unfinished_of(&self, parent: &str) -> Vec<Task> {
        lock(&self.tasks)
            .iter()
            .filter(|t| t.parent_invocation_id == parent && !t.status.is_terminal())
            .cloned()
            .collect()
    }

    /// Finished tasks of `parent` whose result the parent has not seen; marks them seen.
    pub fn take_finished(&self, parent: &str) -> Vec<Task> {
        let mut tasks = lock(&self.tasks);
        let mut out = Vec::new();
        for t in tasks.iter_mut() {
            if t.parent_invocation_id == parent && t.status.is_terminal() && !t.delivered {
                t.delivered = true;
                out.push(t.clone());
            }
        }
        out
    }

    fn mark_delivered(&self, ids: &[String]) {
        let mut tasks = lock(&self.tasks);
        for t in tasks.iter_mut() {
            if ids.contains(&t.task_id) {
                t.delivered = true;
            }
        }
    }

    fn flag(&self, task: &str) -> Arc<CancelFlag> {
        Arc::clone(lock(&self.flags).entry(task.to_owned()).or_default())
    }

    fn slots(&self, parent: &str, limit: u32) -> Arc<Semaphore> {
        let permits = usize::try_from(limit.max(1)).unwrap_or(1);
        Arc::clone(
            lock(&self.slots)
                .entry(parent.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(permits))),
        )
    }

    /// Signals every unfinished task of `parent` (every task when `None`) to stop.
    pub fn cancel(&self, parent: Option<&str>) -> Vec<String> {
        let ids: Vec<String> = lock(&self.tasks)
            .iter()
            .filter(|t| !t.status.is_terminal())
            .filter(|t| parent.is_none_or(|p| t.parent_invocation_id == p))
            .map(|t| t.task_id.clone())
            .collect();
        for id in &ids {
            self.flag(id).cancel();
        }
        ids
    }

    /// Waits until none of `ids` is queued or running, or `limit` passes.
    pub async fn wait_terminal(&self, ids: &[String], limit: Duration) {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let done = {
                let tasks = lock(&self.tasks);
                ids.iter().all(|id| {
                    tasks
                        .iter()
                        .find(|t| &t.task_id == id)
                        .is_none_or(|t| t.status.is_terminal())
                })
            };
            if done {
                return;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Which relation `agent.list` and the checks are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Delegate,
    Handoff,
}

/// Whether `caller` may delegate (or hand off) to `target`: the caller's targets, the target's
/// callable policy and allowed callers, and for delegation a model endpoint.
pub fn check_target(
    caller: &Profile,
    target: &Profile,
    purpose: Purpose,
) -> Result<(), (ErrorCode, String)> {
    let d = &caller.delegation;
    let id = &target.id;
    if !d.targets.iter().any(|t| t == "*" || t == id) {
        return Err((
            AGENT_NOT_ALLOWED,
            format!("`{id}` is not among the agents you may call"),
        ));
    }
    let t = &target.delegation;
    if !t.callable {
        return Err((
            AGENT_NOT_ALLOWED,
            format!("`{id}` does not take work from other agents"),
        ));
    }
    if purpose == Purpose::Handoff && !t.allow_as_handoff_target {
        return Err((
            AGENT_NOT_ALLOWED,
            format!("`{id}` does not accept handoffs"),
        ));
    }
    if !t.allowed_callers.is_empty() && !t.allowed_callers.iter().any(|c| c == &caller.id) {
        return Err((
            AGENT_NOT_ALLOWED,
            format!(
                "`{id}` accepts work only from {}",
                t.allowed_callers
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if purpose == Purpose::Delegate && target.model.is_none() {
        return Err((
            AGENT_NO_MODEL,
            format!("`{id}` has no model endpoint, so it cannot run delegated work"),
        ));
    }
    Ok(())
}

fn refused(call: &ToolInvocation, code: ErrorCode, message: impl Into<String>) -> Dispatched {
    Dispatched::known(AgentToolResult::error(call, code, message), Effect::None)
}

fn string_arg<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or("").trim()
}

/// The brief argument `name`, or the refusal when it is empty or too long.
fn brief_arg<'a>(
    args: &'a Map<String, Value>,
    name: &str,
    call: &ToolInvocation,
) -> Result<&'a str, Box<Dispatched>> {
    let brief = string_arg(args, name);
    if brief.is_empty() || brief.len() > MAX_BRIEF_BYTES {
        return Err(Box::new(refused(
            call,
            TOOL_INVALID_ARGUMENTS,
            format!("{name} must be a brief of 1 to {MAX_BRIEF_BYTES} bytes"),
        )));
    }
    Ok(brief)
}

/// The alias `agent.await` has in this invocation, for messages that tell the model to call it.
fn await_alias(inner: &InvocationInner) -> String {
    inner
        .snapshot
        .builtin(toolplane_core::builtin::AGENT_AWAIT)
        .map(|b| b.alias.to_string())
        .unwrap_or_else(|| "agent_await".into())
}

/// Reads a profile of the run's cell; `None` when there is no such profile.
async fn fetch_profile(rt: &Runtime, run: &Run, id: &str) -> Result<Option<Profile>, RuntimeError> {
    profile_in(rt, &run.cell, id).await
}

/// Reads profile `id` of `cell`; `None` when there is no such profile.
pub(crate) async fn profile_in(
    rt: &Runtime,
    cell: &str,
    id: &str,
) -> Result<Option<Profile>, RuntimeError> {
    if id.is_empty() || id.len() > 64 {
        return Ok(None);
    }
    let got = rt
        .peers
        .profiles()
        .get_profile(pb::GetProfileRequest {
            cell_id: cell.to_owned(),
            profile_id: id.to_owned(),
        })
        .await;
    match got {
        Ok(resp) => {
            let stored = resp.into_inner().profile.unwrap_or_default();
            Ok(Some(Profile::from_json(&stored.profile_json)?))
        }
        Err(s) if s.code() == tonic::Code::NotFound || s.code() == tonic::Code::InvalidArgument => {
            Ok(None)
        }
        Err(s) => Err(RuntimeError::dependency(format!(
            "reading profile `{id}`: {}",
            s.message()
        ))),
    }
}

fn depth_of(exit: &ExitPolicy) -> u32 {
    match exit {
        ExitPolicy::Handoff { depth, .. } => *depth,
        _ => 0,
    }
}

/// `agent.list`: the agents this invocation may delegate or hand off to.
pub async fn list(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let purpose = string_arg(args, "purpose");
    let purpose = if purpose.is_empty() { "any" } else { purpose };
    if !matches!(purpose, "any" | "delegate" | "handoff") {
        return Ok(refused(
            call,
            TOOL_INVALID_ARGUMENTS,
            "purpose is one of any, delegate, handoff",
        ));
    }
    let query = string_arg(args, "query").to_lowercase();
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(20)
        .clamp(1, 100) as usize;
    let caller = &inner.profile;
    let want_delegate = matches!(purpose, "any" | "delegate") && caller.delegation.can_delegate;
    let want_handoff = matches!(purpose, "any" | "handoff") && caller.delegation.can_handoff;
    if !want_delegate && !want_handoff {
        return Ok(refused(
            call,
            AGENT_UNAVAILABLE,
            format!(
                "this agent may not {} other agents",
                if purpose == "handoff" {
                    "hand off to"
                } else {
                    "delegate to"
                }
            ),
        ));
    }

    let mut profiles = Vec::new();
    let mut token = String::new();
    loop {
        let page = rt
            .peers
            .profiles()
            .list_profiles(pb::ListProfilesRequest {
                cell_id: inv.run.cell.clone(),
                page_size: 500,
                page_token: token.clone(),
            })
            .await
            .map_err(|s| RuntimeError::dependency(format!("listing profiles: {}", s.message())))?
            .into_inner();
        profiles.extend(page.profiles);
        if page.next_page_token.is_empty() || profiles.len() >= MAX_LISTED_PROFILES {
            break;
        }
        token = page.next_page_token;
    }

    let mut offered = Vec::new();
    let mut unavailable = Vec::new();
    for stored in profiles {
        let Ok(target) = Profile::from_json(&stored.profile_json) else {
            continue;
        };
        if target.id == caller.id {
            continue;
        }
        let text = format!(
            "{} {} {}",
            target.id,
            target.name.as_deref().unwrap_or(""),
            target.description.as_deref().unwrap_or("")
        )
        .to_lowercase();
        if !query.is_empty() && !text.contains(&query) {
            continue;
        }
        let delegate = want_delegate && check_target(caller, &target, Purpose::Delegate).is_ok();
        let handoff = want_handoff && check_target(caller, &target, Purpose::Handoff).is_ok();
        if delegate || handoff {
            offered.push((target, delegate, handoff));
        } else if want_delegate
            && let Err((code, why)) = check_target(caller, &target, Purpose::Delegate)
            && code == AGENT_NO_MODEL
        {
            unavailable.push(json!({"agentId": target.id, "reason": why}));
        }
    }
    let total = offered.len();
    offered.truncate(limit);

    let mut text = if offered.is_empty() {
        "No agents are available to you for this purpose.".to_owned()
    } else {
        format!("{} agent(s) you can call:\n", offered.len())
    };
    let mut listed = Vec::new();
    for (p, delegate, handoff) in &offered {
        let how: Vec<&str> = [(*delegate, "delegate"), (*handoff, "handoff")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
        text.push_str(&format!(
            "\n- `{}`{} ({}){}",
            p.id,
            p.name
                .as_deref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default(),
            how.join(", "),
            p.description
                .as_deref()
                .map(|d| format!(": {}", d.chars().take(300).collect::<String>()))
                .unwrap_or_default()
        ));
        listed.push(json!({"agentId": p.id, "name": p.name, "description": p.description, "delegate": delegate, "handoff": handoff}));
    }
    if total > offered.len() {
        text.push_str(&format!(
            "\n\n{} more match; narrow the query or raise the limit.",
            total - offered.len()
        ));
    }
    let mut events = Vec::new();
    if !unavailable.is_empty() {
        events.push(
            Event::new(
                "agent_target_unavailable",
                json!({"invocationId": inv.id, "callId": call.call_id, "targets": unavailable}),
            )
            .inv(&inv.id)
            .warn(),
        );
    }
    let mut d = Dispatched::known(
        AgentToolResult::ok(call, text)
            .with_structured(json!({"agents": listed, "total": total, "unavailable": unavailable})),
        Effect::None,
    );
    d.events = events;
    Ok(d)
}

/// The checks `agent.delegate` and sub-agent tools share; the target and its endpoint, or the
/// refusal the model sees.
async fn delegation_target(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    agent_id: &str,
    via_tool: bool,
) -> Result<Result<(Profile, Endpoint), Dispatched>, RuntimeError> {
    if !via_tool && !inner.profile.delegation.can_delegate {
        return Ok(Err(refused(
            call,
            AGENT_UNAVAILABLE,
            "this agent may not delegate to other agents",
        )));
    }
    if inv.run.agents.tasks.lock().map(|t| t.len()).unwrap_or(0) >= MAX_TASKS_PER_RUN {
        return Ok(Err(refused(
            call,
            AGENT_TASK_LIMIT,
            format!("this run already holds {MAX_TASKS_PER_RUN} delegated tasks"),
        )));
    }
    let key = (inv.id.clone(), agent_id.to_owned());
    let known = lock(&inv.run.agents.targets).get(&key).cloned();
    let (target, endpoint) = match known {
        Some((target, endpoint)) => (target, Some(endpoint)),
        None => match fetch_profile(rt, &inv.run, agent_id).await? {
            Some(target) => (target, None),
            None => {
                return Ok(Err(refused(
                    call,
                    AGENT_NOT_ALLOWED,
                    format!(
                        "there is no agent `{agent_id}`; agent_list shows the ones you can call"
                    ),
                )));
            }
        },
    };
    let checked = if via_tool {
        // Offering `agent/<id>:run` in the caller's profile is the caller's permission; the
        // target still decides who may call it and must be able to run.
        let mut caller = inner.profile.clone();
        caller.delegation.targets = vec!["*".into()];
        check_target(&caller, &target, Purpose::Delegate)
    } else {
        check_target(&inner.profile, &target, Purpose::Delegate)
    };
    if let Err((code, why)) = checked {
        let mut d = refused(call, code, why.clone());
        if code == AGENT_NO_MODEL {
            d.events.push(
                Event::new(
                    "agent_target_unavailable",
                    json!({"invocationId": inv.id, "callId": call.call_id, "targets": [{"agentId": target.id, "reason": why}]}),
                )
                .inv(&inv.id)
                .warn(),
            );
        }
        return Ok(Err(d));
    }
    if let Some(e) = endpoint {
        return Ok(Ok((target, e)));
    }
    match rt.endpoint_of(&target) {
        None => Ok(Err(refused(call, AGENT_NO_MODEL, "no model endpoint"))),
        Some(Ok(e)) => {
            lock(&inv.run.agents.targets).insert(key, (target.clone(), e.clone()));
            Ok(Ok((target, e)))
        }
        Some(Err(why)) => Ok(Err(refused(
            call,
            AGENT_NO_MODEL,
            format!("`{agent_id}`'s model endpoint cannot be used: {why}"),
        ))),
    }
}

/// Registers a task (queued) and returns it with the journal records of its registration.
fn register(
    inv: &Invocation,
    inner: &InvocationInner,
    target: Profile,
    endpoint: Endpoint,
    brief: &str,
) -> (Task, Vec<Event>) {
    let agents = &inv.run.agents;
    let task = {
        let mut tasks = lock(&agents.tasks);
        let task = Task {
            task_id: format!("task-{}", tasks.len() + 1),
            parent_invocation_id: inv.id.clone(),
            child_invocation_id: String::new(),
            profile_id: target.id.clone(),
            brief: brief.to_owned(),
            status: TaskStatus::Queued,
            result: None,
            failure: None,
            created_ms: now_ms(),
            ended_ms: 0,
            delivered: false,
        };
        tasks.push(task.clone());
        task
    };
    agents.changed.send_modify(|v| *v += 1);
    lock(&agents.pending).push(Pending {
        task_id: task.task_id.clone(),
        target,
        endpoint,
        slots: inner.profile.delegation.max_concurrent_children,
    });
    let base =
        json!({"taskId": task.task_id, "parentInvocationId": inv.id, "profileId": task.profile_id});
    let events = vec![
        Event::new(
            "agent_task_registered",
            json!({"taskId": task.task_id, "parentInvocationId": inv.id, "profileId": task.profile_id, "mode": "return", "briefChars": brief.chars().count()}),
        )
        .inv(&inv.id),
        Event::new("agent_task_queued", base.clone()).inv(&inv.id),
        Event::new("agent_delegate_started", base).inv(&inv.id),
    ];
    (task, events)
}

/// Starts every registered task that has not started yet. Called once the call that delegated
/// them is journalled, so a child's records never precede its registration.
pub fn launch_pending(rt: &Runtime, run: &Arc<Run>) {
    let pending: Vec<Pending> = std::mem::take(&mut *lock(&run.agents.pending));
    if pending.is_empty() {
        return;
    }
    let Some(rt) = rt.arc() else { return };
    for p in pending {
        let rt = Arc::clone(&rt);
        let run = Arc::clone(run);
        tokio::spawn(async move { run_task(rt, run, p).await });
    }
}

/// `agent.delegate`.
pub async fn delegate(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let agent_id = string_arg(args, "agentId");
    let brief = match brief_arg(args, "task", call) {
        Ok(b) => b,
        Err(refusal) => return Ok(*refusal),
    };
    let (target, endpoint) = match delegation_target(rt, inv, inner, call, agent_id, false).await? {
        Ok(t) => t,
        Err(refusal) => return Ok(refusal),
    };
    let (task, events) = register(inv, inner, target, endpoint, brief);
    let await_alias = await_alias(inner);
    let mut d = Dispatched::known(
        AgentToolResult::ok(
            call,
            format!(
                "Delegated to `{}` as task `{}`. It runs in the background while you keep working; its result reaches you when it finishes, or call `{await_alias}` to wait for it.",
                task.profile_id, task.task_id
            ),
        )
        .with_structured(json!({"taskId": task.task_id, "agentId": task.profile_id, "status": "queued"})),
        Effect::None,
    );
    d.events = events;
    Ok(d)
}

/// A finished task as the parent reads it.
pub fn capsule(t: &Task) -> String {
    let mut s = format!(
        "### Task `{}` (`{}`): {}\n",
        t.task_id,
        t.profile_id,
        t.status.as_str()
    );
    match (&t.result, &t.failure) {
        (Some(r), _) => {
            s.push('\n');
            s.push_str(r.summary.trim());
            s.push('\n');
            if !r.artifacts.is_empty() {
                s.push_str(&format!(
                    "\nArtifacts: {}\n",
                    r.artifacts
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            s.push_str(&format!("\nFull result: `{}`\n", r.result_path));
        }
        (None, Some(f)) => s.push_str(&format!(
            "\nIt did not return a result: {}: {}\n",
            f.code, f.message
        )),
        (None, None) => s.push_str("\nIt has not finished yet.\n"),
    }
    s
}

/// The message that carries finished results into the parent's next model request.
pub fn injection_text(tasks: &[Task]) -> String {
    let mut s = String::from("Results of tasks you delegated have arrived.\n\n");
    s.push_str(&tasks.iter().map(capsule).collect::<Vec<_>>().join("\n"));
    s
}

/// Takes the finished, unseen results of `inv`'s tasks and journals their injection.
pub async fn take_injections(rt: &Runtime, inv: &Invocation) -> Result<Vec<Task>, RuntimeError> {
    let tasks = inv.run.agents.take_finished(&inv.id);
    if !tasks.is_empty() {
        let ids: Vec<&str> = tasks.iter().map(|t| t.task_id.as_str()).collect();
        inv.run
            .journal
            .append(
                &rt.peers,
                inv.run.epoch(),
                Vec::new(),
                vec![
                    Event::new(
                        "agent_child_results_injected",
                        json!({"invocationId": inv.id, "taskIds": ids}),
                    )
                    .inv(&inv.id),
                ],
            )
            .await?;
    }
    Ok(tasks)
}

/// A task as the host reads it.
pub fn task_pb(t: &Task) -> pb::ChildTaskResult {
    pb::ChildTaskResult {
        task_id: t.task_id.clone(),
        child_invocation_id: t.child_invocation_id.clone(),
        profile_id: t.profile_id.clone(),
        status: t.status.pb(),
        content: capsule(t),
        result_path: t
            .result
            .as_ref()
            .map(|r| r.result_path.clone())
            .unwrap_or_default(),
        failure: t.failure.as_ref().map(crate::service::failure_pb),
    }
}

/// `agent.await`.
pub async fn wait(
    rt: &Runtime,
    inv: &Invocation,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let agents = &inv.run.agents;
    let own: Vec<Task> = agents
        .tasks()
        .into_iter()
        .filter(|t| t.parent_invocation_id == inv.id)
        .collect();
    let ids: Vec<String> = match args.get("taskIds").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => {
            let mut ids = Vec::new();
            for v in list.iter().take(64) {
                let id = v.as_str().unwrap_or("").trim().to_owned();
                if !own.iter().any(|t| t.task_id == id) {
                    return Ok(refused(
                        call,
                        AGENT_UNKNOWN_TASK,
                        format!("`{id}` is not a task you delegated"),
                    ));
                }
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            ids
        }
        _ => own
            .iter()
            .filter(|t| !t.delivered)
            .map(|t| t.task_id.clone())
            .collect(),
    };
    if ids.is_empty() {
        return Ok(Dispatched::known(
            AgentToolResult::ok(call, "You have no delegated tasks to wait for.")
                .with_structured(json!({"tasks": []})),
            Effect::None,
        ));
    }
    inv.run
        .journal
        .append(
            &rt.peers,
            inv.run.epoch(),
            Vec::new(),
            vec![
                Event::new(
                    "agent_await_started",
                    json!({"invocationId": inv.id, "callId": call.call_id, "taskIds": ids}),
                )
                .inv(&inv.id),
            ],
        )
        .await?;
    let stop = Stop::run(Arc::clone(&inv.run));
    tokio::select! {
        () = agents.wait_terminal(&ids, rt.cfg.agent_await_timeout) => {}
        () = stop.wait() => {}
    }
    let tasks: Vec<Task> = ids.iter().filter_map(|id| agents.task(id)).collect();
    let finished: Vec<String> = tasks
        .iter()
        .filter(|t| t.status.is_terminal())
        .map(|t| t.task_id.clone())
        .collect();
    agents.mark_delivered(&finished);
    let pending: Vec<&str> = tasks
        .iter()
        .filter(|t| !t.status.is_terminal())
        .map(|t| t.task_id.as_str())
        .collect();
    let mut text = tasks
        .iter()
        .filter(|t| t.status.is_terminal())
        .map(capsule)
        .collect::<Vec<_>>()
        .join("\n");
    if !pending.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "Still running after waiting {} s: {}. Their results reach you when they finish.",
            rt.cfg.agent_await_timeout.as_secs(),
            pending
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut d = Dispatched::known(
        AgentToolResult::ok(call, text).with_structured(json!({"tasks": tasks})),
        Effect::None,
    );
    d.events.push(
        Event::new(
            "agent_await_completed",
            json!({"invocationId": inv.id, "callId": call.call_id, "finished": finished, "pending": pending}),
        )
        .inv(&inv.id),
    );
    Ok(d)
}

/// `task.return`: the child's result, stored as `agent-results/<child>.json` and
/// `summaries/<child>-result.md`; the child ends after its turn.
pub fn task_return(
    inv: &Invocation,
    inner: &mut InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let ExitPolicy::ReturnToParent {
        task_id,
        parent_invocation_id,
    } = inner.snapshot.exit_policy.clone()
    else {
        return Ok(refused(
            call,
            AGENT_UNAVAILABLE,
            "only a delegated task returns a result; end your work with workspace.finish",
        ));
    };
    let summary = args.get("summary").and_then(Value::as_str).unwrap_or("");
    if summary.trim().is_empty() || summary.len() > MAX_SUMMARY_BYTES {
        return Ok(refused(
            call,
            TOOL_INVALID_ARGUMENTS,
            format!("summary must be 1 to {MAX_SUMMARY_BYTES} bytes of Markdown"),
        ));
    }
    let artifacts: Vec<String> = args
        .get("artifacts")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .take(50)
                .map(|p| p.chars().take(1024).collect())
                .collect()
        })
        .unwrap_or_default();
    let status = match args.get("status").and_then(Value::as_str) {
        None | Some("completed") => "completed",
        Some("failed") => "failed",
        Some(other) => {
            return Ok(refused(
                call,
                TOOL_INVALID_ARGUMENTS,
                format!("status `{other}` is neither completed nor failed"),
            ));
        }
    };
    let result_path = format!("agent-results/{}.json", inv.id);
    let summary_path = format!("summaries/{}-result.md", inv.id);
    let result = TaskResult {
        summary: summary.to_owned(),
        artifacts,
        status: status.to_owned(),
        result_path: result_path.clone(),
        summary_path: summary_path.clone(),
    };
    let document = json!({
        "taskId": task_id,
        "parentInvocationId": parent_invocation_id,
        "childInvocationId": inv.id,
        "profileId": inner.profile.id,
        "status": status,
        "summary": result.summary,
        "artifacts": result.artifacts,
        "returnedAtUnixMs": now_ms(),
    });
    let markdown = format!(
        "# Result of {task_id} ({})\n\nStatus: {status}\n\n{}\n",
        inner.profile.id,
        summary.trim()
    );
    inner.returned = Some(result);
    let mut d = Dispatched::known(
        AgentToolResult::ok(
            call,
            "Returned your result. Your work on this task is done.",
        )
        .with_structured(
            json!({"resultPath": result_path, "summaryPath": summary_path, "status": status}),
        ),
        Effect::Returned,
    );
    d.objects = vec![
        AuditObject {
            path: result_path.clone(),
            content: serde_json::to_vec_pretty(&document).unwrap_or_default(),
            content_type: "application/json",
        },
        AuditObject {
            path: summary_path.clone(),
            content: markdown.into_bytes(),
            content_type: "text/markdown",
        },
    ];
    d.events.push(
        Event::new(
            "task_return_completed",
            json!({"invocationId": inv.id, "taskId": task_id, "status": status, "resultPath": result_path, "summaryPath": summary_path}),
        )
        .inv(&inv.id),
    );
    Ok(d)
}

/// A handoff the turn asked for; carried out after the turn by `Runtime::after_turn`.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffRequest {
    pub target: Profile,
    pub brief: String,
    pub depth: u32,
    /// The target's own model endpoint, when a runtime-driven run hands off to an agent that has
    /// one.
    pub endpoint: Option<Endpoint>,
}

/// `agent.handoff`.
pub async fn handoff(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let agent_id = string_arg(args, "agentId");
    let checked_brief = brief_arg(args, "brief", call);
    if !inner.profile.delegation.can_handoff {
        return Ok(refused(
            call,
            AGENT_UNAVAILABLE,
            "this agent may not hand the run off",
        ));
    }
    let brief = match checked_brief {
        Ok(b) => b,
        Err(refusal) => return Ok(*refusal),
    };
    let unfinished = inv.run.agents.unfinished_of(&inv.id);
    if !unfinished.is_empty() {
        let await_alias = await_alias(inner);
        return Ok(refused(
            call,
            AGENT_CHILDREN_UNFINISHED,
            format!(
                "your delegated tasks {} are still running; call `{await_alias}` first, then hand off",
                unfinished
                    .iter()
                    .map(|t| format!("`{}`", t.task_id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let Some(target) = fetch_profile(rt, &inv.run, agent_id).await? else {
        return Ok(refused(
            call,
            AGENT_NOT_ALLOWED,
            format!("there is no agent `{agent_id}`; agent_list shows the ones you can call"),
        ));
    };
    if let Err((code, why)) = check_target(&inner.profile, &target, Purpose::Handoff) {
        return Ok(refused(call, code, why));
    }
    // A runtime-driven run goes on on the target's own model endpoint when it has one: resolved
    // here, once, and one it could not use is refused, so the model can choose again, rather than
    // the run going on on this agent's.
    let endpoint = match inv.driver {
        Driver::Runtime => match rt.endpoint_of(&target) {
            None => None,
            Some(Ok(e)) => Some(e),
            Some(Err(why)) => {
                return Ok(refused(
                    call,
                    AGENT_NO_MODEL,
                    format!(
                        "`{}` cannot take the run: its model endpoint is unusable: {why}",
                        target.id
                    ),
                ));
            }
        },
        _ => None,
    };
    let depth = depth_of(&inner.snapshot.exit_policy) + 1;
    if depth > target.delegation.max_handoff_depth {
        return Ok(refused(
            call,
            AGENT_HANDOFF_DEPTH_EXCEEDED,
            format!(
                "this would be handoff number {depth} in the chain; `{}` accepts at most {}",
                target.id, target.delegation.max_handoff_depth
            ),
        ));
    }
    let mut d = Dispatched::known(
        AgentToolResult::ok(
            call,
            format!(
                "Handed the run to `{}`. Your work ends with this turn.",
                target.id
            ),
        )
        .with_structured(json!({"agentId": target.id, "depth": depth})),
        Effect::HandedOff(Box::new(HandoffRequest {
            target: target.clone(),
            brief: brief.to_owned(),
            depth,
            endpoint,
        })),
    );
    d.events.push(
        Event::new(
            "agent_handoff_requested",
            json!({"invocationId": inv.id, "callId": call.call_id, "targetProfileId": target.id, "depth": depth, "briefChars": brief.chars().count()}),
        )
        .inv(&inv.id),
    );
    Ok(d)
}

/// A sub-agent offered as a tool (`agent/<profile>:run`): delegates and awaits in one call.
pub async fn run_sub_agent(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
    profile_id: &str,
) -> Result<Dispatched, RuntimeError> {
    let brief = match brief_arg(args, "task", call) {
        Ok(b) => b,
        Err(refusal) => return Ok(*refusal),
    };
    let (target, endpoint) = match delegation_target(rt, inv, inner, call, profile_id, true).await?
    {
        Ok(t) => t,
        Err(refusal) => return Ok(refusal),
    };
    let (task, events) = register(inv, inner, target, endpoint, brief);
    inv.run
        .journal
        .append(&rt.peers, inv.run.epoch(), Vec::new(), events)
        .await?;
    launch_pending(rt, &inv.run);
    let agents = &inv.run.agents;
    let stop = Stop::run(Arc::clone(&inv.run));
    tokio::select! {
        () = agents.wait_terminal(std::slice::from_ref(&task.task_id), rt.cfg.agent_await_timeout) => {}
        () = stop.wait() => {}
    }
    let done = agents.task(&task.task_id).unwrap_or(task);
    if done.status.is_terminal() {
        agents.mark_delivered(std::slice::from_ref(&done.task_id));
    }
    let text = capsule(&done);
    let structured = serde_json::to_value(&done).unwrap_or(Value::Null);
    let result = match done.status {
        TaskStatus::Completed => AgentToolResult::ok(call, text),
        TaskStatus::Queued | TaskStatus::Running => AgentToolResult::ok(
            call,
            format!("{text}\nIt is still running; its result reaches you when it finishes."),
        ),
        _ => {
            let code = done
                .failure
                .as_ref()
                .and_then(|f| ErrorCode::lookup(&f.code))
                .filter(|c| c.class() == ErrorClass::Recoverable)
                .unwrap_or(AGENT_UNAVAILABLE);
            AgentToolResult::error(call, code, text)
        }
    };
    Ok(Dispatched::known(
        result.with_structured(structured),
        Effect::None,
    ))
}

/// The scheduler's worker for one task: waits for a slot, opens the child invocation and drives it
/// to its end, then records how the task ended.
async fn run_task(rt: Arc<Runtime>, run: Arc<Run>, p: Pending) {
    let agents = &run.agents;
    let Some(task) = agents.task(&p.task_id) else {
        return;
    };
    let flag = agents.flag(&task.task_id);
    let stop = Stop::task(Arc::clone(&run), Arc::clone(&flag));
    let slots = agents.slots(&task.parent_invocation_id, p.slots);
    let permit = tokio::select! {
        permit = slots.acquire_owned() => permit.ok(),
        () = stop.wait() => None,
    };
    let outcome = match permit {
        None => Ended::Cancelled,
        Some(_permit) => drive_task(&rt, &run, &task, &p, &stop).await,
    };
    let (status, failure) = match outcome {
        Ended::Completed(result) => {
            let status = if result.status == "failed" {
                TaskStatus::Failed
            } else {
                TaskStatus::Completed
            };
            agents.update(&task.task_id, |t| t.result = Some(result));
            (status, None)
        }
        Ended::Failed(f) => (TaskStatus::Failed, Some(f)),
        Ended::Cancelled => (
            TaskStatus::Cancelled,
            Some(Failure {
                code: codes::RUNTIME_CANCELLED.as_str().into(),
                message: "the task was cancelled: its parent finished or the run ended".into(),
                retryable: true,
            }),
        ),
    };
    let Some(done) = agents.update(&task.task_id, |t| {
        t.status = status;
        t.failure = failure.clone();
        t.ended_ms = now_ms();
    }) else {
        return;
    };
    let kind = match status {
        TaskStatus::Completed => "agent_task_completed",
        TaskStatus::Cancelled => "agent_task_cancelled",
        _ => "agent_task_failed",
    };
    let mut ev = Event::new(
        kind,
        json!({"taskId": done.task_id, "parentInvocationId": done.parent_invocation_id, "childInvocationId": done.child_invocation_id, "profileId": done.profile_id, "status": status.as_str(), "resultPath": done.result.as_ref().map(|r| r.result_path.clone()), "failure": failure}),
    )
    .inv(&done.parent_invocation_id);
    if !done.child_invocation_id.is_empty() {
        ev.related.push(done.child_invocation_id.clone());
    }
    if status == TaskStatus::Failed {
        ev = ev.warn();
    }
    if let Err(e) = run
        .journal
        .append(&rt.peers, run.epoch(), Vec::new(), vec![ev])
        .await
    {
        tracing::warn!(run = %run.id, task = %done.task_id, error = %e, "journalling a task's end failed");
    }
}

enum Ended {
    Completed(TaskResult),
    Failed(Failure),
    Cancelled,
}

fn system_failure(e: &RuntimeError) -> Failure {
    Failure {
        code: e.code().as_str().into(),
        message: e.0.message.clone(),
        retryable: e.code().class() == ErrorClass::System,
    }
}

async fn drive_task(
    rt: &Arc<Runtime>,
    run: &Arc<Run>,
    task: &Task,
    p: &Pending,
    stop: &Stop,
) -> Ended {
    let agents = &run.agents;
    agents.update(&task.task_id, |t| t.status = TaskStatus::Running);
    if let Err(e) = run
        .journal
        .append(
            &rt.peers,
            run.epoch(),
            Vec::new(),
            vec![Event::new(
                "agent_task_started",
                json!({"taskId": task.task_id, "parentInvocationId": task.parent_invocation_id, "profileId": task.profile_id}),
            )
            .inv(&task.parent_invocation_id)],
        )
        .await
    {
        return Ended::Failed(system_failure(&e));
    }
    if stop.is_set() {
        return Ended::Cancelled;
    }
    let format = p.endpoint.format();
    let opened = match rt
        .open_invocation(
            run,
            &p.target.id,
            ExitPolicy::ReturnToParent {
                parent_invocation_id: task.parent_invocation_id.clone(),
                task_id: task.task_id.clone(),
            },
            format,
            ToolChoice::Auto,
            Driver::Runtime,
        )
        .await
    {
        Ok(o) => o,
        Err(e) => return Ended::Failed(system_failure(&e)),
    };
    let inv = opened.invocation;
    agents.update(&task.task_id, |t| t.child_invocation_id = inv.id.clone());
    let client = match ModelClient::new(p.endpoint.clone()) {
        Ok(c) => c,
        Err(why) => {
            let f = Failure {
                code: AGENT_NO_MODEL.as_str().into(),
                message: why,
                retryable: false,
            };
            let mut inner = inv.inner.lock().await;
            let _ = rt.fail_invocation(&inv, &mut inner, f.clone()).await;
            return Ended::Failed(f);
        }
    };
    let system = child_system_prompt(&inv).await;
    let history = vec![user_message(format, &task.brief)];
    let end = runloop::drive_invocation(rt, run, &inv, &client, &system, history, 0, stop).await;
    match end {
        Ok(LoopEnd::Returned) => {
            let inner = inv.inner.lock().await;
            match inner.returned.clone() {
                Some(r) => Ended::Completed(r),
                None => Ended::Failed(Failure {
                    code: AGENT_UNAVAILABLE.as_str().into(),
                    message: "the task ended without a result".into(),
                    retryable: true,
                }),
            }
        }
        Ok(LoopEnd::Failed(f)) => Ended::Failed(f),
        Ok(LoopEnd::Cancelled) => {
            rt.cancel_invocation(&inv).await;
            Ended::Cancelled
        }
        Ok(_) => Ended::Failed(Failure {
            code: AGENT_UNAVAILABLE.as_str().into(),
            message: "the task ended without calling task.return".into(),
            retryable: true,
        }),
        Err(e) => {
            let f = system_failure(&e);
            let mut inner = inv.inner.lock().await;
            let _ = rt.fail_invocation(&inv, &mut inner, f.clone()).await;
            Ended::Failed(f)
        }
    }
}

/// The system prompt of a delegated child: its profile's instructions and how to end.
async fn child_system_prompt(inv: &Invocation) -> String {
    let inner = inv.inner.lock().await;
    let mut parts = Vec::new();
    if let Some(i) = &inner.profile.instructions {
        parts.push(i.clone());
    }
    let ret = inner
        .snapshot
        .builtin(toolplane_core::builtin::TASK_RETURN)
        .map(|b| b.alias.to_string())
        .unwrap_or_else(|| "task_return".into());
    parts.push(format!(
        "Another agent gave you the task below. Do it with your tools, then end with `{ret}`: put the result in its summary and list the workspace files you produced. Do not answer in plain text."
    ));
    parts.join("\n\n")
}

/// Cancels `parent`'s unfinished tasks (all of the run's when `None`) and waits a bounded time for
/// them to end, so their records land before the run's end.
pub async fn cancel_and_wait(run: &Run, parent: Option<&str>) {
    let ids = run.agents.cancel(parent);
    if !ids.is_empty() {
        run.agents.wait_terminal(&ids, CHILD_WIND_DOWN).await;
    }
}
