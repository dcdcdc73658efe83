//! Delegated tasks, driven: the scheduler ([`Scheduler`], the runtime's [`TaskLauncher`]) starts
//! each registered task on a task of its own, waits for one of its parent's slots, opens the
//! child's return-mode invocation and drives it through the runtime-driven loop on the target's
//! model endpoint, then records how the task ended in the run's task book and journal.
//!
//! Sits above the loop: the pipeline below starts tasks only through the launcher port in
//! `context`, so a sub-agent call never depends on the loop that runs it.

use std::sync::Arc;

use serde_json::json;
use toolplane_core::error::{self as codes, AGENT_NO_MODEL, AGENT_UNAVAILABLE, ErrorClass};
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolChoice;
use toolplane_store::Store;

use crate::config::RuntimeConfig;
use crate::context::{Ports, Runtime, TaskLauncher};
use crate::error::RuntimeError;
use crate::model::provider::user_message;
use crate::runloop::{LoopEnd, drive_invocation};
use crate::state::{
    Driver, Event, Failure, Invocation, PendingTask, Run, Stop, Task, TaskResult, TaskStatus,
    now_ms,
};

/// Starts each delegated task on a tokio task of its own.
#[derive(Debug, Default)]
pub struct Scheduler;

impl TaskLauncher for Scheduler {
    fn launch(&self, rt: Arc<Runtime>, run: Arc<Run>, task: PendingTask) {
        tokio::spawn(async move { run_task(rt, run, task).await });
    }
}

impl Runtime {
    /// A runtime over `ports` and `store` that drives delegated tasks with the [`Scheduler`],
    /// after recovering every run a previous process left unfinished: failed as interrupted, or
    /// rebuilt at its held turn — a runtime-driven one with its loop driven on.
    pub async fn assemble(cfg: RuntimeConfig, ports: Ports, store: Arc<dyn Store>) -> Arc<Runtime> {
        let rt = Runtime::new(cfg, ports, store, Arc::new(Scheduler));
        for run in rt.recover().await {
            crate::runloop::resume(Arc::clone(&rt), run);
        }
        rt
    }
}

/// The scheduler's worker for one task: waits for a slot, opens the child invocation and drives it
/// to its end, then records how the task ended.
async fn run_task(rt: Arc<Runtime>, run: Arc<Run>, p: PendingTask) {
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
    if let Err(e) = rt.append(&run, run.epoch(), Vec::new(), vec![ev]).await {
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
    p: &PendingTask,
    stop: &Stop,
) -> Ended {
    let agents = &run.agents;
    agents.update(&task.task_id, |t| t.status = TaskStatus::Running);
    if let Err(e) = rt
        .append(
            run,
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
    let client = match rt.ports.models.client(&run.cell, p.endpoint.clone()) {
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
    let end = drive_invocation(rt, run, &inv, client.as_ref(), &system, history, 0, stop).await;
    task_end(rt, &inv, end).await
}

/// How a task ended, from how its child's loop ended; a child that failed or stopped is ended
/// here.
async fn task_end(rt: &Runtime, inv: &Invocation, end: Result<LoopEnd, RuntimeError>) -> Ended {
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
            rt.cancel_invocation(inv).await;
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
            let _ = rt.fail_invocation(inv, &mut inner, f.clone()).await;
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
