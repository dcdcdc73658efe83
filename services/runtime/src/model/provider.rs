//! Model endpoints for the runtime-driven loop: OpenAI-compatible servers speaking Chat
//! Completions (also vLLM, Ollama, llama.cpp servers) or Responses, Anthropic Messages, Gemini
//! `generateContent`, and a scripted provider that replays a file of model turns for offline runs
//! and tests.
//!
//! A provider only moves bytes: request bodies are assembled from the provider-native history and
//! the turn's tool fields (`toolplane-model` owns the wire formats), and the response body is
//! returned as text for the caller to store and decode. Whether a failure is worth retrying is
//! decided here (timeouts, connection errors, 429 and 5xx are; other statuses are not), and so is
//! which wire format an endpoint speaks ([`resolve_format`]).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolplane_core::egress::EgressPolicy;
use toolplane_core::envallow::EnvAllowList;
use toolplane_core::error::with_causes;
use toolplane_core::profile::{ModelEndpoint as ProfileEndpoint, ModelKind};
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;

pub use toolplane_model::user_message;

/// Largest response body accepted from a model endpoint; a body is read chunk by chunk and refused
/// as soon as it passes this, before it is all in memory.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// A model endpoint, resolved from the run spec or the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub kind: ModelKind,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub max_retries: u32,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub extra_body: Map<String, Value>,
    pub headers: Vec<(String, String)>,
    pub script: Option<Vec<Value>>,
    /// The wire format spoken, resolved from the kind and the requested format.
    pub format: ProviderFormat,
    /// The most tokens one request may carry; `None` uses the runtime's default.
    pub context_budget_tokens: Option<u32>,
}

/// The wire format an endpoint of `kind` speaks when `requested` (none = the kind's native
/// format): an OpenAI-compatible endpoint speaks Chat Completions or Responses, Anthropic only
/// Messages, Gemini only `generateContent`, and a scripted endpoint replays Chat Completions
/// turns. Any other combination is refused with what the kind accepts.
pub fn resolve_format(
    kind: ModelKind,
    requested: Option<ProviderFormat>,
) -> Result<ProviderFormat, String> {
    let (native, accepted, name): (ProviderFormat, &[ProviderFormat], &str) = match kind {
        ModelKind::OpenaiCompatible => (
            ProviderFormat::OpenAiChat,
            &[ProviderFormat::OpenAiChat, ProviderFormat::OpenAiResponses],
            "openai-compatible",
        ),
        ModelKind::Anthropic => (
            ProviderFormat::AnthropicMessages,
            &[ProviderFormat::AnthropicMessages],
            "anthropic",
        ),
        ModelKind::Gemini => (ProviderFormat::Gemini, &[ProviderFormat::Gemini], "gemini"),
        ModelKind::Scripted => (
            ProviderFormat::OpenAiChat,
            &[ProviderFormat::OpenAiChat],
            "scripted",
        ),
    };
    match requested {
        None => Ok(native),
        Some(f) if accepted.contains(&f) => Ok(f),
        Some(f) => {
            let names: Vec<&str> = accepted.iter().map(|a| a.as_str()).collect();
            Err(format!(
                "a {name} model endpoint cannot speak the provider format {f}; it speaks {}",
                names.join(" or ")
            ))
        }
    }
}

impl Endpoint {
    pub fn format(&self) -> ProviderFormat {
        self.format
    }

    /// Refuses a base URL whose host `egress` refuses (`model.egress_denied`); a scripted
    /// endpoint connects nowhere.
    pub fn check_egress(&self, egress: &EgressPolicy) -> Result<(), String> {
        if self.kind == ModelKind::Scripted {
            return Ok(());
        }
        super::egress::check_base_url(egress, &self.base_url)
    }

