//! The tool-call pipeline (FEATURES E1): for each decoded call of a turn, one at a time —
//! requested → gate → governance → cycle check → started → executor → identity check → large-result
//! view → audit → completed / failed, journalled.
//!
//! Host-driven `ExecuteToolCalls` and the runtime-driven loop both run turns through [`run_turn`],
//! so the two modes cannot drift apart. The invocation's lock is held by the caller for the whole
//! turn: calls of one invocation never interleave.
//!
//! Durability: a call's audit objects (arguments, result, readable view) are put first and its
//! journal records appended after them in one group, so one call costs one group commit; a record
//! never names an object that could be missing.

use std::time::Instant;

use tracing::Instrument;

use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolplane_core::builtin;
use toolplane_core::category;
use toolplane_core::cycle::{self, CycleVerdict};
use toolplane_core::error::{
    self as codes, AGENT_CYCLE_DETECTED, AGENT_TOOL_AFTER_FINISH, ErrorClass, POLICY_DENIED,
    TOOL_EXECUTOR_UNAVAILABLE, TOOL_INVALID_ARGUMENTS,
};
use toolplane_core::governance::{self, GovernanceContext};
use toolplane_core::invocation::{ToolArguments, ToolInvocation};
use toolplane_core::policy::DeniedCallMode;
use toolplane_core::result::AgentToolResult;
use toolplane_core::snapshot::{Executor, ToolBinding};
use toolplane_proto::v1 as pb;

use crate::control::{self, Effect};
use crate::convert;
use crate::error::RuntimeError;
use crate::journal::{AuditObject, Event};
use crate::runtime::Runtime;
use crate::state::{Failure, Invocation, InvocationInner, InvocationStatus, RunMode};

/// Characters of a large result the model sees inline (seed 000 §7.0).
pub const PREVIEW_CHARS: usize = 3_000;
/// Longest physical line of a readable view; longer lines are wrapped in the view only.
const VIEW_LINE_CHARS: usize = 2_000;

/// Whether a call's effects are known (FEATURES M5), as the executor reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Known,
    NotSent,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Known => "known",
            Outcome::NotSent => "not_sent",
            Outcome::Unknown => "unknown",
        }
    }
    pub fn pb(self) -> i32 {
        (match self {
            Outcome::Known => pb::ExecutionOutcome::Known,
            Outcome::NotSent => pb::ExecutionOutcome::NotSent,
            Outcome::Unknown => pb::ExecutionOutcome::Unknown,
        }) as i32
    }
}

/// What one call produced, for the response's `ToolCallDetail`.
#[derive(Debug, Clone)]
pub struct CallDetail {
    pub call_id: String,
    pub tool_id: String,
    pub alias: String,
    pub outcome: Outcome,
    pub elapsed_ms: u64,
    pub args_path: String,
    pub result_path: String,
    pub readable_view_path: String,
}

/// How a turn ended the invocation, if it did.
#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    Finished,
    Returned,
    HandedOff(Box<crate::agents::HandoffRequest>),
    Failed(Failure),
}

#[derive(Debug, Default)]
pub struct TurnOutcome {
    pub results: Vec<AgentToolResult>,
    pub details: Vec<CallDetail>,
    pub terminal: Option<Terminal>,
}

