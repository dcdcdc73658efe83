//! How a service's authentication is configured (docs/auth.md): the flags every service binary
//! and `toolplane up` share ([`AuthArgs`], each also an environment variable), the refusal to
//! serve beyond loopback without authentication ([`AuthArgs::check_exposure`]), the
//! [`Authenticator`] those flags describe with its token store and first admin token
//! ([`AuthArgs::start`]), and the credential a service calls its peers with ([`peer_token`]).
//! Owns no verification itself: that is `toolplane-auth`. The `[auth]` section of a service's
//! configuration file is [`AuthConfig`], merged under the flags by [`AuthArgs::over`].

mod config;

pub use config::AuthConfig;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toolplane_auth::{
    Authenticator, DEFAULT_CACHE_CAPACITY, JwtConfig, JwtVerifier, TokenSecret, TokenStore,
    admin_token_path, bootstrap_admin_token,
};
use toolplane_store::{FsStore, Store, StoreExt as _, StoreOptions};

/// The cell of the first admin token and of every caller when authentication is off.
pub const DEFAULT_CELL: &str = "default";
/// The namespace of the token store inside its directory.
pub const TOKEN_NAMESPACE: &str = "auth";
/// The environment variable holding the credential a service calls its peers with, when no
/// `--peer-token-file` is given.
pub const PEER_TOKEN_ENV: &str = "TOOLPLANE_PEER_TOKEN";
/// The flag that lets a service serve beyond loopback without authentication.
pub const INSECURE_FLAG: &str = "--insecure-no-auth-on-network";

/// Authentication flags, shared by every service binary and `toolplane up`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuthArgs {
    /// Require a credential (`authorization: Bearer …`) on every RPC and HTTP path except health
    /// (docs/auth.md). The first start writes an admin token to `<data-dir>/admin.token`.
    #[arg(long, env = "TOOLPLANE_AUTH", help_heading = "Authentication")]
    pub auth: bool,
    /// Serve on an address beyond loopback WITHOUT authentication: anyone who reaches it can do
    /// everything, including starting processes through stdio MCP registrations.
    #[arg(
        long,
        env = "TOOLPLANE_INSECURE_NO_AUTH_ON_NETWORK",
        help_heading = "Authentication"
    )]
    pub insecure_no_auth_on_network: bool,
    /// Directory of the token store that toolplane tokens (`tp_…`) are verified against
    /// (default `<data-dir>/auth`).
    #[arg(
        long,
        env = "TOOLPLANE_AUTH_TOKENS",
        value_name = "DIR",
        help_heading = "Authentication"
    )]
    pub auth_tokens: Option<PathBuf>,
    /// JWKS file of the identity provider whose JWTs are accepted (with --auth-issuer and
    /// --auth-audience).
    #[arg(
        long,
        env = "TOOLPLANE_AUTH_JWKS",
        value_name = "FILE",
        help_heading = "Authentication"
    )]
    pub auth_jwks: Option<PathBuf>,
    /// The `iss` every accepted JWT carries.
    #[arg(long, env = "TOOLPLANE_AUTH_ISSUER", help_heading = "Authentication")]
    pub auth_issuer: Option<String>,
    /// The `aud` every accepted JWT carries.
    #[arg(long, env = "TOOLPLANE_AUTH_AUDIENCE", help_heading = "Authentication")]
    pub auth_audience: Option<String>,
    /// The JWT claim naming the caller's cell (default `toolplane_cell`).
    #[arg(
        long,
        env = "TOOLPLANE_AUTH_CELL_CLAIM",
        value_name = "NAME",
        help_heading = "Authentication"
    )]
    pub auth_cell_claim: Option<String>,
    /// The JWT claim naming the caller's role (`reader`, `agent`, `admin`, or a list; default
    /// `toolplane_role`).
    #[arg(
        long,
        env = "TOOLPLANE_AUTH_ROLE_CLAIM",
        value_name = "NAME",
        help_heading = "Authentication"
    )]
    pub auth_role_claim: Option<String>,
    /// File holding a service credential (`tp_…`, e.g. from a Kubernetes Secret) accepted as an
    /// admin of the default cell: what the other services call this one with.
    #[arg(
        long,
        env = "TOOLPLANE_AUTH_SERVICE_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Authentication"
    )]
    pub auth_service_token_file: Option<PathBuf>,
    /// How long, in milliseconds, a verified toolplane token is remembered (default 1000; 0
    /// verifies every request against the token store). A revocation through this process is
    /// seen at once; one made by another process sharing the token store, within this time.
    #[arg(
        long,
        env = "TOOLPLANE_AUTH_TOKEN_CACHE_MS",
        value_name = "MS",
        help_heading = "Authentication"
    )]
    pub auth_token_cache_ms: Option<u64>,
}

