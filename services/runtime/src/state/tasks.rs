//! The run's book of delegated tasks: each task's lifecycle, its cancel flag, the per-parent
//! concurrency slots and the tasks registered but not started yet. Starting and driving a task is
//! the `children` layer's; this module only records and signals.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore, watch};
use toolplane_core::Profile;

use super::journal::now_ms;
use super::run::{Failure, Run};
use crate::model::provider::Endpoint;

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
pub struct PendingTask {
    pub task_id: String,
    pub target: Profile,
    pub endpoint: Endpoint,
    /// How many of its parent's tasks may run at once.
    pub slots: u32,
}

/// The run's task book and scheduler state.
#[derive(Debug)]
pub struct RunAgents {
    tasks: Mutex<Vec<Task>>,
    changed: watch::Sender<u64>,
    flags: Mutex<HashMap<String, Arc<CancelFlag>>>,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    pending: Mutex<Vec<PendingTask>>,
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

    /// Changes task `id` and tells the waiters; the task as changed.
    pub fn update(&self, id: &str, f: impl FnOnce(&mut Task)) -> Option<Task> {
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

    /// Marks the tasks the parent has seen.
    pub fn mark_delivered(&self, ids: &[String]) {
        let mut tasks = lock(&self.tasks);
        for t in tasks.iter_mut() {
            if ids.contains(&t.task_id) {
                t.delivered = true;
            }
        }
    }

    /// The cancel flag of `task`.
    pub fn flag(&self, task: &str) -> Arc<CancelFlag> {
        Arc::clone(lock(&self.flags).entry(task.to_owned()).or_default())
    }

    /// The semaphore bounding how many of `parent`'s tasks run at once.
    pub fn slots(&self, parent: &str, limit: u32) -> Arc<Semaphore> {
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

    /// How many tasks the run holds.
    pub fn len(&self) -> usize {
        lock(&self.tasks).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts tasks read back after a restart into the book as they are — none is started again —
    /// so they can be awaited, and later tasks are numbered after them.
    pub fn restore(&self, restored: Vec<Task>) {
        lock(&self.tasks).extend(restored);
        self.changed.send_modify(|v| *v += 1);
    }

    /// Registers a queued task of `parent` for `target` and keeps it pending until
    /// [`RunAgents::take_pending`]; the task as registered.
    pub fn register(
        &self,
        parent: &str,
        target: Profile,
        endpoint: Endpoint,
        brief: &str,
        slots: u32,
    ) -> Task {
        let task = {
            let mut tasks = lock(&self.tasks);
            let task = Task {
                task_id: format!("task-{}", tasks.len() + 1),
                parent_invocation_id: parent.to_owned(),
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
        self.changed.send_modify(|v| *v += 1);
        lock(&self.pending).push(PendingTask {
            task_id: task.task_id.clone(),
            target,
            endpoint,
            slots,
        });
        task
    }

    /// The registered tasks that have not started yet; they are the caller's to start.
    pub fn take_pending(&self) -> Vec<PendingTask> {
        std::mem::take(&mut *lock(&self.pending))
    }

    /// The delegation target `(parent, profile id)` as the parent first read it.
    pub fn known_target(&self, parent: &str, profile_id: &str) -> Option<(Profile, Endpoint)> {
        lock(&self.targets)
            .get(&(parent.to_owned(), profile_id.to_owned()))
            .cloned()
    }

    /// Remembers a delegation target for the rest of the parent's invocation.
    pub fn remember_target(
        &self,
        parent: &str,
        profile_id: &str,
        target: Profile,
        endpoint: Endpoint,
    ) {
        lock(&self.targets).insert(
            (parent.to_owned(), profile_id.to_owned()),
            (target, endpoint),
        );
    }

    /// Cancels `parent`'s unfinished tasks (all of the run's when `None`) and waits a bounded time
    /// for them to end, so their records land before the run's end.
    pub async fn cancel_and_wait(&self, parent: Option<&str>) {
        let ids = self.cancel(parent);
        if !ids.is_empty() {
            self.wait_terminal(&ids, CHILD_WIND_DOWN).await;
        }
    }
}
