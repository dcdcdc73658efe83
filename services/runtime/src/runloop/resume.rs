//! Runtime-driven runs after a restart or a takeover: a run whose owner had a turn held for a
//! person, or (cluster mode) was between turns or in one, was rebuilt by the lifecycle layer (its
//! invocation open, with the loop's [`Conversation`]); this drives it on from there — it settles
//! a held turn once decided, runs an interrupted turn again (`tool.outcome_unknown` for the calls
//! whose outcome is unknown), calls the model with the results and goes on to the run's end as
//! if nothing had stopped. The endpoint is stored without its key: the key's environment variable is read again
//! here (docs/runtime.md, "Restarts").

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolplane_core::error as codes;
use toolplane_core::profile::ModelKind;
use toolplane_model::ProviderFormat;

use super::{drive, drive_owner, record_failure};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::RunDriver;
use crate::model::provider::Endpoint;
use crate::state::{Driver, Run};

/// An endpoint as a held turn's record keeps it: everything but the key itself.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredEndpoint {
    kind: ModelKind,
    base_url: String,
    model: String,
    api_key_env: Option<String>,
    timeout_ms: u64,
    max_retries: u32,
    max_output_tokens: Option<u32>,
    temperature: Option<f64>,
    extra_body: Map<String, Value>,
    headers: Vec<(String, String)>,
    script: Option<Vec<Value>>,
    format: ProviderFormat,
    context_budget_tokens: Option<u32>,
}

/// `e` as a held turn's record keeps it (no key).
pub fn stored_endpoint(e: &Endpoint) -> Value {
    let stored = StoredEndpoint {
        kind: e.kind,
        base_url: e.base_url.clone(),
        model: e.model.clone(),
        api_key_env: e.api_key_env.clone(),
        timeout_ms: u64::try_from(e.timeout.as_millis()).unwrap_or(u64::MAX),
        max_retries: e.max_retries,
        max_output_tokens: e.max_output_tokens,
        temperature: e.temperature,
        extra_body: e.extra_body.clone(),
        headers: e.headers.clone(),
        script: e.script.clone(),
        format: e.format,
        context_budget_tokens: e.context_budget_tokens,
    };
    serde_json::to_value(stored).unwrap_or(Value::Null)
}

/// The endpoint a record keeps, its key read again from its variable.
fn endpoint_of(v: &Value) -> Result<Endpoint, String> {
    let s: StoredEndpoint = serde_json::from_value(v.clone())
        .map_err(|e| format!("the held turn's model endpoint cannot be read: {e}"))?;
    let api_key = match s.api_key_env.as_deref() {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            format!("the environment variable `{var}` holding the api key is not set")
        })?),
        None => None,
    };
    Ok(Endpoint {
        kind: s.kind,
        base_url: s.base_url,
        model: s.model,
        api_key,
        api_key_env: s.api_key_env,
        timeout: Duration::from_millis(s.timeout_ms),
        max_retries: s.max_retries,
        max_output_tokens: s.max_output_tokens,
        temperature: s.temperature,
        extra_body: s.extra_body,
        headers: s.headers,
        script: s.script,
        format: s.format,
        context_budget_tokens: s.context_budget_tokens,
    })
}

/// Who drives run `run_id` of `cell`, taking it over when its lease is free
/// ([`Runtime::driver_of`]); a runtime-driven run taken over here is driven on from its
/// checkpoint.
pub async fn locate(
    rt: &Arc<Runtime>,
    cell: &str,
    run_id: &str,
) -> Result<RunDriver, RuntimeError> {
    let found = rt.driver_of(cell, run_id).await?;
    if let RunDriver::Here {
        run,
        taken_over: true,
    } = &found
    {
        let record = run.snapshot();
        if record.driver == Driver::Runtime && !record.status.is_terminal() {
            resume(Arc::clone(rt), Arc::clone(run));
        }
    }
    Ok(found)
}

/// Takes over every open run over the store that no runtime holds (cluster mode): its driver died,
/// or stopped and handed it over. Runs a live runtime holds are left to it.
pub async fn take_over_orphans(rt: &Arc<Runtime>) {
    let runs = match rt.checkpointed_runs().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "listing the open runs to take over failed");
            return;
        }
    };
    for (cell, run_id) in runs {
        if rt.is_draining() {
            return;
        }
        if let Ok(run) = rt.run_in(&run_id, Some(&cell))
            && !run.lease_lost()
        {
            continue;
        }
        match locate(rt, &cell, &run_id).await {
            // Left behind by a driver that ended the run but could not remove it.
            Ok(RunDriver::Ended) => rt.forget_held_of_run(&cell, &run_id).await,
            Ok(_) => {}
            // A run whose creator stopped before saving its record.
            Err(e) if e.code() == codes::RUNTIME_NOT_FOUND => rt.drop_unborn(&cell, &run_id).await,
            Err(e) => tracing::warn!(run = %run_id, error = %e, "taking an open run over failed"),
        }
    }
}

/// Drives a rebuilt runtime-driven run on, in the background; a failure to go on fails the run.
pub fn resume(rt: Arc<Runtime>, run: Arc<Run>) {
    tokio::spawn(async move {
        if let Err(e) = drive_on(&rt, &run).await {
            record_failure(&rt, &run, e).await;
        }
    });
}

/// Drives a rebuilt run on from its active invocation's checkpoint, or — when its driver stopped
/// before the loop's first checkpoint — starts the loop again from the first message.
async fn drive_on(rt: &Runtime, run: &Arc<Run>) -> Result<(), RuntimeError> {
    let record = run.snapshot();
    let rebuilt = match rt.invocation(&record.active_invocation_id) {
        Ok(inv) => {
            let conversation = inv.inner.lock().await.conversation.take();
            conversation.map(|c| (inv, c))
        }
        Err(_) => None,
    };
    let Some((inv, conversation)) = rebuilt else {
        let start = rt
            .loop_start(&run.cell, &run.id)
            .await
            .and_then(|s| Some((s.endpoint?, s.max_rounds)));
        let Some((endpoint, max_rounds)) = start else {
            return Err(RuntimeError::invalid(
                "the rebuilt run has neither a checkpoint nor a start to go on from",
            ));
        };
        let endpoint = endpoint_of(&endpoint).map_err(RuntimeError::invalid)?;
        return drive(rt, run, endpoint, max_rounds).await;
    };
    let endpoint = endpoint_of(&conversation.endpoint).map_err(RuntimeError::invalid)?;
    let client = rt
        .ports
        .models
        .client(&run.cell, endpoint)
        .map_err(RuntimeError::invalid)?;
    drive_owner(
        rt,
        run,
        inv,
        client,
        conversation.system,
        conversation.history,
        conversation.spec_rounds,
    )
    .await
}
