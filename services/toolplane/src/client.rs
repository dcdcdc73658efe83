//! Connections from the CLI to a running plane: the four addresses (flags, environment, or the
//! defaults of `toolplane up`), one gRPC channel per service, and the translation of transport
//! failures and gRPC statuses into one-line [`CliError`]s. It owns no domain logic and never
//! retries a request that may have taken effect. Every request carries the user's credential
//! ([`Credential`]) as `authorization: Bearer …` when there is one (docs/cli.md).

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::error::{CliError, has_code};

/// The environment variable holding the credential every command sends.
pub const TOKEN_ENV: &str = "TOOLPLANE_TOKEN";

/// A channel whose every request carries the credential it was connected with.
pub type AuthChannel = InterceptedService<Channel, Bearer>;

/// Sets `authorization: Bearer …` on every request, when there is a credential.
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Who the CLI calls as: `TOOLPLANE_TOKEN` when set (a toolplane token or a JWT), otherwise,
/// for loopback addresses only, the first admin token a local `toolplane up --auth` wrote to
/// `<data-dir>/admin.token` (`TOOLPLANE_DATA_DIR`, default `.toolplane`). `Debug` never prints
/// a secret.
#[derive(Clone, Default)]
pub struct Credential {
    token: Option<String>,
    local_admin: Option<String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field(
                "local_admin",
                &self.local_admin.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Credential {
    /// The credential of this process's environment, as described on [`Credential`].
    pub fn from_environment() -> Credential {
        let token = std::env::var(TOKEN_ENV)
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let data_dir = std::env::var_os("TOOLPLANE_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".toolplane"));
        let local_admin = match token {
            Some(_) => None,
            None => std::fs::read_to_string(toolplane_auth::admin_token_path(&data_dir))
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        };
        Credential { token, local_admin }
    }

    /// Exactly `secret`, for every address.
    pub fn token(secret: &str) -> Credential {
        Credential {
            token: Some(secret.to_owned()),
            local_admin: None,
        }
    }

    /// What to send to `url`: the token, else the local admin token when `url` is loopback.
    pub fn for_url(&self, url: &str) -> Option<&str> {
        match (&self.token, &self.local_admin) {
            (Some(token), _) => Some(token),
            (None, Some(local)) if is_loopback_url(url) => Some(local),
            _ => None,
        }
    }
}

/// Whether `url`'s host is `localhost` or a loopback address.
fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How long connecting to a service may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest message the CLI accepts (journal pages, tool listings).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Where the plane's services are.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub runtime: String,
    pub catalog: String,
    pub workspace: String,
    pub mcp_proxy: String,
    /// Cell (tenant) every request names; empty selects the default cell.
    pub cell: String,
    /// Who every request is made as.
    pub credential: Credential,
}

impl Endpoints {
    /// Connects to `service` at `address` with these endpoints' credential.
    pub async fn connect(&self, service: &'static str, address: &str) -> Result<Conn, CliError> {
        Conn::connect_with(service, address, &self.credential).await
    }
}

/// One connected service.
#[derive(Debug, Clone)]
pub struct Conn {
    pub service: &'static str,
    pub url: String,
    pub channel: AuthChannel,
}

/// `127.0.0.1:7410` and `http://127.0.0.1:7410` both name the same service.
pub fn normalize_url(address: &str) -> String {
    let address = address.trim();
    if address.contains("://") {
        address.trim_end_matches('/').to_owned()
    } else {
        format!("http://{}", address.trim_end_matches('/'))
    }
}

/// The innermost cause of an error chain: tonic's own message ("transport error") says nothing,
/// the OS error under it ("Connection refused") does.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut current = e;
    while let Some(next) = current.source() {
        current = next;
    }
    let text = current.to_string();
    if text.is_empty() { e.to_string() } else { text }
}

impl Conn {
    /// Connects to `service` at `address` with the credential of the environment
    /// ([`Credential::from_environment`]).
    pub async fn connect(service: &'static str, address: &str) -> Result<Conn, CliError> {
        Conn::connect_with(service, address, &Credential::from_environment()).await
    }

    /// Connects to `service` at `address`, sending `credential`; a refused or silent address is
    /// [`CliError::Unreachable`].
    pub async fn connect_with(
        service: &'static str,
        address: &str,
        credential: &Credential,
    ) -> Result<Conn, CliError> {
        let url = normalize_url(address);
        let bearer = match credential.for_url(&url) {
            Some(secret) => {
                let mut value =
                    MetadataValue::try_from(format!("Bearer {secret}")).map_err(|_| {
                        CliError::InvalidInput(format!(
                            "{TOKEN_ENV} holds characters a header cannot carry"
                        ))
                    })?;
                value.set_sensitive(true);
                Bearer(Some(value))
            }
            None => Bearer(None),
        };
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| CliError::InvalidAddress(format!("`{address}` for the {service}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = match tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => {
                return Err(CliError::Unreachable {
                    service,
                    url,
                    reason: root_cause(&e),
                });
            }
            Err(_) => {
                return Err(CliError::Unreachable {
                    service,
                    url,
                    reason: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
                });
            }
        };
        Ok(Conn {
            service,
            url,
            channel: InterceptedService::new(channel, bearer),
        })
    }

    /// A failed RPC as the user sees it: the service's coded message as is, a lost connection as
    /// unreachable, anything else prefixed with `cli.rpc_failed`.
    pub fn err(&self, status: tonic::Status) -> CliError {
        let message = status.message().to_owned();
        if has_code(&message) {
            return CliError::Rpc {
                code: status.code(),
                message,
            };
        }
        if status.code() == tonic::Code::Unavailable {
            let reason = match std::error::Error::source(&status) {
                Some(source) => root_cause(source),
                None if message.is_empty() => "the connection failed".to_owned(),
                None => message,
            };
            return CliError::Unreachable {
                service: self.service,
                url: self.url.clone(),
                reason,
            };
        }
        CliError::Rpc {
            code: status.code(),
            message: format!(
                "cli.rpc_failed: the {} answered {:?}: {}",
                self.service,
                status.code(),
                if message.is_empty() {
                    "(no message)"
                } else {
                    &message
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_admin_token_goes_to_loopback_addresses_only() {
        let local = Credential {
            token: None,
            local_admin: Some("tp_local".into()),
        };
        for url in [
            "http://127.0.0.1:7410",
            "http://localhost:7410",
            "http://[::1]:7410/",
        ] {
            assert_eq!(local.for_url(url), Some("tp_local"), "{url}");
        }
        for url in [
            "http://10.0.0.5:7410",
            "https://plane.example.com",
            "http://[fe80::1]:1",
        ] {
            assert_eq!(local.for_url(url), None, "{url}");
        }
        let token = Credential::token("a.b.c");
        assert_eq!(token.for_url("https://plane.example.com"), Some("a.b.c"));
        assert!(!format!("{local:?}{token:?}").contains("tp_local"));
    }

    #[test]
    fn addresses_without_a_scheme_are_http() {
        assert_eq!(normalize_url("127.0.0.1:7410"), "http://127.0.0.1:7410");
        assert_eq!(normalize_url("http://[::1]:7410/"), "http://[::1]:7410");
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable_with_the_os_reason() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = Conn::connect("runtime", &format!("127.0.0.1:{port}"))
            .await
            .unwrap_err();
        let text = err.one_line();
        assert!(
            text.starts_with("cli.unreachable: cannot reach the runtime at http://127.0.0.1:"),
            "{text}"
        );
        assert!(text.to_lowercase().contains("refused"), "{text}");
    }
}
