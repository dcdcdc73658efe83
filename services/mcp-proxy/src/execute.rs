//! MCP execution: one `ToolExecutor.Execute` call against an MCP server.
//!
//! Right before sending, the call is rechecked against the registration as it is *now*: it
//! exists, is active, the tool is cached, usable and not off, the arguments are a JSON object of
//! at most 256 KiB, the deadline has not passed and the caller has not gone. Every failure before
//! the request is handed to the connection is reported as NOT_SENT; once handed over, a lost
//! connection, a timeout or a cancellation is UNKNOWN (never retried) and the server is told with
//! `notifications/cancelled`. A response is measured against the response cap before it is
//! projected. The last step before sending is the run's fence (`crate::fence`): a stale epoch
//! fails the RPC itself. This module never changes registrations.
//!
//! The path of a call is kept cheap because every call pays it on top of the MCP round trip: the
//! server and tool are found by name in maps, the descriptor verdict was decided when the catalog
//! was built, the arguments are parsed once straight into the object sent, and nothing is
//! allocated for a recheck that passes or for a trace nobody asked for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use toolplane_core::ErrorClass;
use toolplane_core::id::{Provider, ToolId};

use crate::causes;
use crate::connection::TransportKind;
use crate::error::{
    MCP_CONNECTION_FAILED, MCP_CONNECTION_LOST, MCP_MALFORMED_RESPONSE, MCP_PERMISSION_OFF,
    MCP_PROTOCOL_ERROR, MCP_RESPONSE_TOO_LARGE, MCP_SERVER_BUSY, MCP_SERVER_NOT_FOUND,
    MCP_SERVER_PAUSED, MCP_TASK_REQUIRED, MCP_TOOL_ERROR, MCP_TOOL_NOT_FOUND, MCP_TOOL_UNUSABLE,
    ProxyCode, ProxyError, TOOL_CANCELLED, TOOL_INVALID_ARGUMENTS, TOOL_INVALID_ID, TOOL_TIMEOUT,
};
use crate::projection::project;
use crate::proxy::{McpProxy, Server};
use crate::registration::{ServerState, cell_ref, shown};
use crate::stdio::{MALFORMED_MARKER, Violation};

/// Largest arguments object sent to an MCP server, in bytes of JSON.
pub const MAX_ARGUMENT_BYTES: usize = 256 * 1024;

/// The longest any one MCP call may run, whatever timeout or deadline its caller sends.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Whether a call's effects are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Known,
    NotSent,
    Unknown,
}

/// One timed step.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: &'static str,
    pub start_us: u64,
    pub duration_us: u64,
    pub detail: String,
}

/// A call to execute.
#[derive(Debug, Clone)]
pub struct CallInput {
    pub cell_id: String,
    pub call_id: String,
    pub tool_id: String,
    pub arguments_json: String,
    pub timeout: Option<Duration>,
    /// The run the call is made for and its caller's lease epoch (`ToolContext.run_id`,
    /// `ToolContext.epoch`); epoch 0 is not fenced (`crate::fence`).
    pub run_id: String,
    pub epoch: u64,
    /// Absolute deadline from the `ToolContext`, Unix milliseconds; 0 for none.
    pub deadline_unix_ms: i64,
    /// Record the timed steps of the call (`ExecuteRequest.trace`).
    pub trace: bool,
}

/// What an executed call produced.
#[derive(Debug, Clone)]
pub struct CallOutput {
    pub content: String,
    pub structured: Option<Value>,
    pub is_error: bool,
    pub error_code: Option<&'static str>,
    pub error_class: Option<ErrorClass>,
    pub outcome: Outcome,
    pub raw_result_json: Option<String>,
    pub elapsed: Duration,
    pub trace: Vec<Step>,
}

/// Records timed steps only when the caller asked for a trace.
struct Tracer {
    start: Instant,
    enabled: bool,
    steps: Vec<Step>,
}

impl Tracer {
    fn step(&mut self, name: &'static str, began: Instant, detail: &str) {
        if !self.enabled {
            return;
        }
        self.steps.push(Step {
            name,
            start_us: u64::try_from(began.duration_since(self.start).as_micros())
                .unwrap_or(u64::MAX),
            duration_us: u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX),
            detail: detail.to_owned(),
        });
    }
}

fn failure(code: ProxyCode, message: String, outcome: Outcome) -> CallOutput {
    CallOutput {
        content: message,
        structured: None,
        is_error: true,
        error_code: Some(code.code),
        error_class: Some(code.class),
        outcome,
        raw_result_json: None,
        elapsed: Duration::ZERO,
        trace: Vec::new(),
    }
}