/// The authentication a service starts with.
#[derive(Debug, Clone)]
pub struct AuthStart {
    pub authenticator: Authenticator,
    /// The token store, when authentication is on.
    pub tokens: Option<TokenStore>,
    /// `<data-dir>/admin.token`, when this start created the first admin token.
    pub bootstrapped: Option<PathBuf>,
}

impl AuthStart {
    /// Tells the operator, on stdout and in the log, where this start put the first admin
    /// token (nothing when it made none).
    pub fn announce(&self, service: &str) {
        if let Some(path) = &self.bootstrapped {
            println!(
                "{service}: authentication is on; the first admin token (cell `{DEFAULT_CELL}`) is in {} (mode 0600)",
                path.display()
            );
        }
    }
}

impl AuthArgs {
    /// What a service binary does at start: [`AuthArgs::check_exposure`] for every address it
    /// binds, then [`AuthArgs::start`] with its data directory, announcing a first admin token.
    pub async fn start_service(
        &self,
        service: &str,
        data_dir: &Path,
        addrs: &[SocketAddr],
    ) -> Result<Authenticator, String> {
        self.check_exposure(service, addrs)?;
        let started = self.start(data_dir).await?;
        started.announce(service);
        Ok(started.authenticator)
    }

    /// Refuses to serve on an address beyond loopback without `--auth`, unless
    /// `--insecure-no-auth-on-network` is given (then it warns). The error is the whole message
    /// a person reads.
    pub fn check_exposure(&self, service: &str, addrs: &[SocketAddr]) -> Result<(), String> {
        if self.auth {
            return Ok(());
        }
        let Some(exposed) = addrs.iter().find(|a| !a.ip().is_loopback()) else {
            return Ok(());
        };
        if self.insecure_no_auth_on_network {
            tracing::warn!(
                service,
                addr = %exposed,
                "serving beyond loopback without authentication: anyone who reaches this address can do everything"
            );
            return Ok(());
        }
        Err(format!(
            "auth.required: the {service} refuses to serve on {exposed} without authentication: \
             anyone who reaches that address could use everything, including starting processes \
             through stdio MCP registrations. Start it with --auth (docs/auth.md), bind a loopback \
             address, or, knowingly, pass {INSECURE_FLAG}"
        ))
    }

    /// The authenticator these flags describe. Off: every caller is an admin of the default
    /// cell. On: toolplane tokens from the store in `--auth-tokens` (default `<data_dir>/auth`),
    /// JWTs when a JWKS is given, the service credential when a file is given; the first start
    /// writes an admin token of the default cell to `<data_dir>/admin.token`.
    pub async fn start(&self, data_dir: &Path) -> Result<AuthStart, String> {
        if !self.auth {
            return Ok(AuthStart {
                authenticator: Authenticator::off(DEFAULT_CELL),
                tokens: None,
                bootstrapped: None,
            });
        }
        let tokens_dir = self
            .auth_tokens
            .clone()
            .unwrap_or_else(|| data_dir.join("auth"));
        let mut tokens = open_token_store(&tokens_dir).await?;
        if let Some(ms) = self.auth_token_cache_ms {
            tokens = tokens.with_cache(Duration::from_millis(ms), DEFAULT_CACHE_CAPACITY);
        }
        let jwt = self.jwt()?;
        let mut authenticator = Authenticator::on(Some(tokens.clone()), jwt);
        if let Some(path) = &self.auth_service_token_file {
            let secret = read_secret_file(path)?;
            authenticator = authenticator.with_service_credential(&secret, DEFAULT_CELL);
        }
        let created = bootstrap_admin_token(&tokens, data_dir, DEFAULT_CELL)
            .await
            .map_err(|e| e.to_string())?;
        Ok(AuthStart {
            authenticator,
            tokens: Some(tokens),
            bootstrapped: created.then(|| admin_token_path(data_dir)),
        })
    }

