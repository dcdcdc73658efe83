//! A rebuilt run's delegated tasks: the task book lives in memory, so after a restart it is read
//! back from the run's journal. A task that ended before the stop keeps its end (its result is
//! not injected again: the journal names where it is stored); a task still queued or running at
//! the stop is not rebuilt — its child's loop is gone — and is failed as interrupted, journalled
//! as `agent_task_failed`, and reported to its parent like any failed task (an `agent.await`
//! answers it; the next model request or host turn carries it). New tasks are numbered after the
//! old ones.

use serde_json::{Value, json};
use toolplane_core::error as codes;

use crate::context::Runtime;
use crate::state::{Event, Failure, Run, Task, TaskResult, TaskStatus, now_ms};

/// Why a task still running at the stop failed.
const INTERRUPTED: &str = "the runtime restarted while this delegated task was running and its work was not kept; delegate it again to retry";

impl Runtime {
    /// Reads `run`'s tasks back from its journal into its task book; the records of the tasks
    /// failed as interrupted, to journal with the run's restoration.
    pub async fn restore_tasks(&self, run: &Run) -> Vec<Event> {
        let mut tasks: Vec<Task> = Vec::new();
        let mut from = 1;
        loop {
            let page = match self
                .ports
                .workspace
                .read_journal(&run.id, &run.cell, from, 5000)
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(run = %run.id, error = %e.message, "reading the journal for delegated tasks failed");
                    break;
                }
            };
            for r in &page.records {
                let p: Value = serde_json::from_str(&r.payload_json).unwrap_or_default();
                note(&mut tasks, &r.kind, &p, r.timestamp_ms);
            }
            if page.at_end || page.records.is_empty() {
                break;
            }
            from = page.next_seq;
        }
        let mut events = Vec::new();
        for t in tasks.iter_mut().filter(|t| !t.status.is_terminal()) {
            let failure = Failure {
                code: codes::RUNTIME_INTERRUPTED.as_str().into(),
                message: INTERRUPTED.into(),
                retryable: true,
            };
            t.status = TaskStatus::Failed;
            t.failure = Some(failure.clone());
            t.ended_ms = now_ms();
            t.delivered = false;
            events.push(
                Event::new(
                    "agent_task_failed",
                    json!({"taskId": t.task_id, "parentInvocationId": t.parent_invocation_id, "childInvocationId": t.child_invocation_id, "profileId": t.profile_id, "status": "failed", "resultPath": null, "failure": failure}),
                )
                .inv(&t.parent_invocation_id)
                .warn(),
            );
        }
        run.agents.restore(tasks);
        events
    }
}

/// What one journal record says about a task.
fn note(tasks: &mut Vec<Task>, kind: &str, p: &Value, at_ms: i64) {
    let text = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
    if kind == "agent_task_registered" {
        tasks.push(Task {
            task_id: text("taskId"),
            parent_invocation_id: text("parentInvocationId"),
            child_invocation_id: String::new(),
            profile_id: text("profileId"),
            brief: String::new(),
            status: TaskStatus::Queued,
            result: None,
            failure: None,
            created_ms: at_ms,
            ended_ms: 0,
            delivered: true,
        });
        return;
    }
    let Some(t) = tasks.iter_mut().find(|t| t.task_id == text("taskId")) else {
        return;
    };
    let status = match kind {
        "agent_task_started" => TaskStatus::Running,
        "agent_task_completed" => TaskStatus::Completed,
        "agent_task_failed" => TaskStatus::Failed,
        "agent_task_cancelled" => TaskStatus::Cancelled,
        _ => return,
    };
    t.status = status;
    if !status.is_terminal() {
        return;
    }
    t.ended_ms = at_ms;
    t.child_invocation_id = text("childInvocationId");
    t.failure = serde_json::from_value(p["failure"].clone()).ok();
    if let Some(path) = p["resultPath"].as_str() {
        t.result = Some(TaskResult {
            summary: format!(
                "the task ended before the runtime restarted; its result is stored at `{path}`"
            ),
            artifacts: Vec::new(),
            status: if status == TaskStatus::Completed {
                "completed".into()
            } else {
                "failed".into()
            },
            result_path: path.to_owned(),
            summary_path: String::new(),
        });
    }
}