/// Sends `notifications/cancelled` for a request unless disarmed: a deadline, a cancellation or
/// the caller dropping the RPC all reach the server.
struct CancelGuard {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            let reason = self.reason;
            tokio::spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some(reason.to_owned()),
                    ))
                    .await;
            });
        }
    }
}

impl McpProxy {
    /// Executes one call. `Err` only for requests that are not MCP calls at all (a malformed or
    /// foreign tool id) or when the proxy is shutting down; everything else is a result.
    pub async fn execute(
        &self,
        call: &CallInput,
        cancel: CancellationToken,
    ) -> Result<CallOutput, ProxyError> {
        let mut tracer = Tracer {
            start: Instant::now(),
            enabled: call.trace,
            steps: Vec::new(),
        };
        let mut out = self.execute_inner(call, &cancel, &mut tracer).await?;
        out.elapsed = tracer.start.elapsed();
        let server = ToolId::parse(&call.tool_id)
            .ok()
            .and_then(|id| match id.provider() {
                Provider::Mcp(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let metrics = &self.inner.metrics;
        metrics
            .calls
            .inc(&[&server, out.error_code.unwrap_or("ok")]);
        metrics
            .duration
            .observe(&[&server], out.elapsed.as_secs_f64());
        out.trace = tracer.steps;
        Ok(out)
    }

    async fn execute_inner(
        &self,
        call: &CallInput,
        cancel: &CancellationToken,
        tracer: &mut Tracer,
    ) -> Result<CallOutput, ProxyError> {
        let began = Instant::now();
        let tool_id = ToolId::parse(&call.tool_id)
            .map_err(|e| ProxyError::new(TOOL_INVALID_ID, e.message))?;
        let Provider::Mcp(server_id) = tool_id.provider() else {
            return Err(ProxyError::new(
                TOOL_INVALID_ID,
                format!(
                    "`{}` is not an mcp tool; the mcp-proxy executes `mcp/<uuid>:<name>` only",
                    shown(&call.tool_id)
                ),
            ));
        };
        let native = tool_id.native();
        let cell = cell_ref(&call.cell_id)?;
        if self.inner.shutdown.is_cancelled() {
            return Err(ProxyError::new(
                crate::error::MCP_SHUTTING_DOWN,
                "the proxy is shutting down",
            ));
        }

        let arguments = match parse_arguments(&call.arguments_json) {
            Ok(map) => map,
            Err(why) => return Ok(failure(TOOL_INVALID_ARGUMENTS, why, Outcome::NotSent)),
        };

        let Some(server) = self.find(cell, server_id) else {
            return Ok(not_found(cell, server_id));
        };
        let reg = server.registration();
        let limits = self.limits_of(&reg);
        // The caller's timeout and deadline only ever shorten the call; the server's own limit
        // caps both, so no caller-chosen duration reaches the clock arithmetic unbounded.
        let mut timeout = call
            .timeout
            .unwrap_or(limits.call_timeout)
            .min(MAX_CALL_TIMEOUT);
        if call.deadline_unix_ms > 0 {
            let left = call.deadline_unix_ms.saturating_sub(crate::proxy::now_ms());
            timeout = timeout.min(Duration::from_millis(u64::try_from(left).unwrap_or(0)));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if let Some(refused) = recheck(&server, native) {
            return Ok(refused);
        }
        tracer.step("recheck", began, "");

        // A connection and a slot under the server's concurrency limit, both before the deadline.
        let began = Instant::now();
        let connecting = self.connection(&server, false);
        let conn = tokio::select! {
            c = connecting => match c {
                Ok(c) => c,
                Err(e) => return Ok(failure(e.code, e.message, Outcome::NotSent)),
            },
            () = tokio::time::sleep_until(deadline) => return Ok(failure(TOOL_TIMEOUT, "the deadline passed while connecting to the mcp server".into(), Outcome::NotSent)),
            () = cancel.cancelled() => return Ok(failure(TOOL_CANCELLED, "the call was cancelled before it was sent".into(), Outcome::NotSent)),
        };
        tracer.step("connect", began, &conn.server_info);
        let began = Instant::now();
        let permits = Arc::clone(
            &*server
                .permits
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let _permit = tokio::select! {
            p = permits.acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return Ok(failure(MCP_SERVER_BUSY, "the server's call slots are closed".into(), Outcome::NotSent)),
            },
            () = tokio::time::sleep_until(deadline) => return Ok(failure(
                MCP_SERVER_BUSY,
                format!("all {} call slots of server `{}` stayed busy until the deadline", limits.max_concurrent_calls, reg.display_name),
                Outcome::NotSent,
            )),
            () = cancel.cancelled() => return Ok(failure(TOOL_CANCELLED, "the call was cancelled before it was sent".into(), Outcome::NotSent)),
        };
        tracer.step("slot", began, "");

        // The recheck right before sending: waiting for a connection or a slot may have taken a
        // while, and an operator may have removed or paused the server or turned the tool off
        // meanwhile.
        let still_registered = !server.removed.is_cancelled()
            && self
                .find(cell, server_id)
                .is_some_and(|now| Arc::ptr_eq(&now, &server));
        if !still_registered {
            return Ok(not_found(cell, server_id));
        }
        if let Some(refused) = recheck(&server, native) {
            return Ok(refused);
        }
        if cancel.is_cancelled() {
            return Ok(failure(
                TOOL_CANCELLED,
                "the call was cancelled before it was sent".into(),
                Outcome::NotSent,
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(failure(
                TOOL_TIMEOUT,
                "the deadline passed before the call was sent".into(),
                Outcome::NotSent,
            ));
        }
        if !conn.is_alive() {
            return Ok(failure(
                MCP_CONNECTION_LOST,
                format!(
                    "the connection closed before the call was sent: {}",
                    conn.death_reason()
                ),
                Outcome::NotSent,
            ));
        }
        // The run's fence, as late as possible: a newer epoch seen while this call waited for a
        // connection or a slot refuses it. A refusal is a status, not a result: the caller lost
        // the run.
        self.inner
            .fence
            .admit(cell, &call.run_id, call.epoch)
            .await?;

        let began = Instant::now();
        let mut params = CallToolRequestParams::new(native.to_owned()).with_arguments(arguments);
        // The client span of the request, open until this function returns; the server's trace
        // continues under it.
        let client_span = client_span(&conn, native);
        // The call's trace context travels in `_meta` (MCP SEP-414), on every transport.
        if let Some((parent, state)) =
            client_span.in_scope(toolplane_telemetry::current_trace_context)
        {
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.0.set_traceparent(parent);
            if let Some(state) = state {
                meta.0.set_tracestate(state);
            }
            params.meta = Some(meta);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut handle = match conn
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(h) => h,
            Err(e) => {
                return Ok(failure(
                    MCP_CONNECTION_LOST,
                    format!(
                        "the call could not be handed to the connection: {}; {}",
                        causes::service_error(&e),
                        conn.death_reason()
                    ),
                    Outcome::NotSent,
                ));
            }
        };
        client_span.record("jsonrpc.request.id", tracing::field::display(&handle.id));
        let mut guard = CancelGuard {
            peer: conn.peer.clone(),
            id: Some(handle.id.clone()),
            reason: "the caller stopped waiting",
        };
        let answer = tokio::select! {
            r = &mut handle.rx => r.unwrap_or(Err(ServiceError::TransportClosed)),
            () = tokio::time::sleep_until(deadline) => {
                guard.reason = "deadline exceeded";
                return Ok(failure(
                    TOOL_TIMEOUT,
                    format!("the mcp server did not answer within {} ms; it was told to cancel, and whether the call took effect is unknown", timeout.as_millis()),
                    Outcome::Unknown,
                ));
            }
            () = cancel.cancelled() => {
                guard.reason = "cancelled by the caller";
                return Ok(failure(
                    TOOL_CANCELLED,
                    "the call was cancelled after it was sent; the server was told, and whether it took effect is unknown".into(),
                    Outcome::Unknown,
                ));
            }
        };
        guard.id = None;
        tracer.step("send", began, "");

        let began = Instant::now();
        let out = match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                // One pass over the typed result; the audit text is written from that value.
                let value = serde_json::to_value(&result).unwrap_or(Value::Null);
                let raw = value.to_string();
                if raw.len() as u64 > limits.max_response_bytes {
                    failure(
                        MCP_RESPONSE_TOO_LARGE,
                        format!(
                            "the tool's response is {} bytes, over the {}-byte limit of server `{}`; it ran, but its result is not kept",
                            raw.len(),
                            limits.max_response_bytes,
                            reg.display_name
                        ),
                        Outcome::Known,
                    )
                } else {
                    let p = project(&value);
                    CallOutput {
                        content: p.content,
                        structured: p.structured,
                        is_error: p.is_error,
                        error_code: p.is_error.then_some(MCP_TOOL_ERROR.code),
                        error_class: p.is_error.then_some(MCP_TOOL_ERROR.class),
                        outcome: Outcome::Known,
                        raw_result_json: Some(raw),
                        elapsed: Duration::ZERO,
                        trace: Vec::new(),
                    }
                }
            }
            Ok(other) => failure(
                MCP_MALFORMED_RESPONSE,
                format!(
                    "the mcp server answered with something that is not a tool result ({}); whether the call took effect is unknown",
                    result_kind(&other)
                ),
                Outcome::Unknown,
            ),
            Err(ServiceError::McpError(e)) if e.message.starts_with(MALFORMED_MARKER) => failure(
                MCP_MALFORMED_RESPONSE,
                format!(
                    "the mcp server's response is malformed ({}); whether the call took effect is unknown",
                    e.message.trim_start_matches(MALFORMED_MARKER)
                ),
                Outcome::Unknown,
            ),
            Err(ServiceError::McpError(e)) => {
                let mut out = failure(
                    MCP_PROTOCOL_ERROR,
                    format!(
                        "the mcp server refused the call: {} (json-rpc error {})",
                        e.message, e.code.0
                    ),
                    Outcome::Known,
                );
                out.raw_result_json = serde_json::to_string(&e).ok();
                out
            }
            Err(ServiceError::TransportSend(e)) => {
                // rmcp's own text names the transport's Rust type; the causes say what happened.
                let why = causes::with_causes(&*e.error);
                if causes::refused(&*e.error) {
                    // No connection was made, so nothing reached the server.
                    failure(
                        MCP_CONNECTION_FAILED,
                        format!("the mcp server could not be reached: {why}"),
                        Outcome::NotSent,
                    )
                } else {
                    // A stdio write that failed never reached a live process; over HTTP the
                    // server may have read the request before the exchange failed.
                    let outcome = if conn.kind == TransportKind::Stdio {
                        Outcome::NotSent
                    } else {
                        Outcome::Unknown
                    };
                    failure(
                        MCP_CONNECTION_LOST,
                        format!("sending the call failed: {why}"),
                        outcome,
                    )
                }
            }
            Err(e) => match conn.violation() {
                Some(Violation::Malformed(why)) => failure(
                    MCP_MALFORMED_RESPONSE,
                    format!(
                        "{why}; the connection was closed and whether the call took effect is unknown"
                    ),
                    Outcome::Unknown,
                ),
                Some(Violation::Oversized(n)) => failure(
                    MCP_RESPONSE_TOO_LARGE,
                    format!(
                        "the mcp server sent a {n}-byte message, over the transport cap; the connection was closed and whether the call took effect is unknown"
                    ),
                    Outcome::Unknown,
                ),
                None => failure(
                    MCP_CONNECTION_LOST,
                    format!(
                        "the connection closed while the call was in flight ({e}): {}; whether the call took effect is unknown",
                        conn.death_reason()
                    ),
                    Outcome::Unknown,
                ),
            },
        };
        tracer.step("project", began, "");
        Ok(out)
    }
}

fn not_found(cell: &str, server_id: &str) -> CallOutput {
    failure(
        MCP_SERVER_NOT_FOUND,
        format!("no mcp server `{}` in cell `{cell}`", shown(server_id)),
        Outcome::NotSent,
    )
}

/// The arguments as the object to send: a JSON object of at most [`MAX_ARGUMENT_BYTES`] (empty
/// text and `null` are the empty object), parsed once. `Err` says why they are refused
/// (`tool.invalid_arguments`).
fn parse_arguments(text: &str) -> Result<Map<String, Value>, String> {
    let raw = text.trim();
    if raw.len() > MAX_ARGUMENT_BYTES {
        return Err(format!(
            "arguments are {} bytes, over the {MAX_ARGUMENT_BYTES}-byte limit for mcp tools",
            raw.len()
        ));
    }
    if raw.is_empty() || raw == "null" {
        return Ok(Map::new());
    }
    let invalid = |e: serde_json::Error| format!("arguments are not valid JSON: {e}");
    if raw.starts_with('{') {
        return serde_json::from_str::<Map<String, Value>>(raw).map_err(invalid);
    }
    // Not an object: parsed only to say what it is instead.
    Err(match serde_json::from_str::<Value>(raw) {
        Ok(other) => format!("arguments must be a JSON object, got {}", kind_of(&other)),
        Err(e) => invalid(e),
    })
}

/// The client span of one `tools/call`, with the OpenTelemetry MCP semantic conventions
/// (`mcp.method.name`, `mcp.protocol.version`, `gen_ai.tool.name`, `jsonrpc.request.id`, …).
fn client_span(conn: &crate::connection::Connection, native: &str) -> tracing::Span {
    let version = conn
        .peer
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    tracing::info_span!(
        "mcp.client",
        otel.name = %format_args!("tools/call {native}"),
        otel.kind = "client",
        mcp.method.name = "tools/call",
        mcp.protocol.version = %version,
        gen_ai.tool.name = %native,
        gen_ai.operation.name = "execute_tool",
        jsonrpc.request.id = tracing::field::Empty,
        network.transport = match conn.kind {
            crate::connection::TransportKind::Stdio => "pipe",
            crate::connection::TransportKind::StreamableHttp => "tcp",
        },
    )
}

/// The checks made before a call is admitted and again right before it is sent, against the
/// registration and catalog as they are now; `Some` is the refusal. Nothing is allocated when
/// the call may go.
fn recheck(server: &Server, native: &str) -> Option<CallOutput> {
    let reg = server.registration();
    if reg.state == ServerState::Paused {
        return Some(failure(
            MCP_SERVER_PAUSED,
            format!(
                "mcp server `{}` is paused; the call was not sent",
                reg.display_name
            ),
            Outcome::NotSent,
        ));
    }
    let Some(catalog) = server.cached() else {
        return Some(failure(
            MCP_TOOL_NOT_FOUND,
            format!(
                "mcp server `{}` has no cached tool list; refresh it",
                reg.display_name
            ),
            Outcome::NotSent,
        ));
    };
    let Some(entry) = catalog.get(native) else {
        return Some(failure(
            MCP_TOOL_NOT_FOUND,
            format!(
                "mcp server `{}` has no tool `{}` in its cached tool list",
                reg.display_name,
                shown(native)
            ),
            Outcome::NotSent,
        ));
    };
    if reg.permission_of(native) == toolplane_core::catalog::McpPermission::Off {
        return Some(failure(
            MCP_PERMISSION_OFF,
            format!(
                "the permission of `{}` on mcp server `{}` is off; the call was not sent",
                shown(native),
                reg.display_name
            ),
            Outcome::NotSent,
        ));
    }
    if let Some(issue) = entry.issue {
        return Some(failure(
            MCP_TOOL_UNUSABLE,
            format!("the tool cannot be called: {}", issue.message),
            Outcome::NotSent,
        ));
    }
    if entry.tool.task_required() {
        return Some(failure(
            MCP_TASK_REQUIRED,
            format!(
                "the tool cannot be called: {}; the call was not sent",
                toolplane_core::catalog::OmitReason::McpTaskRequired.describe()
            ),
            Outcome::NotSent,
        ));
    }
    None
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn result_kind(r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.keys().take(4).cloned().collect::<Vec<_>>().join(", "))
        })
        .map(|keys| format!("fields: {keys}"))
        .unwrap_or_else(|| "unreadable".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn arguments_are_one_json_object_within_the_cap() {
        for empty in ["", "  ", "null", " null\n"] {
            assert!(parse_arguments(empty).unwrap().is_empty(), "{empty:?}");
        }
        let map = parse_arguments(r#" {"text": "hi", "n": [1, {"a": null}]} "#).unwrap();
        assert_eq!(map["text"], "hi");
        assert_eq!(map["n"][1]["a"], Value::Null);

        for (bad, why) in [
            ("[1,2]", "got an array"),
            ("\"text\"", "got a string"),
            ("42", "got a number"),
            ("true", "got a boolean"),
            ("{not json", "not valid JSON"),
            (r#"{"a":1} {"b":2}"#, "not valid JSON"),
            ("nul", "not valid JSON"),
        ] {
            let err = parse_arguments(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }

        let pad = MAX_ARGUMENT_BYTES - r#"{"t":""}"#.len();
        let at_cap = format!(r#"{{"t":"{}"}}"#, "a".repeat(pad));
        assert_eq!(at_cap.len(), MAX_ARGUMENT_BYTES);
        assert!(parse_arguments(&at_cap).is_ok());
        let over = format!(r#"{{"t":"{}"}}"#, "a".repeat(pad + 1));
        assert!(
            parse_arguments(&over)
                .unwrap_err()
                .contains("over the 262144-byte limit")
        );
    }
}