    fn jwt(&self) -> Result<Option<JwtVerifier>, String> {
        let Some(jwks) = &self.auth_jwks else {
            if self.auth_issuer.is_some() || self.auth_audience.is_some() {
                return Err(
                    "auth.invalid_request: --auth-issuer and --auth-audience need --auth-jwks"
                        .into(),
                );
            }
            return Ok(None);
        };
        let (Some(issuer), Some(audience)) = (&self.auth_issuer, &self.auth_audience) else {
            return Err(
                "auth.invalid_request: --auth-jwks needs --auth-issuer and --auth-audience".into(),
            );
        };
        let mut config = JwtConfig::new(jwks, issuer, audience);
        if let Some(claim) = &self.auth_cell_claim {
            config.cell_claim = claim.clone();
        }
        if let Some(claim) = &self.auth_role_claim {
            config.role_claim = claim.clone();
        }
        JwtVerifier::new(config)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// The token store in `dir` (created when missing), in its [`TOKEN_NAMESPACE`].
pub async fn open_token_store(dir: &Path) -> Result<TokenStore, String> {
    // The store syncs a new directory's parent: a relative path is made absolute first, so its
    // parent is never the empty path.
    let dir =
        std::path::absolute(dir).map_err(|e| format!("auth.store: {}: {e}", dir.display()))?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("auth.store: creating {}: {e}", dir.display()))?;
    let dir = dir.as_path();
    let fs: Arc<dyn Store> = Arc::new(
        FsStore::open(dir, StoreOptions::default())
            .await
            .map_err(|e| format!("auth.store: opening {}: {e}", dir.display()))?,
    );
    let store = fs
        .namespace(TOKEN_NAMESPACE)
        .map_err(|e| format!("auth.store: {e}"))?;
    Ok(TokenStore::new(store))
}

/// The credential a service calls its peers with: the secret in `file` when given, else
/// `TOOLPLANE_PEER_TOKEN` when set, else none.
pub fn peer_token(file: Option<&Path>) -> Result<Option<TokenSecret>, String> {
    if let Some(path) = file {
        return read_secret_file(path).map(Some);
    }
    match std::env::var(PEER_TOKEN_ENV) {
        Ok(text) if !text.trim().is_empty() => TokenSecret::parse(&text)
            .map(Some)
            .map_err(|e| format!("{PEER_TOKEN_ENV}: {e}")),
        _ => Ok(None),
    }
}

/// A `tp_…` secret from a file; the error names the file, never its content.
pub fn read_secret_file(path: &Path) -> Result<TokenSecret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("auth.io: cannot read {}: {e}", path.display()))?;
    TokenSecret::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn beyond_loopback_needs_auth_or_the_loud_flag() {
        let off = AuthArgs::default();
        assert!(
            off.check_exposure("runtime", &[addr("127.0.0.1:1")])
                .is_ok()
        );
        assert!(off.check_exposure("runtime", &[addr("[::1]:1")]).is_ok());
        let err = off
            .check_exposure("runtime", &[addr("127.0.0.1:1"), addr("0.0.0.0:7")])
            .unwrap_err();
        assert!(err.starts_with("auth.required: the runtime refuses to serve on 0.0.0.0:7"));
        assert!(
            err.contains("--auth") && err.contains(INSECURE_FLAG),
            "{err}"
        );
        let insecure = AuthArgs {
            insecure_no_auth_on_network: true,
            ..AuthArgs::default()
        };
        assert!(
            insecure
                .check_exposure("runtime", &[addr("0.0.0.0:7")])
                .is_ok()
        );
        let on = AuthArgs {
            auth: true,
            ..AuthArgs::default()
        };
        assert!(on.check_exposure("runtime", &[addr("0.0.0.0:7")]).is_ok());
    }

    #[tokio::test]
    async fn off_needs_nothing_and_on_bootstraps_once() {
        let dir = tempfile::tempdir().unwrap();
        let off = AuthArgs::default().start(dir.path()).await.unwrap();
        assert!(!off.authenticator.is_on());
        assert!(!admin_token_path(dir.path()).exists());
        let on = AuthArgs {
            auth: true,
            ..AuthArgs::default()
        };
        let first = on.start(dir.path()).await.unwrap();
        assert!(first.authenticator.is_on());
        assert_eq!(first.bootstrapped, Some(admin_token_path(dir.path())));
        let again = on.start(dir.path()).await.unwrap();
        assert_eq!(again.bootstrapped, None);
    }

    #[test]
    fn jwt_flags_come_together() {
        let half = AuthArgs {
            auth: true,
            auth_jwks: Some("jwks.json".into()),
            ..AuthArgs::default()
        };
        assert!(half.jwt().unwrap_err().contains("--auth-issuer"));
        let stray = AuthArgs {
            auth: true,
            auth_issuer: Some("x".into()),
            ..AuthArgs::default()
        };
        assert!(stray.jwt().unwrap_err().contains("--auth-jwks"));
    }
}
