//! A scripted model server on `127.0.0.1:0`, for driving the runtime's loop through its real HTTP
//! client: each request gets the next scripted reply (a reply with tool calls, plain text, a
//! malformed body, or an error status such as 429 or 500), and every request body and path is
//! recorded for assertions. One script serves every provider's endpoint:
//! `POST /v1/chat/completions` (OpenAI Chat Completions), `POST /v1/responses` (OpenAI Responses),
//! `POST /v1/messages` (Anthropic Messages) and `POST /v1beta/models/{model}:generateContent`
//! (Gemini); the replies are scripted in the matching shape ([`ScriptedReply::tool_calls`],
//! [`ScriptedReply::responses_calls`], [`ScriptedReply::anthropic_calls`],
//! [`ScriptedReply::gemini_calls`]).
//!
//! A reply may carry a `Retry-After` header ([`ScriptedReply::retry_after`]); the server records
//! when each request arrived ([`ModelServer::arrivals`]) and counts the TCP connections it accepted
//! ([`ModelServer::connections`]), so tests can see waits between attempts and connection reuse.
//!
//! It serves scripts only; it never decides anything about tools.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::TestkitError;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct ScriptedReply {
    pub status: u16,
    /// The body, sent verbatim (so malformed JSON can be scripted too).
    pub body: String,
    pub delay: Option<Duration>,
    /// The `Retry-After` header's value, sent verbatim (seconds or an HTTP-date).
    pub retry_after: Option<String>,
}

impl ScriptedReply {
    /// This reply with a `Retry-After` header of `value` (`"2"`, or an HTTP-date).
    pub fn with_retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.to_owned());
        self
    }

    /// A completion whose assistant message calls these tools (`(alias, arguments)`), with ids
    /// `call_<n>_<i>`.
    pub fn tool_calls(n: usize, calls: &[(&str, Value)]) -> Self {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| json!({"id": format!("call_{n}_{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
            .collect();
        Self::completion(json!({"role": "assistant", "content": null, "tool_calls": calls}))
    }

    /// An OpenAI Responses `response` whose `output` calls these tools: `function_call` items with
    /// ids `fc_<n>_<i>` and call ids `call_<n>_<i>`, arguments as JSON text.
    pub fn responses_calls(n: usize, calls: &[(&str, Value)]) -> Self {
        let output: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| json!({"type": "function_call", "id": format!("fc_{n}_{i}"), "call_id": format!("call_{n}_{i}"), "name": name, "arguments": args.to_string(), "status": "completed"}))
            .collect();
        Self::raw(&json!({"id": format!("resp_{n}"), "object": "response", "created_at": 0, "status": "completed", "model": "scripted", "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}).to_string())
    }

    /// An Anthropic Messages `message` whose content calls these tools: `tool_use` blocks with
    /// ids `toolu_<n>_<i>`.
    pub fn anthropic_calls(n: usize, calls: &[(&str, Value)]) -> Self {
        let content: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, input))| json!({"type": "tool_use", "id": format!("toolu_{n}_{i}"), "name": name, "input": input}))
            .collect();
        Self::raw(&json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "scripted", "content": content, "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}).to_string())
    }

    /// A Gemini `GenerateContentResponse` whose one candidate calls these tools: `functionCall`
    /// parts without ids, as the Gemini API sends them.
    pub fn gemini_calls(calls: &[(&str, Value)]) -> Self {
        let parts: Vec<Value> = calls
            .iter()
            .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}}))
            .collect();
        Self::raw(&json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}, "modelVersion": "scripted"}).to_string())
    }

    /// A completion with plain text and no tool calls.
    pub fn text(text: &str) -> Self {
        Self::completion(json!({"role": "assistant", "content": text}))
    }

    /// A completion carrying this assistant message.
    pub fn completion(message: Value) -> Self {
        let body = json!({"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]});
        ScriptedReply {
            status: 200,
            body: body.to_string(),
            delay: None,
            retry_after: None,
        }
    }

    /// An error status with an OpenAI-style error body.
    pub fn status(status: u16) -> Self {
        ScriptedReply { status, body: json!({"error": {"message": format!("scripted status {status}"), "type": "scripted"}}).to_string(), delay: None, retry_after: None }
    }

    /// A 200 whose body is not a completion.
    pub fn raw(body: &str) -> Self {
        ScriptedReply {
            status: 200,
            body: body.to_owned(),
            delay: None,
            retry_after: None,
        }
    }
}

#[derive(Debug, Default)]
struct Script {
    replies: Mutex<VecDeque<ScriptedReply>>,
    requests: Mutex<Vec<Value>>,
    paths: Mutex<Vec<String>>,
    arrivals: Mutex<Vec<Instant>>,
    connections: AtomicUsize,
}

/// A running scripted model server.
#[derive(Debug)]
pub struct ModelServer {
    pub addr: SocketAddr,
    script: Arc<Script>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl ModelServer {
    /// The base URL an OpenAI-compatible client uses (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.script
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The path of every request received so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.script
            .paths
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// When each request arrived, in order.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.script
            .arrivals
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.script.connections.load(Ordering::SeqCst)
    }

    /// Replies not yet served.
    pub fn remaining(&self) -> usize {
        self.script.replies.lock().map(|r| r.len()).unwrap_or(0)
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn complete(
    State(script): State<Arc<Script>>,
    uri: Uri,
    Json(body): Json<Value>,
) -> Response {
    if let Ok(mut a) = script.arrivals.lock() {
        a.push(Instant::now());
    }
    if let Ok(mut r) = script.requests.lock() {
        r.push(body);
    }
    if let Ok(mut p) = script.paths.lock() {
        p.push(uri.path().to_owned());
    }
    let next = script.replies.lock().ok().and_then(|mut q| q.pop_front());
    let Some(reply) = next else {
        return (
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "the script has no more replies"}}).to_string(),
        )
            .into_response();
    };
    if let Some(d) = reply.delay {
        tokio::time::sleep(d).await;
    }
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, [("content-type", "application/json")], reply.body).into_response();
    if let Some(value) = reply
        .retry_after
        .and_then(|v| axum::http::HeaderValue::from_str(&v).ok())
    {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, value);
    }
    response
}

/// Starts the server on `127.0.0.1:0` with these replies.
pub async fn spawn_model_server(replies: Vec<ScriptedReply>) -> Result<ModelServer, TestkitError> {
    let script = Arc::new(Script {
        replies: Mutex::new(replies.into()),
        requests: Mutex::new(Vec::new()),
        paths: Mutex::new(Vec::new()),
        arrivals: Mutex::new(Vec::new()),
        connections: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .route("/chat/completions", post(complete))
        .route("/v1/messages", post(complete))
        .route("/v1/responses", post(complete))
        .route("/responses", post(complete))
        .route("/v1beta/models/{model_and_method}", post(complete))
        .with_state(script.clone());
    let listener = Counted {
        inner: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        script: script.clone(),
    };
    let addr = listener.inner.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Ok(ModelServer {
        addr,
        script,
        shutdown: Some(tx),
    })
}

/// The server's listener, counting the connections it accepts.
struct Counted {
    inner: tokio::net::TcpListener,
    script: Arc<Script>,
}

impl axum::serve::Listener for Counted {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let accepted = axum::serve::Listener::accept(&mut self.inner).await;
        self.script.connections.fetch_add(1, Ordering::SeqCst);
        accepted
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
