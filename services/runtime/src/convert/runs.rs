//! Runs, run specs, failures and delegated tasks to and from the runtime service's messages.

use toolplane_core::error::CoreError;
use toolplane_core::run_budget::RunBudgetLimits;
use toolplane_proto::v1 as pb;

use super::run_tools_to_entries;
use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::lifecycle::NewRun;
use crate::model::provider::{Endpoint, check_api_key_env};
use crate::runloop::RunStart;
use crate::state::{Driver, Failure, RunToolHostRecord, Task, TaskStatus};
use crate::tools::agents::capsule;

/// Per-run tool hosts from a run spec, as the run record keeps them; a malformed tool refuses the
/// whole spec.
pub fn run_tool_hosts(hosts: &[pb::RunToolHost]) -> Result<Vec<RunToolHostRecord>, CoreError> {
    hosts
        .iter()
        .map(|h| {
            let entries = run_tools_to_entries(std::slice::from_ref(h))?;
            Ok(RunToolHostRecord {
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
        .collect()
}

/// A host-driven run from `CreateRun`.
pub fn new_run_from_create(r: pb::CreateRunRequest) -> Result<NewRun, RuntimeError> {
    let run_tools = run_tool_hosts(&r.tools)?;
    let roots = r.roots.unwrap_or_default();
    let chat = r.chat.unwrap_or_default();
    Ok(NewRun {
        run_id: r.run_id,
        cell_id: r.cell_id,
        actor_id: r.actor_id,
        session_id: r.session_id,
        chat_id: chat.chat_id,
        message_id: chat.message_id,
        background: r.mode == pb::RunMode::Background as i32,
        profile_id: r.profile_id,
        visible_roots: roots.visible,
        writable_roots: roots.writable,
        run_tools,
        plan_node_policy_json: r.plan_node_policy_json,
        world_info_json: r.world_info_activation_json,
        labels: r.labels.into_iter().collect(),
        allow_paths: r.allow_paths,
        deny_paths: r.deny_paths,
        work_dir: r.work_dir,
        system_prompt: String::new(),
        initial_user_message: String::new(),
        driver: Some(Driver::Host),
        run_budget: run_budget(r.run_budget),
        loop_start: None,
    })
}

/// A runtime-driven run from `StartRun`; the spec's model endpoint takes this runtime's timeout
/// and retries where it sets none.
pub fn run_start(spec: pb::RunSpec, cfg: &RuntimeConfig) -> Result<RunStart, RuntimeError> {
    let endpoint = match &spec.model {
        Some(m) => Some(
            check_api_key_env(m.api_key_env.as_deref(), &cfg.env_allow)
                .and_then(|()| Endpoint::from_pb(m, cfg.model_timeout, cfg.model_max_retries))
                .and_then(|e| {
                    e.check_egress(&cfg.egress.for_cell(&spec.cell_id))
                        .map(|()| e)
                })
                .map_err(RuntimeError::invalid)?,
        ),
        None => None,
    };
    let run_tools = run_tool_hosts(&spec.tools)?;
    let roots = spec.roots.unwrap_or_default();
    let chat = spec.chat.unwrap_or_default();
    Ok(RunStart {
        run: NewRun {
            run_id: spec.run_id,
            cell_id: spec.cell_id,
            actor_id: spec.actor_id,
            session_id: spec.session_id,
            chat_id: chat.chat_id,
            message_id: chat.message_id,
            background: spec.mode == pb::RunMode::Background as i32,
            profile_id: spec.profile_id,
            visible_roots: roots.visible,
            writable_roots: roots.writable,
            run_tools,
            plan_node_policy_json: spec.plan_node_policy_json,
            world_info_json: spec.world_info_activation_json,
            labels: spec.labels.into_iter().collect(),
            allow_paths: spec.allow_paths,
            deny_paths: spec.deny_paths,
            work_dir: spec.work_dir,
            system_prompt: spec.system_prompt,
            initial_user_message: spec.initial_user_message,
            driver: Some(Driver::Runtime),
            run_budget: run_budget(spec.run_budget),
            // Set when the run starts (with the endpoint resolved).
            loop_start: None,
        },
        endpoint,
        max_rounds: spec.max_rounds,
    })
}

/// A request's run budget; its limits are checked when the run is created.
fn run_budget(b: Option<pb::RunBudget>) -> RunBudgetLimits {
    let b = b.unwrap_or_default();
    RunBudgetLimits {
        max_tool_calls: b.max_tool_calls,
        max_model_tokens: b.max_model_tokens,
    }
}

pub fn failure_pb(f: &Failure) -> pb::ErrorInfo {
    let class = toolplane_core::ErrorCode::lookup(&f.code).map(|c| c.class());
    pb::ErrorInfo {
        code: f.code.clone(),
        error_class: (match class {
            Some(toolplane_core::ErrorClass::Recoverable) => pb::ErrorClass::Recoverable,
            Some(toolplane_core::ErrorClass::PolicyDenied) => pb::ErrorClass::PolicyDenied,
            Some(toolplane_core::ErrorClass::ProviderContract) => pb::ErrorClass::ProviderContract,
            Some(toolplane_core::ErrorClass::InvalidInput) => pb::ErrorClass::InvalidInput,
            _ => pb::ErrorClass::System,
        }) as i32,
        message: f.message.clone(),
        retryable: f.retryable,
        details_json: None,
    }
}

pub fn task_status_pb(s: TaskStatus) -> i32 {
    (match s {
        TaskStatus::Queued => pb::TaskStatus::Queued,
        TaskStatus::Running => pb::TaskStatus::Running,
        TaskStatus::Completed => pb::TaskStatus::Completed,
        TaskStatus::Failed => pb::TaskStatus::Failed,
        TaskStatus::Cancelled => pb::TaskStatus::Cancelled,
    }) as i32
}

/// A task as the host reads it.
pub fn task_pb(t: &Task) -> pb::ChildTaskResult {
    pb::ChildTaskResult {
        task_id: t.task_id.clone(),
        child_invocation_id: t.child_invocation_id.clone(),
        profile_id: t.profile_id.clone(),
        status: task_status_pb(t.status),
        content: capsule(t),
        result_path: t
            .result
            .as_ref()
            .map(|r| r.result_path.clone())
            .unwrap_or_default(),
        failure: t.failure.as_ref().map(failure_pb),
    }
}