/// The audit file name of a call: `call_<first 8 bytes of sha256(call id) in hex>` (FEATURES E4).
pub fn call_file(call_id: &str) -> String {
    let digest = Sha256::digest(call_id.as_bytes());
    let mut name = String::from("call_");
    for b in &digest[..8] {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// Runs one turn's decoded calls. A provider-contract violation found by the gate ends the turn with
/// an error (the invocation fails); everything else becomes a result.
pub async fn run_turn(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    calls: Vec<ToolInvocation>,
) -> Result<TurnOutcome, RuntimeError> {
    let mut out = TurnOutcome::default();
    let last = calls.len().saturating_sub(1);
    let all_calls = calls.clone();
    let mut terminal_done = false;
    let mut last_mutation: Option<String> = None;
    for (index, call) in calls.into_iter().enumerate() {
        let started = Instant::now();
        let Some(binding) = inner.snapshot.binding(&call.tool_id).cloned() else {
            return Err(RuntimeError::new(
                codes::MODEL_UNKNOWN_TOOL_ALIAS,
                format!("`{}` is not in this invocation's snapshot", call.tool_id),
            ));
        };
        let file = call_file(&call.call_id);
        let args_path = format!("tool-args/{}/{file}.json", inv.id);
        let result_path = format!("tool-results/{}/{file}.json", inv.id);
        let base = json!({
            "round": inner.round,
            "invocationId": inv.id,
            "callId": call.call_id,
            "toolId": call.tool_id.to_string(),
            "snapshotId": inner.snapshot.snapshot_id,
            "alias": binding.alias.as_str(),
        });
        let mut events = vec![Event::new("tool_call_requested", base.clone()).inv(&inv.id)];
        let is_terminal = builtin::is_terminal(&call.tool_id);

        let mut outcome = Outcome::NotSent;
        let mut raw: Option<String> = None;
        let mut effect = Effect::None;
        let mut extra_objects: Vec<AuditObject> = Vec::new();
        let mut extra_events: Vec<Event> = Vec::new();
        let mut stop: Option<Failure> = None;
        let mut result = if terminal_done || (is_terminal && index != last) {
            AgentToolResult::error(
                &call,
                AGENT_TOOL_AFTER_FINISH,
                if terminal_done {
                    "a finishing tool was already called in this turn; calls after it are not run"
                        .to_owned()
                } else {
                    format!(
                        "`{}` ends your work, so it must be the last call of a turn; call it again next turn after your other calls",
                        binding.alias
                    )
                },
            )
        } else {
            match &call.arguments {
                ToolArguments::Invalid { reason, .. } => AgentToolResult::error(
                    &call,
                    TOOL_INVALID_ARGUMENTS,
                    format!(
                        "{reason}; send the arguments as one JSON object matching the tool's schema"
                    ),
                ),
                ToolArguments::Object { value: args } => {
                    match inner.gate.check_and_reserve(&inner.turn, &call) {
                        Err(e) if e.class() == ErrorClass::ProviderContract => {
                            rt.metrics.gate_refusal(e.code.as_str());
                            return Err(e.into());
                        }
                        Err(e) => {
                            rt.metrics.gate_refusal(e.code.as_str());
                            AgentToolResult::from_error(&call, &e)
                        }
                        Ok(_) => match govern(rt, inv, inner, &binding, &call, args) {
                            Some(Err(fail)) => {
                                stop = Some(fail.clone());
                                AgentToolResult::error(&call, POLICY_DENIED, fail.message)
                            }
                            Some(Ok(denied)) => denied,
                            None => {
                                let verdict = observe_cycle(inner, &binding, &call, args);
                                match verdict {
                                    CycleVerdict::Stop { streak } => {
                                        events.push(Event::new("cycle_detected", json!({"invocationId": inv.id, "toolId": call.tool_id.to_string(), "streak": streak, "verdict": "stop"})).inv(&inv.id).warn());
                                        let message = format!(
                                            "`{}` was called {streak} times in a row; the invocation is stopped to break the loop",
                                            binding.alias
                                        );
                                        stop = Some(Failure {
                                            code: AGENT_CYCLE_DETECTED.as_str().into(),
                                            message: message.clone(),
                                            retryable: true,
                                        });
                                        AgentToolResult::error(&call, AGENT_CYCLE_DETECTED, message)
                                    }
                                    _ => {
                                        events.push(
                                            Event::new("tool_call_started", base.clone())
                                                .inv(&inv.id),
                                        );
                                        let span = tool_span(inv, &binding, &call);
                                        let executed = Instant::now();
                                        let d = dispatch(rt, inv, inner, &binding, &call, args)
                                            .instrument(span.clone())
                                            .await?;
                                        record_call(rt, &span, &call, &d, executed);
                                        outcome = d.outcome;
                                        raw = d.raw;
                                        effect = d.effect;
                                        extra_objects = d.objects;
                                        extra_events = d.events;
                                        let mut r = d.result;
                                        r.verify_identity(&call)?;
                                        if let CycleVerdict::Warn { streak } = verdict {
                                            events.push(Event::new("cycle_detected", json!({"invocationId": inv.id, "toolId": call.tool_id.to_string(), "streak": streak, "verdict": "warn"})).inv(&inv.id).warn());
                                            r.content.push_str(&format!("\n\nNote: you have called `{}` {streak} times in a row. If you are not making progress, change your approach.", binding.alias));
                                        }
                                        r
                                    }
                                }
                            }
                        },
                    }
                }
            }
        };

        // Large external results become a readable view plus a preview (FEATURES E7).
        let mut objects = Vec::with_capacity(3);
        let mut view_path = String::new();
        if matches!(
            binding.executor,
            Executor::McpProxy { .. } | Executor::External { .. }
        ) && result.content.chars().count()
            > inner.snapshot.mcp_result_inline_char_limit as usize
        {
            view_path = format!("tool-results/{}/{file}.txt", inv.id);
            let full = result.model_content().into_owned();
            objects.push(AuditObject {
                path: view_path.clone(),
                content: wrap_long_lines(&full).into_bytes(),
                content_type: "text/plain",
            });
            result.content = large_preview(&full, &view_path, inner);
            events.push(Event::new("tool_result_readable_view_stored", json!({"invocationId": inv.id, "callId": call.call_id, "path": view_path, "chars": full.chars().count()})).inv(&inv.id));
        }

        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        objects.append(&mut extra_objects);
        objects.push(AuditObject {
            path: args_path.clone(),
            content: serde_json::to_vec(&ArgsAudit {
                call_id: &call.call_id,
                tool_id: &call.tool_id,
                alias: binding.alias.as_str(),
                arguments: ArgsView::of(&call.arguments),
                provider_metadata: &call.provider_metadata,
            })
            .unwrap_or_default(),
            content_type: "application/json",
        });
        objects.push(AuditObject {
            path: result_path.clone(),
            content: serde_json::to_vec(&ResultAudit {
                result: &result,
                outcome: outcome.as_str(),
                elapsed_ms,
                raw: raw
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<Value>(r).ok()),
            })
            .unwrap_or_default(),
            content_type: "application/json",
        });
        let mut done = base.clone();
        if let Some(obj) = done.as_object_mut() {
            obj.insert("isError".into(), json!(result.is_error));
            obj.insert("errorCode".into(), json!(result.error_code));
            obj.insert("elapsedMs".into(), json!(elapsed_ms));
            obj.insert("outcome".into(), json!(outcome.as_str()));
            obj.insert("resourceRefs".into(), json!(result.resource_refs));
            obj.insert("argsPath".into(), json!(args_path));
            obj.insert("resultPath".into(), json!(result_path));
        }
        events.push(
            Event::new(
                if result.is_error {
                    "tool_call_failed"
                } else {
                    "tool_call_completed"
                },
                done,
            )
            .inv(&inv.id),
        );
        events.push(
            Event::new(
                "tool_result_stored",
                json!({"invocationId": inv.id, "callId": call.call_id, "path": result_path}),
            )
            .inv(&inv.id),
        );
        events.extend(effect_events(inv, &effect, &call, &result));
        events.append(&mut extra_events);
        inv.run
            .journal
            .append(&rt.peers, inv.run.epoch(), objects, events)
            .await?;
        // Tasks this call delegated start only now that their registration is journalled.
        crate::agents::launch_pending(rt, &inv.run);

        if !result.is_error {
            if is_terminal {
                terminal_done = true;
            }
            if (call.tool_id.is_builtin(builtin::WORKSPACE_WRITE_FILE)
                || call.tool_id.is_builtin(builtin::WORKSPACE_APPLY_PATCH))
                && let ToolArguments::Object { value: args } = &call.arguments
                && let Some(p) = args.get("path").and_then(Value::as_str)
            {
                last_mutation = Some(p.to_owned());
            }
        }
        match effect {
            Effect::Finished if !result.is_error => out.terminal = Some(Terminal::Finished),
            Effect::Returned if !result.is_error => out.terminal = Some(Terminal::Returned),
            Effect::HandedOff(request) if !result.is_error => {
                out.terminal = Some(Terminal::HandedOff(request));
            }
            _ => {}
        }
        out.details.push(CallDetail {
            call_id: call.call_id.clone(),
            tool_id: call.tool_id.to_string(),
            alias: binding.alias.to_string(),
            outcome,
            elapsed_ms,
            args_path,
            result_path,
            readable_view_path: view_path,
        });
        out.results.push(result);
        if let Some(fail) = stop {
            // Every call of the turn gets an answer (providers refuse a history with an unanswered
            // call); the ones after the stop were not run.
            for rest in &all_calls[index + 1..] {
                out.results.push(AgentToolResult::error(
                    rest,
                    AGENT_TOOL_AFTER_FINISH,
                    format!("not run: {}", fail.message),
                ));
            }
            out.terminal = Some(Terminal::Failed(fail));
            break;
        }
    }
    // A cancelled run publishes nothing more.
    if out.terminal.is_none() && !inv.run.is_cancelled() {
        auto_publish(rt, inv, inner, last_mutation).await?;
    }
    Ok(out)
}

/// The call's span, after the OpenTelemetry GenAI conventions: `execute_tool {tool}` with the tool's
/// name and call id, and the run, invocation and cell it belongs to. Arguments and results stay
/// out of spans.
fn tool_span(inv: &Invocation, binding: &ToolBinding, call: &ToolInvocation) -> tracing::Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format!("execute_tool {}", call.tool_id),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.tool_id,
        gen_ai.tool.call.id = %call.call_id,
        gen_ai.tool.type = %call.tool_id.provider().kind(),
        toolplane.tool.alias = %binding.alias,
        run.id = %inv.run.id,
        invocation.id = %inv.id,
        cell.id = %inv.run.cell,
        toolplane.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Metrics and span fields of an executed call.
fn record_call(
    rt: &Runtime,
    span: &tracing::Span,
    call: &ToolInvocation,
    d: &Dispatched,
    started: Instant,
) {
    let tool = call.tool_id.to_string();
    let code = d.result.error_code.as_deref();
    rt.metrics.tool_call(
        &tool,
        call.tool_id.provider().kind(),
        code,
        started.elapsed().as_secs_f64(),
    );
    span.record("toolplane.outcome", d.outcome.as_str());
    if let Some(code) = code {
        span.record("error.type", code);
        span.record("otel.status_code", "ERROR");
    }
}

/// The audit object of a call's arguments (`…/args.json`), serialized straight from the call: the
/// arguments are not copied into a JSON value first.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArgsAudit<'a> {
    call_id: &'a str,
    tool_id: &'a toolplane_core::id::ToolId,
    alias: &'a str,
    arguments: ArgsView<'a>,
    provider_metadata: &'a Option<Value>,
}