    /// From a run spec's endpoint.
    pub fn from_pb(
        e: &pb::ModelEndpoint,
        default_timeout: Duration,
        default_retries: u32,
    ) -> Result<Endpoint, String> {
        let kind = match pb::ModelEndpointKind::try_from(e.kind)
            .unwrap_or(pb::ModelEndpointKind::Unspecified)
        {
            pb::ModelEndpointKind::OpenaiCompatible => ModelKind::OpenaiCompatible,
            pb::ModelEndpointKind::Anthropic => ModelKind::Anthropic,
            pb::ModelEndpointKind::Gemini => ModelKind::Gemini,
            pb::ModelEndpointKind::Scripted => ModelKind::Scripted,
            pb::ModelEndpointKind::Unspecified => {
                return Err("the model endpoint needs a kind".into());
            }
        };
        let extra_body = match e
            .extra_body_json
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(m)) => m,
                _ => return Err("extra_body_json must be a JSON object".into()),
            },
            None => Map::new(),
        };
        let script = match kind {
            ModelKind::Scripted => Some(parse_script(e.script_json.as_deref().unwrap_or(""))?),
            _ => None,
        };
        let requested = match pb::ProviderFormat::try_from(e.provider_format) {
            Ok(pb::ProviderFormat::Unspecified) => None,
            Ok(pb::ProviderFormat::OpenaiChat) => Some(ProviderFormat::OpenAiChat),
            Ok(pb::ProviderFormat::OpenaiResponses) => Some(ProviderFormat::OpenAiResponses),
            Ok(pb::ProviderFormat::AnthropicMessages) => Some(ProviderFormat::AnthropicMessages),
            Ok(pb::ProviderFormat::Gemini) => Some(ProviderFormat::Gemini),
            Err(_) => {
                return Err(format!(
                    "the model endpoint's provider_format {} is not a known format",
                    e.provider_format
                ));
            }
        };
        let format = resolve_format(kind, requested)?;
        Ok(Endpoint {
            kind,
            base_url: base_url(kind, &e.base_url)?,
            model: e.model.clone(),
            api_key: api_key(e.api_key_env.as_deref())?,
            timeout: if e.timeout_ms == 0 {
                default_timeout
            } else {
                Duration::from_millis(e.timeout_ms)
            },
            max_retries: e.max_retries.unwrap_or(default_retries).min(10),
            max_output_tokens: e.max_output_tokens,
            temperature: e.temperature,
            extra_body,
            headers: e
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            script,
            format,
            context_budget_tokens: e.context_budget_tokens.filter(|n| *n > 0),
        })
    }

    /// From a profile's endpoint (runs whose spec names none, delegated children, handoff targets).
    pub fn from_profile(
        e: &ProfileEndpoint,
        default_timeout: Duration,
        default_retries: u32,
    ) -> Result<Endpoint, String> {
        let script = match (&e.kind, &e.script) {
            (ModelKind::Scripted, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|err| format!("reading the script `{path}`: {err}"))?;
                Some(parse_script(&text)?)
            }
            _ => None,
        };
        let requested = e
            .provider_format
            .as_deref()
            .map(ProviderFormat::parse)
            .transpose()
            .map_err(|err| format!("model.providerFormat: {err}"))?;
        let format = resolve_format(e.kind, requested)?;
        Ok(Endpoint {
            kind: e.kind,
            base_url: base_url(e.kind, e.base_url.as_deref().unwrap_or_default())?,
            model: e.model.clone().unwrap_or_default(),
            api_key: api_key(e.api_key_env.as_deref())?,
            timeout: e
                .timeout_ms
                .map(|t| Duration::from_millis(u64::from(t)))
                .unwrap_or(default_timeout),
            max_retries: e.max_retries.unwrap_or(default_retries).min(10),
            max_output_tokens: None,
            temperature: None,
            extra_body: Map::new(),
            headers: Vec::new(),
            script,
            format,
            context_budget_tokens: e.context_budget_tokens.filter(|n| *n > 0),
        })
    }
}

/// A base URL trimmed of spaces and trailing slashes, required and checked for every kind but
/// `scripted`.
fn base_url(kind: ModelKind, raw: &str) -> Result<String, String> {
    let url = raw.trim().trim_end_matches('/');
    if kind != ModelKind::Scripted {
        if url.is_empty() {
            return Err("the model endpoint needs a base_url".into());
        }
        check_base_url(url)?;
    }
    Ok(url.to_owned())
}

/// The API key from the environment variable the endpoint names, if it names one.
/// Refuses an `api_key_env` that names a variable not on the runtime's `env_allow` list: a run
/// spec or profile could otherwise have any secret of the runtime's environment sent to a URL of
/// its choosing (docs/runtime.md, "Model endpoints").
pub fn check_api_key_env(var: Option<&str>, allow: &EnvAllowList) -> Result<(), String> {
    match var.filter(|v| !v.is_empty()) {
        Some(var) if !allow.allows(var) => Err(format!(
            "api_key_env names `{}`, which is not on the runtime's env_allow list",
            var.chars().take(80).collect::<String>()
        )),
        _ => Ok(()),
    }
}

