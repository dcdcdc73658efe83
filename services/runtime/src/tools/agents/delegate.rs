//! `agent.delegate`, sub-agents offered as tools, `agent.await`, and how finished tasks reach
//! their parent (capsules and injections).

use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolplane_core::Profile;
use toolplane_core::error::{
    AGENT_NO_MODEL, AGENT_NOT_ALLOWED, AGENT_TASK_LIMIT, AGENT_UNAVAILABLE, AGENT_UNKNOWN_TASK,
    ErrorClass, ErrorCode,
};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;

use super::{
    MAX_TASKS_PER_RUN, Purpose, await_alias, brief_arg, check_target, refused, string_arg,
};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::model::provider::Endpoint;
use crate::state::{Event, Invocation, InvocationInner, Stop, Task, TaskStatus};
use crate::tools::{Dispatched, Effect};

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
    if inv.run.agents.len() >= MAX_TASKS_PER_RUN {
        return Ok(Err(refused(
            call,
            AGENT_TASK_LIMIT,
            format!("this run already holds {MAX_TASKS_PER_RUN} delegated tasks"),
        )));
    }
    let known = inv.run.agents.known_target(&inv.id, agent_id);
    let (target, endpoint) = match known {
        Some((target, endpoint)) => (target, Some(endpoint)),
        None => match rt.profile_in(&inv.run.cell, agent_id).await? {
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
            inv.run
                .agents
                .remember_target(&inv.id, agent_id, target.clone(), e.clone());
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
    let slots = inner.profile.delegation.max_concurrent_children;
    let task = inv
        .run
        .agents
        .register(&inv.id, target, endpoint, brief, slots);
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
        rt.append(
            &inv.run,
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
    let ids = match awaited(&own, call, args) {
        Ok(ids) => ids,
        Err(refusal) => return Ok(*refusal),
    };
    if ids.is_empty() {
        return Ok(Dispatched::known(
            AgentToolResult::ok(call, "You have no delegated tasks to wait for.")
                .with_structured(json!({"tasks": []})),
            Effect::None,
        ));
    }
    rt.append(
        &inv.run,
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
    let text = await_text(&tasks, &pending, rt.cfg.agent_await_timeout.as_secs());
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
    rt.append(&inv.run, inv.run.epoch(), Vec::new(), events)
        .await?;
    rt.launch_pending(&inv.run);
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

/// The tasks `agent.await` waits for: the ones named (each must be the caller's), else every task
/// of the caller whose result it has not seen.
fn awaited(
    own: &[Task],
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Vec<String>, Box<Dispatched>> {
    let ids: Vec<String> = match args.get("taskIds").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => {
            let mut ids = Vec::new();
            for v in list.iter().take(64) {
                let id = v.as_str().unwrap_or("").trim().to_owned();
                if !own.iter().any(|t| t.task_id == id) {
                    return Err(Box::new(refused(
                        call,
                        AGENT_UNKNOWN_TASK,
                        format!("`{id}` is not a task you delegated"),
                    )));
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
    Ok(ids)
}

/// What `agent.await` answers: the finished tasks' capsules, then the ones still running.
fn await_text(tasks: &[Task], pending: &[&str], waited_secs: u64) -> String {
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
            waited_secs,
            pending
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    text
}