/// A call's arguments as audited: the object, or the text that was not one and why.
#[derive(Serialize)]
#[serde(untagged)]
enum ArgsView<'a> {
    Object(&'a Map<String, Value>),
    Invalid { invalid: &'a str, reason: &'a str },
}

impl<'a> ArgsView<'a> {
    fn of(arguments: &'a ToolArguments) -> Self {
        match arguments {
            ToolArguments::Object { value } => ArgsView::Object(value),
            ToolArguments::Invalid { raw, reason } => ArgsView::Invalid {
                invalid: raw,
                reason,
            },
        }
    }
}

/// The audit object of a call's result (`…/result.json`), serialized straight from the result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultAudit<'a> {
    result: &'a AgentToolResult,
    outcome: &'a str,
    elapsed_ms: u64,
    raw: Option<Value>,
}

fn effect_events(
    inv: &Invocation,
    effect: &Effect,
    call: &ToolInvocation,
    result: &AgentToolResult,
) -> Vec<Event> {
    if result.is_error {
        return Vec::new();
    }
    match effect {
        Effect::Committed { path, message_id, auto } => vec![Event::new(
            "chat_message_committed",
            json!({"invocationId": inv.id, "callId": call.call_id, "path": path, "messageId": message_id, "auto": auto}),
        )
        .inv(&inv.id)],
        Effect::Wrote { path, kind } => vec![Event::new(kind, json!({"invocationId": inv.id, "callId": call.call_id, "path": path})).inv(&inv.id)],
        _ => Vec::new(),
    }
}