/// Refuses a profile's `model.script` outside `roots` (compared after resolving symlinks and
/// `..`), so a profile cannot have the runtime read any file of its host. `None` allows any path
/// (`toolplane up` on loopback).
pub fn check_script_path(path: &str, roots: Option<&[PathBuf]>) -> Result<(), String> {
    let Some(roots) = roots else { return Ok(()) };
    let real =
        std::fs::canonicalize(path).map_err(|err| format!("reading the script `{path}`: {err}"))?;
    let inside = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .any(|root| real.starts_with(root));
    if inside {
        Ok(())
    } else {
        Err(format!(
            "runtime.path_not_allowed: the script `{path}` is not under the runtime's script_roots"
        ))
    }
}

fn api_key(var: Option<&str>) -> Result<Option<String>, String> {
    match var.filter(|v| !v.is_empty()) {
        Some(var) => std::env::var(var).map(Some).map_err(|_| {
            format!("the environment variable `{var}` holding the api key is not set")
        }),
        None => Ok(None),
    }
}

/// A model endpoint's base URL is `http://…`, or `https://…` when this runtime was built with TLS
/// (the `tls` feature; release images have it). Refused at the start of the run, with the fix,
/// rather than failing every attempt of its first model call.
fn check_base_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        format!("the model endpoint's base_url `{url}` is not a URL ({e}); it looks like http://host:port/v1")
    })?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "the model endpoint's base_url `{url}` names no host"
        ));
    }
    match parsed.scheme() {
        "http" => Ok(()),
        "https" if cfg!(feature = "tls") => Ok(()),
        "https" => Err(format!(
            "the model endpoint {url} is https, and this runtime was built without TLS: build it with `--features tls` (release images have it), or use a plain-http endpoint"
        )),
        _ => Err(format!(
            "the model endpoint's base_url `{url}` must start with http:// or https://"
        )),
    }
}

/// A script: `{"turns": [<assistant message>, …]}` or a bare array of turns. Each turn is an OpenAI
/// Chat Completions assistant message (`content`, `tool_calls`); call ids and `type` may be left
/// out and `arguments` may be an object — the scripted provider fills them in.
pub fn parse_script(text: &str) -> Result<Vec<Value>, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the script is not valid json: {e}"))?;
    let turns = match v {
        Value::Array(t) => t,
        Value::Object(mut o) => match o.remove("turns") {
            Some(Value::Array(t)) => t,
            _ => return Err("the script needs a `turns` array".into()),
        },
        _ => return Err("the script must be an array of turns or an object with `turns`".into()),
    };
    if turns.is_empty() || turns.len() > 10_000 {
        return Err("a script has 1 to 10000 turns".into());
    }
    Ok(turns)
}

/// A failed model call.
#[derive(Debug, Clone)]
pub struct CallError {
    pub retryable: bool,
    pub status: Option<u16>,
    pub message: String,
}

/// A model client for one invocation.
#[derive(Debug)]
pub struct ModelClient {
    endpoint: Endpoint,
    http: reqwest::Client,
    script_pos: Mutex<usize>,
}

