//! Runtime configuration: where it listens, where its peers are, and the rules it enforces.
//!
//! Read from a TOML file and overridden by flags / `TOOLPLANE_RUNTIME_*` environment variables in
//! `main.rs`; the library takes the resolved [`RuntimeConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolplane_core::egress::EgressPolicy;
use toolplane_core::envallow::EnvAllowList;
use toolplane_core::governance::HardlineRules;

/// Everything the runtime needs to serve.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct RuntimeConfig {
    /// gRPC listen address; loopback unless configured otherwise.
    pub listen: SocketAddr,
    /// The catalog service (profiles, policies, tools).
    pub catalog_url: String,
    /// The workspace service (storage RPCs and its `ToolExecutor`).
    pub workspace_url: String,
    /// The mcp-proxy's `ToolExecutor`.
    pub mcp_proxy_url: String,
    /// The runtime's own state (run and invocation records) unless `[store]` names another
    /// backend; the tokens of `--auth` are kept here in every case.
    pub data_dir: PathBuf,
    /// `[store]`: the store's backend (docs/storage.md, "Choosing the backend"); unset, a
    /// filesystem store at `data_dir`. Runtimes over one shared store read each other's runs
    /// (docs/runtime.md, "Run ownership").
    pub store: Option<toolplane_store::StoreConfig>,
    /// Paths and argument fragments no call may use.
    pub hardline: HardlineRules,
    /// Variables a model endpoint's `api_key_env` may name (names or one-`*` patterns); empty
    /// by default: no variable of the runtime may be named. `toolplane up` allows `*_API_KEY`.
    pub env_allow: EnvAllowList,
    /// Where model endpoints may be reached (docs/egress.md); `private_networks = "auto"` is
    /// decided by the listen address.
    pub egress: EgressPolicy,
    /// `Host` header values (a name, optionally with `:port`) the MCP face at `/mcp` answers
    /// besides the loopback names (`localhost`, `127.0.0.1`, `::1`), which it always answers;
    /// `"*"` answers any (only behind a proxy that checks the host). Every other host gets 403:
    /// the face refuses DNS-rebinding requests (docs/mcp-server.md, "Allowed hosts").
    pub mcp_allowed_hosts: Vec<String>,
    /// Directories a profile's `model.script` may be read from; unset, any path (a runtime on
    /// loopback), and a runtime listening beyond loopback without it reads none.
    pub script_roots: Option<Vec<PathBuf>>,
    /// A host-driven invocation with no request for this long is closed.
    #[serde(with = "secs")]
    pub invocation_idle_timeout: Duration,
    /// Default deadline of a call to an external tool host or the mcp-proxy.
    #[serde(with = "secs")]
    pub executor_timeout: Duration,
    /// Default per-attempt timeout of a model call.
    #[serde(with = "secs")]
    pub model_timeout: Duration,
    /// Default retries of a model call on timeouts, 429 and 5xx.
    pub model_max_retries: u32,
    /// First step of the model retries' backoff; doubles each retry, the wait drawn below it
    /// (full jitter) unless the endpoint sends `Retry-After`.
    #[serde(with = "millis")]
    pub model_retry_backoff: Duration,
    /// The most tokens (estimated) one model request may carry when its endpoint names no
    /// `context_budget_tokens`; 0 never trims.
    #[serde(default = "default_context_budget")]
    pub model_context_budget_tokens: u32,
    /// Longest `agent.await` (and sub-agent tool call) waits for delegated tasks.
    #[serde(with = "secs", default = "default_await_timeout")]
    pub agent_await_timeout: Duration,
    /// `[auth]`: the authentication flags' settings; the flags override them (docs/auth.md).
    pub auth: toolplane_serve::auth::AuthConfig,
    /// `[tls]`: the TLS flags' settings, the runtime's own port and its calls to the catalog,
    /// the workspace and the mcp-proxy (docs/auth.md, "mTLS between services").
    pub tls: toolplane_serve::tls::TlsConfig,
    /// How long held calls and `ask_user` questions wait, and what happens when nobody decides
    /// (docs/approvals.md).
    pub approvals: ApprovalsConfig,
    /// Run leases (docs/runtime.md "Run ownership"); off for a single runtime.
    pub cluster: ClusterConfig,
    /// The credential sent to the catalog, the workspace and the mcp-proxy
    /// (`authorization: Bearer …`) when they require one; never read from or written to the
    /// file: `--peer-token-file`, `TOOLPLANE_PEER_TOKEN`, or `toolplane up` set it (docs/auth.md).
    #[serde(skip)]
    pub peer_token: Option<toolplane_auth::TokenSecret>,
}

