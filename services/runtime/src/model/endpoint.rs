//! What a model endpoint is: its kind, URL, model, key and limits ([`Endpoint`]), resolved from a
//! run spec's endpoint or a profile's, and the wire format it speaks ([`resolve_format`]). The
//! checks made before any call live here too: the base URL's scheme and host, that `api_key_env`
//! names an allowed variable, and that a profile's script lies under the runtime's script roots.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};
use toolplane_core::egress::EgressPolicy;
use toolplane_core::envallow::EnvAllowList;
use toolplane_core::profile::{ModelEndpoint as ProfileEndpoint, ModelKind};
use toolplane_model::ProviderFormat;
use toolplane_proto::v1 as pb;

use super::script::parse_script;

/// A model endpoint, resolved from the run spec or the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub kind: ModelKind,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// The environment variable `api_key` was read from, so a resumed run reads it again rather
    /// than the key being stored.
    pub api_key_env: Option<String>,
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
            api_key_env: e.api_key_env.clone().filter(|v| !v.is_empty()),
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
            api_key_env: e.api_key_env.clone().filter(|v| !v.is_empty()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