impl ModelClient {
    /// A client for `endpoint` whose connections and redirects follow `egress`: a base URL the
    /// policy refuses is refused here, before any call (`model.egress_denied`).
    pub fn new(endpoint: Endpoint, egress: &EgressPolicy) -> Result<Self, String> {
        endpoint.check_egress(egress)?;
        let builder = reqwest::Client::builder().timeout(endpoint.timeout);
        let http = super::egress::apply(egress, builder)
            .build()
            .map_err(|e| format!("building the http client: {e}"))?;
        Ok(ModelClient {
            endpoint,
            http,
            script_pos: Mutex::new(0),
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// One attempt: the request body from the system prompt, the history and the turn's tool
    /// fields; returns the response body.
    pub async fn call(
        &self,
        system: &str,
        history: &[Value],
        tools: &Map<String, Value>,
        round: u32,
    ) -> Result<String, CallError> {
        let e = &self.endpoint;
        if e.kind == ModelKind::Scripted {
            let (body, delay) = self.scripted(round)?;
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            return Ok(body);
        }
        let (url, mut body) = request(e, system, history);
        if let Some(obj) = body.as_object_mut() {
            obj.extend(tools.clone());
            if let Some(t) = e.temperature {
                if e.format == ProviderFormat::Gemini {
                    // Gemini takes sampling settings in `generationConfig` only.
                    let config = obj.entry("generationConfig").or_insert_with(|| json!({}));
                    if let Some(c) = config.as_object_mut() {
                        c.insert("temperature".into(), json!(t));
                    }
                } else {
                    obj.insert("temperature".into(), json!(t));
                }
            }
            obj.extend(e.extra_body.clone());
        }
        let mut req = self.http.post(&url).json(&body);
        if let Some(key) = &e.api_key {
            req = match e.kind {
                ModelKind::Anthropic => req
                    .header("x-api-key", key)
                    .header("anthropic-version", "2023-06-01"),
                ModelKind::Gemini => req.header("x-goog-api-key", key),
                _ => req.bearer_auth(key),
            };
        } else if e.kind == ModelKind::Anthropic {
            req = req.header("anthropic-version", "2023-06-01");
        }
        for (k, v) in &e.headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|err| CallError {
            retryable: true,
            status: None,
            message: format!("request to {url} failed: {}", with_causes(&err)),
        })?;
        let status = resp.status().as_u16();
        let bytes = super::body::read_capped(resp, status, MAX_RESPONSE_BYTES).await?;
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if !(200..300).contains(&status) {
            let retryable = status == 429 || status >= 500 || status == 408;
            let snippet: String = text.chars().take(300).collect();
            return Err(CallError {
                retryable,
                status: Some(status),
                message: format!("the model endpoint answered {status}: {snippet}"),
            });
        }
        Ok(text)
    }

    /// The next scripted turn and how long the scripted model "thinks" before answering (a turn's
    /// optional `delayMs`, at most 60 s). A turn's optional `usage` (Chat Completions' `usage` object)
    /// becomes the response's.
    fn scripted(&self, round: u32) -> Result<(String, Option<Duration>), CallError> {
        let Some(turns) = &self.endpoint.script else {
            return Err(CallError {
                retryable: false,
                status: None,
                message: "no script".into(),
            });
        };
        let mut pos = match self.script_pos.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        let Some(turn) = turns.get(*pos) else {
            return Err(CallError {
                retryable: false,
                status: None,
                message: format!(
                    "the script ended after {} turns, before the run finished",
                    turns.len()
                ),
            });
        };
        *pos += 1;
        let delay = turn
            .get("delayMs")
            .and_then(Value::as_u64)
            .map(|ms| Duration::from_millis(ms.min(60_000)));
        let message = normalize_scripted_turn(turn, round);
        let mut body = json!({"id": format!("scripted-{round}"), "object": "chat.completion", "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]});
        // A turn's `usage` is reported as the response's, as a provider would.
        if let Some(usage) = turn.get("usage") {
            body["usage"] = usage.clone();
        }
        let body = body.to_string();
        Ok((body, delay))
    }
}

/// Fills in what script authors may leave out of an assistant message.
fn normalize_scripted_turn(turn: &Value, round: u32) -> Value {
    let mut m = match turn {
        Value::String(text) => json!({"role": "assistant", "content": text}),
        other => other.clone(),
    };
    if let Some(obj) = m.as_object_mut() {
        obj.remove("delayMs");
        obj.remove("usage");
        obj.entry("role").or_insert(json!("assistant"));
        obj.entry("content").or_insert(Value::Null);
        if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
            for (i, c) in calls.iter_mut().enumerate() {
                if let Some(c) = c.as_object_mut() {
                    c.entry("id").or_insert(json!(format!("call_{round}_{i}")));
                    c.entry("type").or_insert(json!("function"));
                    if let Some(Value::Object(f)) = c.get_mut("function")
                        && let Some(args) = f.get("arguments")
                        && !args.is_string()
                    {
                        let text = args.to_string();
                        f.insert("arguments".into(), json!(text));
                    }
                }
            }
        }
    }
    m
}

/// The request URL and body (without the tool fields) in the endpoint's format.
fn request(e: &Endpoint, system: &str, history: &[Value]) -> (String, Value) {
    match e.format {
        ProviderFormat::AnthropicMessages => {
            let mut b = json!({"model": e.model, "max_tokens": e.max_output_tokens.unwrap_or(4096), "messages": history});
            if !system.is_empty() {
                b["system"] = json!(system);
            }
            (format!("{}/v1/messages", e.base_url), b)
        }
        ProviderFormat::Gemini => {
            let mut b = json!({"contents": history});
            if !system.is_empty() {
                b["systemInstruction"] = json!({"parts": [{"text": system}]});
            }
            if let Some(n) = e.max_output_tokens {
                b["generationConfig"] = json!({"maxOutputTokens": n});
            }
            (
                format!("{}/v1beta/models/{}:generateContent", e.base_url, e.model),
                b,
            )
        }
        // The base URL is the OpenAI-style one that ends in `/v1`, as for Chat Completions.
        ProviderFormat::OpenAiResponses => {
            let mut b = json!({"model": e.model, "input": history});
            if !system.is_empty() {
                b["instructions"] = json!(system);
            }
            if let Some(n) = e.max_output_tokens {
                b["max_output_tokens"] = json!(n);
            }
            (format!("{}/responses", e.base_url), b)
        }
        ProviderFormat::OpenAiChat => {
            let mut messages = Vec::with_capacity(history.len() + 1);
            if !system.is_empty() {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.extend(history.iter().cloned());
            let mut b = json!({"model": e.model, "messages": messages});
            if let Some(n) = e.max_output_tokens {
                b["max_tokens"] = json!(n);
            }
            (format!("{}/chat/completions", e.base_url), b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_need_a_scheme_this_build_speaks() {
        assert!(check_base_url("http://127.0.0.1:11434/v1").is_ok());
        for bad in [
            "localhost:11434/v1",
            "ftp://host/v1",
            "http://",
            "not a url",
        ] {
            assert!(check_base_url(bad).is_err(), "{bad}");
        }
        let https = check_base_url("https://api.openai.com/v1");
        if cfg!(feature = "tls") {
            assert!(https.is_ok());
        } else {
            assert!(https.unwrap_err().contains("--features tls"));
        }
    }

    fn endpoint(
        kind: pb::ModelEndpointKind,
        format: pb::ProviderFormat,
    ) -> Result<Endpoint, String> {
        let e = pb::ModelEndpoint {
            kind: kind as i32,
            provider_format: format as i32,
            base_url: "http://127.0.0.1:1/v1".into(),
            model: "m".into(),
            script_json: Some("[\"x\"]".into()),
            ..Default::default()
        };
        Endpoint::from_pb(&e, Duration::from_secs(1), 0)
    }

    #[test]
    fn an_endpoint_speaks_its_requested_format_or_its_kinds_own() {
        use pb::ModelEndpointKind as K;
        use pb::ProviderFormat as F;
        for (kind, format, want) in [
            (
                K::OpenaiCompatible,
                F::Unspecified,
                ProviderFormat::OpenAiChat,
            ),
            (
                K::OpenaiCompatible,
                F::OpenaiChat,
                ProviderFormat::OpenAiChat,
            ),
            (
                K::OpenaiCompatible,
                F::OpenaiResponses,
                ProviderFormat::OpenAiResponses,
            ),
            (
                K::Anthropic,
                F::Unspecified,
                ProviderFormat::AnthropicMessages,
            ),
            (
                K::Anthropic,
                F::AnthropicMessages,
                ProviderFormat::AnthropicMessages,
            ),
            (K::Gemini, F::Unspecified, ProviderFormat::Gemini),
            (K::Gemini, F::Gemini, ProviderFormat::Gemini),
            (K::Scripted, F::Unspecified, ProviderFormat::OpenAiChat),
        ] {
            assert_eq!(
                endpoint(kind, format).unwrap().format(),
                want,
                "{kind:?} {format:?}"
            );
        }
        for (kind, format, says) in [
            (
                K::Anthropic,
                F::Gemini,
                "a anthropic model endpoint cannot speak the provider format gemini; it speaks anthropic_messages",
            ),
            (K::Anthropic, F::OpenaiChat, "it speaks anthropic_messages"),
            (K::Gemini, F::OpenaiResponses, "it speaks gemini"),
            (
                K::OpenaiCompatible,
                F::AnthropicMessages,
                "it speaks openai_chat or openai_responses",
            ),
            (K::Scripted, F::OpenaiResponses, "it speaks openai_chat"),
        ] {
            let err = endpoint(kind, format).unwrap_err();
            assert!(err.contains(says), "{kind:?} {format:?}: {err}");
        }
    }

    #[test]
    fn scripts_are_read_only_under_the_configured_roots() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let inside = root.path().join("turns.json");
        std::fs::write(&inside, "[]").unwrap();
        let secret = outside.path().join("secret.json");
        std::fs::write(&secret, "{}").unwrap();
        let link = root.path().join("link.json");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let roots = [root.path().to_owned()];
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        check_script_path(&path(&inside), Some(&roots)).unwrap();
        let dotted = format!("{}/../{}", root.path().display(), path(&secret));
        for bad in [path(&secret), path(&link), dotted, "/etc/passwd".to_owned()] {
            let err = check_script_path(&bad, Some(&roots)).unwrap_err();
            assert!(
                err.starts_with("runtime.path_not_allowed") || err.contains("reading the script"),
                "{bad}: {err}"
            );
            assert!(!err.contains("{}"), "the file was read: {err}");
        }
        assert!(
            check_script_path(&path(&secret), Some(&roots))
                .unwrap_err()
                .starts_with("runtime.path_not_allowed")
        );
        check_script_path(&path(&secret), None).unwrap();
        check_script_path(&path(&inside), Some(&[])).unwrap_err();
    }

    #[test]
    fn api_key_env_names_only_allowed_variables() {
        let allow = EnvAllowList::new(["*_API_KEY"]);
        check_api_key_env(Some("OPENAI_API_KEY"), &allow).unwrap();
        check_api_key_env(None, &allow).unwrap();
        check_api_key_env(Some(""), &allow).unwrap();
        let err = check_api_key_env(Some("AWS_SECRET_ACCESS_KEY"), &allow).unwrap_err();
        assert!(err.contains("env_allow"), "{err}");
        assert!(check_api_key_env(Some("OPENAI_API_KEY"), &EnvAllowList::default()).is_err());
    }

    #[test]
    fn a_profile_endpoint_names_its_format() {
        let mut p: ProfileEndpoint = serde_json::from_value(json!({"kind": "openai-compatible", "baseUrl": "http://h/v1", "providerFormat": "openai_responses", "contextBudgetTokens": 5000})).unwrap();
        let e = Endpoint::from_profile(&p, Duration::from_secs(1), 0).unwrap();
        assert_eq!(e.format(), ProviderFormat::OpenAiResponses);
        assert_eq!(e.context_budget_tokens, Some(5000));
        p.kind = ModelKind::Anthropic;
        assert!(
            Endpoint::from_profile(&p, Duration::from_secs(1), 0)
                .unwrap_err()
                .contains("cannot speak")
        );
    }

    #[test]
    fn a_responses_request_carries_input_instructions_and_max_output_tokens() {
        let mut e = endpoint(
            pb::ModelEndpointKind::OpenaiCompatible,
            pb::ProviderFormat::OpenaiResponses,
        )
        .unwrap();
        e.max_output_tokens = Some(256);
        let history = vec![user_message(ProviderFormat::OpenAiResponses, "hi")];
        let (url, body) = request(&e, "be brief", &history);
        assert_eq!(url, "http://127.0.0.1:1/v1/responses");
        assert_eq!(
            body,
            json!({"model": "m", "input": [{"role": "user", "content": "hi"}], "instructions": "be brief", "max_output_tokens": 256})
        );
    }

    #[test]
    fn scripted_turns_are_completed() {
        let m = normalize_scripted_turn(
            &json!({"tool_calls": [{"function": {"name": "dice_roll", "arguments": {"notation": "d6"}}}]}),
            2,
        );
        assert_eq!(m["tool_calls"][0]["id"], "call_2_0");
        assert_eq!(m["tool_calls"][0]["type"], "function");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            "{\"notation\":\"d6\"}"
        );
        assert_eq!(
            normalize_scripted_turn(&json!("hello"), 1)["content"],
            "hello"
        );
        assert!(parse_script("[]").is_err());
        assert!(parse_script("{\"turns\": [\"x\"]}").is_ok());
    }
}