impl RuntimeConfig {
    /// The store to open: `[store]`, else a filesystem store at `data_dir`.
    pub fn store_config(&self) -> toolplane_store::StoreConfig {
        self.store
            .clone()
            .unwrap_or_else(|| toolplane_store::StoreConfig::Fs {
                root: self.data_dir.clone(),
            })
    }
}

fn default_context_budget() -> u32 {
    DEFAULT_CONTEXT_BUDGET_TOKENS
}

/// The default context budget: under the 128k-token windows of current hosted models, with room
/// for the reply and the estimate's error.
pub const DEFAULT_CONTEXT_BUDGET_TOKENS: u32 = 100_000;

fn default_await_timeout() -> Duration {
    Duration::from_secs(10 * 60)
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7410)),
            catalog_url: "http://127.0.0.1:7420".into(),
            workspace_url: "http://127.0.0.1:7430".into(),
            mcp_proxy_url: "http://127.0.0.1:7440".into(),
            data_dir: PathBuf::from(".toolplane/runtime"),
            store: None,
            hardline: HardlineRules::default(),
            env_allow: EnvAllowList::default(),
            egress: EgressPolicy::default(),
            mcp_allowed_hosts: Vec::new(),
            script_roots: None,
            invocation_idle_timeout: Duration::from_secs(30 * 60),
            executor_timeout: Duration::from_secs(60),
            model_timeout: Duration::from_secs(120),
            model_max_retries: 3,
            model_retry_backoff: Duration::from_millis(500),
            agent_await_timeout: default_await_timeout(),
            model_context_budget_tokens: DEFAULT_CONTEXT_BUDGET_TOKENS,
            auth: toolplane_serve::auth::AuthConfig::default(),
            tls: toolplane_serve::tls::TlsConfig::default(),
            approvals: ApprovalsConfig::default(),
            cluster: ClusterConfig::default(),
            peer_token: None,
        }
    }
}

/// `[cluster]`: whether this runtime takes a lease on every run it drives, how long a lease lasts
/// unless renewed (renewed every third of it), the holder name it uses (empty: a fresh
/// `runtime-<uuid>` per process), the gRPC URL the other runtimes reach it at (requests for a run
/// it drives are forwarded there; empty: they are refused with `runtime.not_owner`), and how long
/// a stop waits for in-flight turns before it hands its runs over (docs/runtime.md, "Taking a run
/// over").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "snake_case", deny_unknown_fields)]
pub struct ClusterConfig {
    pub leases: bool,
    /// 1 ms to 10 minutes, the TTLs the workspace grants (docs/workspace.md, "Epochs and run
    /// leases"); anything else is refused when the file is read, not at the first run.
    #[serde(deserialize_with = "lease_ttl_ms")]
    pub lease_ttl_ms: u64,
    pub holder: String,
    pub advertise: String,
    pub drain_ms: u64,
}

/// The longest lease the workspace grants.
const MAX_LEASE_TTL_MS: u64 = 600_000;

fn lease_ttl_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let ttl = u64::deserialize(d)?;
    if ttl == 0 || ttl > MAX_LEASE_TTL_MS {
        return Err(serde::de::Error::custom(format!(
            "lease_ttl_ms must be 1 to {MAX_LEASE_TTL_MS}, not {ttl}"
        )));
    }
    Ok(ttl)
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            leases: false,
            lease_ttl_ms: 10_000,
            holder: String::new(),
            advertise: String::new(),
            drain_ms: 20_000,
        }
    }
}