/// Governance (Hardline → Sandbox → Zone). `None` lets the call run; `Some(Ok(result))` is a
/// policy-denied result; `Some(Err(failure))` fails the run (the policy's `fail_run` mode).
fn govern(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Option<Result<AgentToolResult, Failure>> {
    let denial = inv.run.with(|record| {
        let ctx = GovernanceContext {
            run_cell: &record.cell_id,
            call_cell: &inv.run.cell,
            visible_roots: &inner.snapshot.workspace.visible,
            writable_roots: &inner.snapshot.workspace.writable,
            allow_paths: &record.allow_paths,
            deny_paths: &record.deny_paths,
            work_dir: &record.work_dir,
        };
        governance::check(&rt.cfg.hardline, &ctx, binding.descriptor.id(), args).err()
    })?;
    let message =
        format!("denied by {:?} governance: {}", denial.layer, denial.reason).to_lowercase();
    Some(match inner.snapshot.denied_call_mode {
        DeniedCallMode::Result => Ok(AgentToolResult::error(call, POLICY_DENIED, message)
            .with_structured(json!({"layer": denial.layer, "reason": denial.reason}))),
        DeniedCallMode::FailRun => Err(Failure {
            code: POLICY_DENIED.as_str().into(),
            message,
            retryable: false,
        }),
    })
}

fn observe_cycle(
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> CycleVerdict {
    let args_text = Value::Object(args.clone()).to_string();
    let cat = category::resolve_call(
        &call.tool_id,
        binding.descriptor.annotations(),
        &inner.profile.tools.extra_categories,
        Some(&Value::Object(args.clone())),
    );
    inner.cycle.observe(
        &call.tool_id,
        cat,
        binding.progress_aware,
        cycle::fingerprint(&args_text),
    )
}

/// What an executor produced.
#[derive(Debug)]
pub struct Dispatched {
    pub result: AgentToolResult,
    pub outcome: Outcome,
    pub raw: Option<String>,
    pub effect: Effect,
    /// Extra audit objects stored with the call (a returned task's result files).
    pub objects: Vec<AuditObject>,
    /// Extra journal records of the call (task and delegation events).
    pub events: Vec<Event>,
}

impl Dispatched {
    /// A result whose effects are known, from an executor inside the runtime.
    pub fn known(result: AgentToolResult, effect: Effect) -> Self {
        Dispatched {
            result,
            outcome: Outcome::Known,
            raw: None,
            effect,
            objects: Vec::new(),
            events: Vec::new(),
        }
    }
}

async fn dispatch(
    rt: &Runtime,
    inv: &Invocation,
    inner: &mut InvocationInner,
    binding: &ToolBinding,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let timeout = rt.cfg.executor_timeout;
    // A cancelled run starts no more calls; the rest of its turn is answered as not sent.
    if inv.run.is_cancelled() {
        return Ok(cancelled(
            call,
            "the run was cancelled before the call was sent",
            Outcome::NotSent,
        ));
    }
    match &binding.executor {
        Executor::RuntimeControl => control::execute(rt, inv, inner, call, args).await,
        Executor::SubAgent { profile_id } => {
            crate::agents::run_sub_agent(rt, inv, inner, call, args, profile_id).await
        }
        Executor::Workspace => {
            let req = execute_request(inv, inner, call, timeout);
            match rt.peers.workspace_executor().execute(req).await {
                Ok(resp) => Ok(from_response(call, resp.into_inner())?),
                Err(status) => Err(RuntimeError::dependency(format!(
                    "the workspace service failed `{}`: {}",
                    call.tool_id,
                    status.message()
                ))),
            }
        }
        Executor::McpProxy { .. } | Executor::External { .. } => {
            let mut req = execute_request(inv, inner, call, timeout);
            req.get_mut().timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
            let sent = async {
                match &binding.executor {
                    Executor::External { host_id, endpoint } => {
                        let mut client = rt.peers.external_executor(endpoint)?;
                        rt.peers
                            .add_external_headers(host_id, endpoint, req.metadata_mut());
                        Ok::<_, RuntimeError>(
                            tokio::time::timeout(
                                timeout + std::time::Duration::from_secs(1),
                                client.execute(req),
                            )
                            .await,
                        )
                    }
                    _ => Ok(tokio::time::timeout(
                        timeout + std::time::Duration::from_secs(1),
                        rt.peers.mcp_executor().execute(req),
                    )
                    .await),
                }
            };
            // A cancel of the run drops the request: the mcp-proxy (or the host) sees its caller
            // go and tells the server to stop (`notifications/cancelled`), and the call is
            // answered and journalled as cancelled before the run ends.
            let stop = crate::agents::Stop::run(std::sync::Arc::clone(&inv.run));
            let response = tokio::select! {
                r = sent => r?,
                () = stop.wait() => {
                    return Ok(cancelled(
                        call,
                        "the run was cancelled while the call ran; the tool's host was told to stop, and whether the call took effect is unknown",
                        Outcome::Unknown,
                    ));
                }
            };
            match response {
                Ok(Ok(resp)) => Ok(from_response(call, resp.into_inner())?),
                Ok(Err(status)) => {
                    let not_sent = matches!(status.code(), tonic::Code::Unavailable);
                    let outcome = if not_sent {
                        Outcome::NotSent
                    } else {
                        Outcome::Unknown
                    };
                    let what = if not_sent {
                        "nothing was sent"
                    } else {
                        "the outcome is unknown and the call is not retried"
                    };
                    let _ = args;
                    Ok(Dispatched {
                        result: AgentToolResult::error(
                            call,
                            TOOL_EXECUTOR_UNAVAILABLE,
                            format!(
                                "the tool's host could not run the call ({what}): {}",
                                status.message()
                            ),
                        ),
                        outcome,
                        raw: None,
                        effect: Effect::None,
                        objects: Vec::new(),
                        events: Vec::new(),
                    })
                }
                Err(_) => Ok(Dispatched {
                    result: AgentToolResult::error(
                        call,
                        codes::TOOL_TIMEOUT,
                        format!(
                            "the tool did not answer within {} s; the outcome is unknown",
                            timeout.as_secs()
                        ),
                    ),
                    outcome: Outcome::Unknown,
                    raw: None,
                    effect: Effect::None,
                    objects: Vec::new(),
                    events: Vec::new(),
                }),
            }
        }
    }
}

/// A call answered as cancelled with the run.
fn cancelled(call: &ToolInvocation, message: &str, outcome: Outcome) -> Dispatched {
    Dispatched {
        result: AgentToolResult::error(call, codes::TOOL_CANCELLED, message.to_owned()),
        outcome,
        raw: None,
        effect: Effect::None,
        objects: Vec::new(),
        events: Vec::new(),
    }
}

fn from_response(
    call: &ToolInvocation,
    resp: pb::ExecuteResponse,
) -> Result<Dispatched, RuntimeError> {
    let Some(r) = resp.result else {
        return Err(RuntimeError::new(
            codes::TOOL_RESULT_IDENTITY_MISMATCH,
            format!("the executor answered `{}` without a result", call.call_id),
        ));
    };
    let result = convert::result_from_pb(r)
        .map_err(|e| RuntimeError::new(codes::TOOL_RESULT_IDENTITY_MISMATCH, e.message))?;
    let outcome =
        match pb::ExecutionOutcome::try_from(resp.outcome).unwrap_or(pb::ExecutionOutcome::Known) {
            pb::ExecutionOutcome::NotSent => Outcome::NotSent,
            pb::ExecutionOutcome::Unknown => Outcome::Unknown,
            _ => Outcome::Known,
        };
    let effect = if result.is_error {
        Effect::None
    } else if call.tool_id.is_builtin(builtin::WORKSPACE_WRITE_FILE) {
        Effect::Wrote {
            path: path_arg(call),
            kind: "workspace_file_written",
        }
    } else if call.tool_id.is_builtin(builtin::WORKSPACE_APPLY_PATCH) {
        Effect::Wrote {
            path: path_arg(call),
            kind: "workspace_patch_applied",
        }
    } else {
        Effect::None
    };
    Ok(Dispatched {
        result,
        outcome,
        raw: resp.raw_result_json,
        effect,
        objects: Vec::new(),
        events: Vec::new(),
    })
}

fn path_arg(call: &ToolInvocation) -> String {
    call.arguments
        .as_object()
        .and_then(|a| a.get("path"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The `ToolContext` every executor receives (FEATURES E5).
pub fn execute_request(
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    timeout: std::time::Duration,
) -> tonic::Request<pb::ExecuteRequest> {
    let deadline =
        crate::journal::now_ms() + i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2);
    let context = inv.run.with(|record| pb::ToolContext {
        cell_id: record.cell_id.clone(),
        actor_id: record.actor_id.clone(),
        run_id: record.run_id.clone(),
        session_id: record.session_id.clone(),
        invocation_id: inv.id.clone(),
        agent_id: inner.snapshot.profile_id.clone(),
        work_dir: record.work_dir.clone(),
        allow_paths: record.allow_paths.clone(),
        deny_paths: record.deny_paths.clone(),
        epoch: record.epoch,
        deadline_unix_ms: deadline,
        round: inner.round,
    });
    let mut req = tonic::Request::new(pb::ExecuteRequest {
        context: Some(context),
        invocation: Some(pb::ToolInvocation {
            call_id: call.call_id.clone(),
            tool_id: call.tool_id.to_string(),
            arguments_json: call.arguments.to_json_text(),
            provider_metadata_json: call.provider_metadata.as_ref().map(Value::to_string),
        }),
        timeout_ms: None,
        trace: false,
    });
    req.set_timeout(timeout + std::time::Duration::from_secs(1));
    req
}

/// The preview the model gets for a large result: the first 3,000 characters, the view's path and
/// size, and how to read the rest with this snapshot's real aliases.
fn large_preview(full: &str, view_path: &str, inner: &InvocationInner) -> String {
    let total = full.chars().count();
    let preview: String = full.chars().take(PREVIEW_CHARS).collect();
    let read = inner
        .snapshot
        .builtin(builtin::WORKSPACE_READ_FILE)
        .map(|b| b.alias.to_string());
    let search = inner
        .snapshot
        .builtin(builtin::WORKSPACE_SEARCH_FILES)
        .map(|b| b.alias.to_string());
    let how = match (read, search) {
        (Some(r), Some(s)) => format!(
            "Read it in parts with `{r}` (path \"{view_path}\", start_line and line_count), or find what you need with `{s}`."
        ),
        (Some(r), None) => format!(
            "Read it in parts with `{r}` (path \"{view_path}\", start_line and line_count)."
        ),
        (None, Some(s)) => format!("Find what you need in it with `{s}` (path \"{view_path}\")."),
        (None, None) => "You cannot read it with your tools; the user can open it.".to_owned(),
    };
    format!(
        "{preview}\n\n[This result is {total} characters long; the first {PREVIEW_CHARS} are shown above. The full text is saved at `{view_path}`. {how}]"
    )
}

fn wrap_long_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / VIEW_LINE_CHARS);
    for line in text.split_inclusive('\n') {
        let mut count = 0;
        for c in line.chars() {
            if count == VIEW_LINE_CHARS && c != '\n' {
                out.push('\n');
                count = 0;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

/// The one auto-publish before the first explicit commit (FEATURES W3): after a round, the last
/// successful write or patch of the round is published if it is a text file under the message
/// artifact root.
async fn auto_publish(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    last_mutation: Option<String>,
) -> Result<(), RuntimeError> {
    let Some(path) = last_mutation else {
        return Ok(());
    };
    let record = inv.run.snapshot();
    let text = [".md", ".markdown", ".txt"]
        .iter()
        .any(|s| path.ends_with(s));
    let root = &inner.snapshot.workspace.message_artifact_root;
    if record.mode != RunMode::Foreground
        || record.committed
        || record.auto_published
        || !text
        || !path.starts_with(root.as_str())
    {
        return Ok(());
    }
    if inner.snapshot.builtin(builtin::WORKSPACE_COMMIT).is_none()
        && !matches!(
            inner.snapshot.exit_policy,
            toolplane_core::ExitPolicy::Root | toolplane_core::ExitPolicy::Handoff { .. }
        )
    {
        return Ok(());
    }
    match control::commit(rt, inv, &path, false).await? {
        Ok((message_id, _)) => {
            inv.run.update(|r| r.auto_published = true);
            rt.persist_run(&inv.run).await?;
            inv.run
                .journal
                .append(&rt.peers, inv.run.epoch(), Vec::new(), vec![Event::new("chat_message_committed", json!({"invocationId": inv.id, "path": path, "messageId": message_id, "auto": true})).inv(&inv.id)])
                .await?;
        }
        Err(refused) => {
            inv.run
                .journal
                .append(&rt.peers, inv.run.epoch(), Vec::new(), vec![Event::new("chat_message_committed", json!({"invocationId": inv.id, "path": path, "auto": true, "skipped": refused.message, "errorCode": refused.code})).inv(&inv.id).warn()])
                .await?;
        }
    }
    Ok(())
}

/// Whether an invocation may take more calls.
pub fn ensure_open(inner: &InvocationInner, id: &str) -> Result<(), RuntimeError> {
    if inner.status == InvocationStatus::Open {
        Ok(())
    } else {
        Err(RuntimeError::new(
            codes::RUNTIME_INVOCATION_NOT_OPEN,
            format!("invocation {id} is {:?}", inner.status).to_lowercase(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_names_use_the_first_eight_bytes_of_the_call_id_digest() {
        // sha256("call_0") = 5c8f9a…; providers reuse ids like call_0, so paths are also scoped by
        // invocation.
        let name = call_file("call_0");
        assert_eq!(name.len(), "call_".len() + 16);
        assert!(name.chars().skip(5).all(|c| c.is_ascii_hexdigit()));
        assert_ne!(call_file("call_0"), call_file("call_1"));
        assert_eq!(call_file("call_0"), call_file("call_0"));
    }

    #[test]
    fn audit_objects_keep_their_documented_shape() {
        let tool_id = toolplane_core::ToolId::parse("builtin:workspace.write_file").unwrap();
        let object = ToolArguments::from_text(r#"{"path":"output/a.md","content":"x"}"#);
        let metadata = Some(json!({"thoughtSignature": "abc"}));
        let args = ArgsAudit {
            call_id: "call_1",
            tool_id: &tool_id,
            alias: "workspace_write_file",
            arguments: ArgsView::of(&object),
            provider_metadata: &metadata,
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&args).unwrap()).unwrap(),
            r#"{"callId":"call_1","toolId":"builtin:workspace.write_file","alias":"workspace_write_file","arguments":{"path":"output/a.md","content":"x"},"providerMetadata":{"thoughtSignature":"abc"}}"#
        );
        let invalid = ToolArguments::from_text("[1,");
        let ToolArguments::Invalid { reason, .. } = &invalid else {
            panic!("not an object")
        };
        let args = ArgsAudit {
            arguments: ArgsView::of(&invalid),
            provider_metadata: &None,
            ..args
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&args).unwrap()).unwrap(),
            format!(
                r#"{{"callId":"call_1","toolId":"builtin:workspace.write_file","alias":"workspace_write_file","arguments":{{"invalid":"[1,","reason":{}}},"providerMetadata":null}}"#,
                serde_json::to_string(reason).unwrap()
            )
        );

        let call = ToolInvocation {
            call_id: "call_1".into(),
            tool_id: tool_id.clone(),
            arguments: object,
            provider_metadata: None,
        };
        let result = AgentToolResult::ok(&call, "wrote output/a.md");
        let audit = ResultAudit {
            result: &result,
            outcome: "known",
            elapsed_ms: 3,
            raw: None,
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&audit).unwrap()).unwrap(),
            r#"{"result":{"callId":"call_1","toolId":"builtin:workspace.write_file","content":"wrote output/a.md","isError":false},"outcome":"known","elapsedMs":3,"raw":null}"#
        );
    }

    #[test]
    fn readable_views_wrap_only_overlong_lines() {
        let long = "x".repeat(VIEW_LINE_CHARS * 2 + 10);
        let text = format!("short\n{long}\nend");
        let wrapped = wrap_long_lines(&text);
        let lines: Vec<&str> = wrapped.lines().collect();
        assert_eq!(lines[0], "short");
        assert_eq!(lines[1].len(), VIEW_LINE_CHARS);
        assert_eq!(lines[3].len(), 10);
        assert_eq!(lines[4], "end");
        assert_eq!(
            wrapped.replace('\n', ""),
            text.replace('\n', ""),
            "nothing is lost"
        );
    }
}
