//! The runtime-driven loop: `StartRun` creates the run and drives its owner — the root
//! invocation, then each handoff target — against a model endpoint until it finishes, fails, runs
//! out of rounds or is cancelled. One invocation is driven by [`invocation::drive_invocation`]
//! (model calls, history, drift recovery, the same turn pipeline as host-driven calls); delegated
//! children run through it too (the `children` layer).

mod held;
pub mod invocation;
mod model_call;
mod resume;
mod retry;
mod trim;

use std::sync::Arc;

use serde_json::Value;
use toolplane_core::error::ErrorClass;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolChoice;
use toolplane_core::{Profile, builtin};

use crate::context::Runtime;
use crate::context::held::LoopStart;
use crate::context::ports::ModelCall;
use crate::error::RuntimeError;
use crate::lifecycle::NewRun;
use crate::lifecycle::runs::unfinished_end;
use crate::model::provider::{Endpoint, user_message};
use crate::pipeline::HandedOff;
use crate::state::{Driver, Failure, Invocation, Run, Stop};
pub use invocation::drive_invocation;
pub use resume::{locate, resume, stored_endpoint, take_over_orphans};

/// A runtime-driven run to start: the run, the model endpoint its spec names (if any) and the
/// spec's round limit (0: the snapshot's).
#[derive(Debug, Clone, Default)]
pub struct RunStart {
    pub run: NewRun,
    pub endpoint: Option<Endpoint>,
    pub max_rounds: u32,
}

/// Validates the spec, creates the run and starts driving it in the background.
pub async fn start(rt: Arc<Runtime>, spec: RunStart) -> Result<Arc<Run>, RuntimeError> {
    let RunStart {
        run: mut new_run,
        endpoint,
        max_rounds,
    } = spec;
    if new_run.initial_user_message.trim().is_empty() {
        return Err(RuntimeError::invalid(
            "a run spec needs an initial user message",
        ));
    }
    // A run that could never open its first invocation is refused before anything is created.
    if new_run.profile_id.is_empty() {
        return Err(RuntimeError::invalid("a run spec needs a profile id"));
    }
    let Some(profile) = rt.profile_in(&new_run.cell_id, &new_run.profile_id).await? else {
        return Err(RuntimeError::not_found(format!(
            "no profile `{}` in cell `{}`",
            new_run.profile_id,
            if new_run.cell_id.is_empty() {
                "default"
            } else {
                &new_run.cell_id
            }
        )));
    };
    let endpoint = match endpoint {
        Some(e) => e,
        None => profile_endpoint(&rt, &profile)?,
    };
    new_run.driver = Some(Driver::Runtime);
    if rt.checkpoints_on() {
        new_run.loop_start = Some(LoopStart {
            endpoint: Some(resume::stored_endpoint(&endpoint)),
            max_rounds,
        });
    }
    let run = rt.create_run(new_run).await?;
    let driven = run.clone();
    tokio::spawn(async move {
        if let Err(e) = drive(&rt, &driven, endpoint, max_rounds).await {
            record_failure(&rt, &driven, e).await;
        }
    });
    Ok(run)
}

/// Records a loop's system failure as the run's end.
async fn record_failure(rt: &Runtime, run: &Run, e: RuntimeError) {
    tracing::warn!(run = %run.id, error = %e, "run loop failed");
    let retryable = e.code().class() == ErrorClass::System;
    let failure = Failure {
        code: e.code().as_str().into(),
        message: e.0.message.clone(),
        retryable,
    };
    let status = unfinished_end(&run.snapshot());
    if let Err(e2) = rt.end_run(run, status, Some(failure)).await {
        tracing::warn!(run = %run.id, error = %e2, "recording the run's failure failed");
    }
}

/// The model endpoint of a run whose spec names none: the profile's, resolved now so that a run
/// with no usable model is refused before it exists and the first invocation opens in its format.
fn profile_endpoint(rt: &Runtime, profile: &Profile) -> Result<Endpoint, RuntimeError> {
    rt.endpoint_of(profile)
        .ok_or_else(|| {
            RuntimeError::invalid(format!(
                "profile `{}` has no model endpoint and the run spec names none: name one in the spec (`toolplane run start --base-url … --model …`, `OPENAI_BASE_URL`, or `--script`) or give the profile a `model`",
                profile.id
            ))
        })?
        .map_err(|e| {
            RuntimeError::invalid(format!(
                "profile `{}`'s model endpoint cannot be used: {e}",
                profile.id
            ))
        })
}

