//! The web console: `/console` on the runtime's HTTP port (docs/console.md). A page that lists
//! the runs of the caller's cell, follows one run's timeline live, and shows pending approvals
//! and questions with Approve / Deny / Answer.
//!
//! The page itself (`/console`, its stylesheet and script) is static and open: it holds no data.
//! Everything else is fetched by the page's script with the bearer token it keeps in
//! `sessionStorage`, through the same authentication layer and role table as every RPC: reading
//! needs `reader`, deciding `agent`. Fragments are rendered here as HTML with every value
//! escaped; the timeline is a Server-Sent Events stream fed by the journal, as `WatchRun` is.
//! POSTs take JSON only and refuse a cross-site `Origin` or `Sec-Fetch-Site` (the CSRF rule).
//!
//! An edge of the runtime, like `service` and `mcp`: handlers are thin and call the same runtime
//! functions the gRPC handlers call; it never speaks protobuf.

mod html;
mod render;
mod timeline;

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::sse::{Event, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use toolplane_auth::{Caller, CallerKind, Role};

use crate::context::Runtime;
use crate::context::ports::{RecordStream, RunScope};
use crate::error::RuntimeError;
use crate::lifecycle::ApprovalFilter;
use crate::lifecycle::runs::scope_of;
use crate::state::journal::now_ms;
use crate::state::{Approval, ApprovalState, Decision, RunRecord};
use timeline::{CallObjects, Timeline, is_call_end};

/// Where the console is served.
pub const PATH: &str = "/console";

/// Largest POST body accepted, in bytes (a reason or an answer, as the RPCs accept).
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest reason or answer accepted, in bytes (as `DecideApproval` and `AnswerQuestion`).
const MAX_TEXT_BYTES: usize = 16 * 1024;
/// How much of an audit object the timeline shows, in characters.
const AUDIT_CHARS: usize = 4000;
/// Most runs listed.
const MAX_RUNS: usize = 200;

const SHELL: &str = include_str!("assets/console.html");
const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// The console's routes over `rt`.
pub fn router(rt: Arc<Runtime>) -> Router {
    Router::new()
        .route(PATH, get(shell))
        .route("/console/console.css", get(css))
        .route("/console/console.js", get(js))
        .route("/console/runs", get(runs))
        .route("/console/run", get(run))
        .route("/console/approvals", get(approvals))
        .route("/console/events", get(events))
        .route("/console/decide", post(decide))
        .route("/console/answer", post(answer))
        .with_state(rt)
}

/// Headers of every console answer: no caching, no framing, no sniffing, scripts and styles only
/// from the console itself.
fn secure(mut response: Response, content_type: &'static str) -> Response {
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

async fn shell() -> Response {
    secure(Html(SHELL).into_response(), "text/html; charset=utf-8")
}

async fn css() -> Response {
    secure(CSS.into_response(), "text/css; charset=utf-8")
}

async fn js() -> Response {
    secure(JS.into_response(), "text/javascript; charset=utf-8")
}

fn fragment(html: String) -> Response {
    secure(html.into_response(), "text/html; charset=utf-8")
}

/// The caller the auth layer put into the request (authentication off: the default caller).
fn caller(req: &Request) -> Caller {
    req.extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::auth_off(""))
}

/// Whether `host` (a `Host` header's value) names this machine's loopback interface.
fn is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The caller of a data or decision route. With authentication off nobody is asked who they
/// are, so the request must also be addressed to a loopback host: a page of another site whose
/// name was re-bound to 127.0.0.1 (DNS rebinding) is same-origin to the browser, but not
/// `localhost`.
fn allowed(req: &Request) -> Result<Caller, Box<Response>> {
    let caller = caller(req);
    if caller.kind != CallerKind::AuthOff {
        return Ok(caller);
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("");
    if is_loopback(host) {
        return Ok(caller);
    }
    let body = json!({
        "code": "auth.permission_denied",
        "message": format!("auth.permission_denied: with authentication off the console answers only on a loopback host, not {host:?}"),
    });
    let mut r = (StatusCode::FORBIDDEN, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Err(Box::new(r))
}

/// A refusal as JSON: `{"code", "message"}` with the HTTP status of the error's gRPC code.
fn refusal(e: RuntimeError) -> Response {
    let code = e.code().as_str().to_owned();
    let message = e.0.message.clone();
    let status = match tonic::Status::from(e).code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::FailedPrecondition => StatusCode::CONFLICT,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut r = (
        status,
        json!({"code": code, "message": message}).to_string(),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The value of `key` in the request's query. Only ids and numbers travel there, so anything
/// but `[A-Za-z0-9._:-]` is refused rather than decoded.
fn query(req: &Request, key: &str) -> Result<String, RuntimeError> {
    let value = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or("");
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
    {
        Ok(value.to_owned())
    } else {
        Err(RuntimeError::invalid(format!("`{key}` is not an id")))
    }
}

/// The pending approvals the caller may see, optionally of one run, oldest first.
async fn pending(rt: &Runtime, caller: &Caller, run_id: &str) -> Vec<Approval> {
    let filter = ApprovalFilter {
        cell: caller.visible_cell().map(str::to_owned),
        run_id: run_id.to_owned(),
        state: Some(ApprovalState::Pending),
    };
    rt.list_approvals(&filter).await
}

fn can_decide(caller: &Caller) -> bool {
    caller.role.includes(Role::Agent)
}

async fn runs(State(rt): State<Arc<Runtime>>, req: Request) -> Response {
    let caller = match allowed(&req) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    let mut records: Vec<RunRecord> = rt
        .runs()
        .iter()
        .filter(|run| caller.sees(&run.cell))
        .map(|run| run.snapshot())
        .collect();
    records.sort_by(|a, b| {
        b.created_ms
            .cmp(&a.created_ms)
            .then(a.run_id.cmp(&b.run_id))
    });
    records.truncate(MAX_RUNS);
    let waiting = pending(&rt, &caller, "").await;
    fragment(render::runs(&records, &waiting, now_ms()))
}

async fn run(State(rt): State<Arc<Runtime>>, req: Request) -> Response {
    let caller = match allowed(&req) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    let found = query(&req, "id").and_then(|id| rt.run_in(&id, caller.visible_cell()));
    match found {
        Ok(run) => {
            let waiting = pending(&rt, &caller, &run.id).await;
            fragment(render::run_head(
                &run.snapshot(),
                &waiting,
                can_decide(&caller),
                now_ms(),
            ))
        }
        Err(e) => refusal(e),
    }
}

async fn approvals(State(rt): State<Arc<Runtime>>, req: Request) -> Response {
    let caller = match allowed(&req) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    let waiting = pending(&rt, &caller, "").await;
    fragment(render::cards(&waiting, can_decide(&caller), true))
}

/// The run's timeline as Server-Sent Events: one `row` event per rendered record (its id the
/// record's sequence number), replayed from the start and then live. `from` skips rows a
/// reconnecting page already has; the records before it are still read, for nesting.
async fn events(State(rt): State<Arc<Runtime>>, req: Request) -> Response {
    let caller = match allowed(&req) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    let run = match query(&req, "run").and_then(|id| rt.run_in(&id, caller.visible_cell())) {
        Ok(run) => run,
        Err(e) => return refusal(e),
    };
    let from: u64 = query(&req, "from")
        .ok()
        .and_then(|f| f.parse().ok())
        .unwrap_or(1);
    let follow = rt
        .ports
        .workspace
        .follow_journal(&run.id, &run.cell, 1)
        .await;
    let records = match follow {
        Ok(records) => records,
        Err(e) => return refusal(e.into_error("the run's journal")),
    };
    let scope = scope_of(&run.snapshot());
    let mut response = Sse::new(rows(rt, scope, records, from)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The SSE events of a followed journal.
fn rows(
    rt: Arc<Runtime>,
    scope: RunScope,
    records: RecordStream,
    from: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let state = (rt, scope, records, Timeline::default(), false);
    futures::stream::unfold(
        state,
        move |(rt, scope, mut records, mut t, done)| async move {
            if done {
                return None;
            }
            loop {
                let event = match records.next().await? {
                    Err(e) => Some((Event::default().event("failed").data(e.message), true)),
                    Ok(None) => Some((Event::default().comment("keep-alive"), false)),
                    Ok(Some(rec)) => {
                        let wanted = rec.seq >= from;
                        let objects = if wanted && is_call_end(&rec.kind) {
                            call_objects(&rt, &scope, &rec.payload_json).await
                        } else {
                            CallObjects::default()
                        };
                        t.row(&rec, &objects).filter(|_| wanted).map(|row| {
                            let event = Event::default()
                                .event("row")
                                .id(rec.seq.to_string())
                                .data(row);
                            (event, false)
                        })
                    }
                };
                if let Some((event, end)) = event {
                    return Some((Ok(event), (rt, scope, records, t, end)));
                }
            }
        },
    )
}

/// A call's arguments and result from its audit objects, pretty-printed and cut to size; an
/// object that cannot be read is left out.
async fn call_objects(rt: &Runtime, scope: &RunScope, payload_json: &str) -> CallObjects {
    let p: Value = serde_json::from_str(payload_json).unwrap_or(Value::Null);
    let read = |key: &'static str| {
        let path = p.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
        async move {
            if path.is_empty() {
                return None;
            }
            let bytes = rt.ports.workspace.get_object(scope, &path).await.ok()??;
            let text = match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
                Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
            };
            Some(html::cut(&text, AUDIT_CHARS))
        }
    };
    CallObjects {
        args: read("argsPath").await,
        result: read("resultPath").await,
    }
}

/// The CSRF rule for POSTs: a JSON body (a cross-site form cannot send one without a CORS
/// preflight, which the console never answers), and, when the browser names them, an `Origin`
/// equal to the request's own host and a `Sec-Fetch-Site` of `same-origin`.
fn same_origin(headers: &HeaderMap) -> Result<(), RuntimeError> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let json = text("content-type").is_some_and(|c| c.starts_with("application/json"));
    if !json {
        return Err(RuntimeError::invalid(
            "the console accepts JSON bodies only",
        ));
    }
    if let Some(site) = text("sec-fetch-site")
        && site != "same-origin"
    {
        return Err(RuntimeError::invalid(format!(
            "a {site} request may not decide"
        )));
    }
    if let Some(origin) = text("origin") {
        let host = text("host").unwrap_or("");
        let bare = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if host.is_empty() || bare != host {
            return Err(RuntimeError::invalid(format!(
                "origin {origin} is not this console's"
            )));
        }
    }
    Ok(())
}

/// The JSON body of a console POST, after the CSRF rule.
async fn body<T: for<'de> Deserialize<'de>>(req: Request) -> Result<(Caller, T), RuntimeError> {
    same_origin(req.headers())?;
    let caller = caller(&req);
    let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|e| RuntimeError::invalid(format!("the body cannot be read: {e}")))?;
    let parsed = serde_json::from_slice(&bytes)
        .map_err(|e| RuntimeError::invalid(format!("the body is not valid: {e}")))?;
    Ok((caller, parsed))
}

fn check_text(what: &str, text: &str) -> Result<(), RuntimeError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(RuntimeError::invalid(format!(
            "{what} is {} bytes, over {MAX_TEXT_BYTES}",
            text.len()
        )));
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DecideBody {
    approval_id: String,
    approve: bool,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    remember_for_run: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AnswerBody {
    approval_id: String,
    answer: String,
}

fn decided(a: &Approval) -> Response {
    let state = crate::lifecycle::approvals::state_str(a.state);
    let mut r = json!({"approvalId": a.id, "state": state})
        .to_string()
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Approve or deny, as `DecideApproval`; who decided is the credential's principal.
async fn decide(State(rt): State<Arc<Runtime>>, req: Request) -> Response {
    if let Err(refused) = allowed(&req) {
        return *refused;
    }
    let outcome = async {
        let (caller, b) = body::<DecideBody>(req).await?;
        check_text("reason", &b.reason)?;
        let by = caller.principal.clone();
        let decision = if b.approve {
            Decision::Approve {
                by,
                reason: b.reason,
                remember: b.remember_for_run,
            }
        } else {
            Decision::Deny {
                by,
                reason: b.reason,
            }
        };
        rt.decide_approval(&b.approval_id, caller.visible_cell(), decision)
            .await
    };
    match outcome.await {
        Ok(a) => decided(&a),
        Err(e) => refusal(e),
    }
}

/// Answer a question, as `AnswerQuestion`.
async fn answer(State(rt): State<Arc<Runtime>>, req: Request) -> Response {
    if let Err(refused) = allowed(&req) {
        return *refused;
    }
    let outcome = async {
        let (caller, b) = body::<AnswerBody>(req).await?;
        check_text("answer", &b.answer)?;
        let decision = Decision::Answer {
            by: caller.principal.clone(),
            answer: b.answer,
        };
        rt.decide_approval(&b.approval_id, caller.visible_cell(), decision)
            .await
    };
    match outcome.await {
        Ok(a) => decided(&a),
        Err(e) => refusal(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn with_auth_off_only_loopback_hosts_are_answered() {
        for host in [
            "127.0.0.1:7411",
            "localhost:7411",
            "LOCALHOST",
            "[::1]:7411",
            "127.1.2.3",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "evil.example:7411",
            "10.0.0.5:7411",
            "[2001:db8::1]:7411",
            "localhost.evil.example",
            "",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn only_same_origin_json_posts_pass_the_csrf_rule() {
        let json = ("content-type", "application/json");
        let host = ("host", "127.0.0.1:7411");
        assert!(
            same_origin(&headers(&[json, host])).is_ok(),
            "a non-browser client"
        );
        assert!(
            same_origin(&headers(&[
                json,
                host,
                ("origin", "http://127.0.0.1:7411"),
                ("sec-fetch-site", "same-origin")
            ]))
            .is_ok()
        );
        for refused in [
            headers(&[("content-type", "application/x-www-form-urlencoded"), host]),
            headers(&[("content-type", "text/plain"), host]),
            headers(&[json, host, ("origin", "http://evil.example")]),
            headers(&[json, host, ("origin", "null")]),
            headers(&[json, host, ("sec-fetch-site", "cross-site")]),
            headers(&[json, host, ("sec-fetch-site", "same-site")]),
        ] {
            assert!(same_origin(&refused).is_err(), "{refused:?}");
        }
    }
}