/// What happens to a held call nobody decides in time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutOutcome {
    /// The call is answered `policy.approval_denied` (the default).
    #[default]
    Deny,
    /// The call runs as if approved.
    Approve,
}

/// Timeouts of held calls: the first rule whose `tools` selector matches the tool decides, else
/// the defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// How long a held call waits for a decision, in seconds (default 3,600; 0 waits forever).
    pub timeout_seconds: u64,
    /// What an expired approval does (default deny).
    pub on_timeout: TimeoutOutcome,
    /// Per-tool timeouts.
    pub rules: Vec<ApprovalRule>,
}

/// The timeout of the held calls of some tools.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRule {
    /// Which tools (a tool selector: `mcp:github/*`, `annotation:destructive`, `builtin:ask_user`).
    pub tools: toolplane_core::selector::ToolSelector,
    /// Seconds to wait; 0 waits forever.
    pub timeout_seconds: u64,
    /// What an expiry does.
    #[serde(default)]
    pub on_timeout: TimeoutOutcome,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig {
            timeout_seconds: 3_600,
            on_timeout: TimeoutOutcome::Deny,
            rules: Vec::new(),
        }
    }
}

impl ApprovalsConfig {
    /// The timeout (`None`: never) and its outcome for a tool.
    pub fn timeout_for(
        &self,
        binding: &toolplane_core::snapshot::ToolBinding,
    ) -> (Option<Duration>, TimeoutOutcome) {
        let rule = self.rules.iter().find(|r| {
            r.tools.matches_tool(
                binding.tool_id(),
                binding.server_name.as_deref(),
                binding.descriptor.annotations(),
            )
        });
        let (secs, outcome) = match rule {
            Some(r) => (r.timeout_seconds, r.on_timeout),
            None => (self.timeout_seconds, self.on_timeout),
        };
        ((secs > 0).then(|| Duration::from_secs(secs)), outcome)
    }
}

mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Leases are off unless a config file turns them on, as a cluster's runtimes do.
    #[test]
    fn run_leases_are_off_by_default_and_read_from_the_cluster_table() {
        let none: RuntimeConfig = toml::from_str("").unwrap();
        assert!(!none.cluster.leases);
        let on: RuntimeConfig =
            toml::from_str("[cluster]\nleases = true\nlease_ttl_ms = 3000\nholder = \"rt-1\"\n")
                .unwrap();
        assert_eq!(
            on.cluster,
            ClusterConfig {
                leases: true,
                lease_ttl_ms: 3000,
                holder: "rt-1".into(),
                ..ClusterConfig::default()
            }
        );
        assert!(toml::from_str::<RuntimeConfig>("[cluster]\nlease = true\n").is_err());
        for ttl in ["0", "600001"] {
            let err =
                toml::from_str::<RuntimeConfig>(&format!("[cluster]\nlease_ttl_ms = {ttl}\n"))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains("lease_ttl_ms must be 1 to 600000"), "{err}");
        }
    }

    #[test]
    fn the_store_is_the_data_dir_unless_a_store_table_names_one() {
        let c: RuntimeConfig = toml::from_str("data_dir = \"/rt\"").unwrap();
        assert_eq!(
            c.store_config(),
            toolplane_store::StoreConfig::Fs { root: "/rt".into() }
        );
        let c: RuntimeConfig = toml::from_str(
            "[store]\nkind = \"postgres\"\nconnection = \"host=/s\"\ntable = \"runtime\"\n",
        )
        .unwrap();
        assert_eq!(
            c.store_config(),
            toolplane_store::StoreConfig::Postgres {
                connection: "host=/s".into(),
                table: "runtime".into(),
                max_connections: 8,
            }
        );
        assert!(toml::from_str::<RuntimeConfig>("[store]\nkind = \"disk\"\n").is_err());
    }
}