/// How a driven invocation ended.
#[derive(Debug)]
pub enum LoopEnd {
    /// `workspace.finish`: the run has finished.
    Finished,
    /// `task.return`: the child's result is in its invocation.
    Returned,
    /// `agent.handoff`: the target's invocation owns the run now.
    HandedOff(Box<HandedOff>),
    /// The invocation failed; for a root this fails the run.
    Failed(Failure),
    /// The run was cancelled, or the task's parent finished.
    Cancelled,
    /// Closed from outside (the run ended meanwhile).
    Closed,
}

/// Drives the run's owner to the run's end, following handoffs. An `Err` is a system failure the
/// caller records.
async fn drive(
    rt: &Runtime,
    run: &Arc<Run>,
    endpoint: Endpoint,
    spec_rounds: u32,
) -> Result<(), RuntimeError> {
    let record = run.snapshot();
    let opened = rt
        .open_invocation(
            run,
            &record.profile_id,
            ExitPolicy::Root,
            endpoint.format(),
            ToolChoice::Auto,
            Driver::Runtime,
        )
        .await?;
    let client = rt
        .ports
        .models
        .client(&run.cell, endpoint)
        .map_err(RuntimeError::invalid)?;
    let system = system_prompt(&opened.invocation, &record.system_prompt).await;
    let history: Vec<Value> = vec![user_message(
        client.endpoint().format(),
        &record.initial_user_message,
    )];
    drive_owner(
        rt,
        run,
        opened.invocation,
        client,
        system,
        history,
        spec_rounds,
    )
    .await
}

/// Drives the run's owner `inv` from `history` to the run's end, following handoffs: from a new
/// run's first message, or from a held turn rebuilt after a restart.
async fn drive_owner(
    rt: &Runtime,
    run: &Arc<Run>,
    mut inv: Arc<Invocation>,
    mut client: Box<dyn ModelCall>,
    mut system: String,
    mut history: Vec<Value>,
    spec_rounds: u32,
) -> Result<(), RuntimeError> {
    let record = run.snapshot();
    let stop = Stop::run(Arc::clone(run));

    loop {
        let end = drive_invocation(
            rt,
            run,
            &inv,
            client.as_ref(),
            &system,
            history,
            spec_rounds,
            &stop,
        )
        .await?;
        match end {
            LoopEnd::Failed(failure) => return end_failed(rt, run, failure).await,
            LoopEnd::HandedOff(h) => {
                // The target runs on its own model endpoint when it has one, else on the run's.
                if let Some(e) = h.endpoint
                    && let Ok(c) = rt.ports.models.client(&run.cell, e)
                {
                    client = c;
                }
                inv = h.opened.invocation;
                let format = inv.inner.lock().await.format;
                if format != client.endpoint().format() {
                    return Err(RuntimeError::invalid(
                        "the handoff target's invocation speaks a different format than its model endpoint",
                    ));
                }
                system = system_prompt(&inv, &record.system_prompt).await;
                history = vec![user_message(
                    format,
                    &format!(
                        "Another agent handed this run over to you. Its brief:\n\n{}",
                        h.brief
                    ),
                )];
            }
            _ => return Ok(()),
        }
    }
}

async fn end_failed(rt: &Runtime, run: &Run, failure: Failure) -> Result<(), RuntimeError> {
    rt.end_run(run, unfinished_end(&run.snapshot()), Some(failure))
        .await
}

/// The system prompt: the spec's, the profile's instructions, and how to end the run.
async fn system_prompt(inv: &Invocation, spec_prompt: &str) -> String {
    let inner = inv.inner.lock().await;
    let mut parts = Vec::new();
    if !spec_prompt.trim().is_empty() {
        parts.push(spec_prompt.trim().to_owned());
    }
    if let Some(i) = &inner.profile.instructions {
        parts.push(i.clone());
    }
    let commit = inner
        .snapshot
        .builtin(builtin::WORKSPACE_COMMIT)
        .map(|b| b.alias.to_string());
    let finish = inner
        .snapshot
        .builtin(builtin::WORKSPACE_FINISH)
        .map(|b| b.alias.to_string());
    if let (Some(c), Some(f)) = (commit, finish) {
        parts.push(format!(
            "Work in your workspace with your tools. Put your answer in {}main.md, publish it with `{c}`, and end with `{f}`. Do not answer in plain text.",
            inner.snapshot.workspace.message_artifact_root
        ));
    }
    parts.join("\n\n")
}
