//! Connections from the CLI to a running plane: the four addresses (flags, environment, or the
//! defaults of `toolplane up`), one gRPC channel per service, and the translation of transport
//! failures and gRPC statuses into one-line [`CliError`]s. It owns no domain logic and never
//! retries a request that may have taken effect.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::error::{CliError, has_code};

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
}

/// One connected service.
#[derive(Debug, Clone)]
pub struct Conn {
    pub service: &'static str,
    pub url: String,
    pub channel: Channel,
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
    /// Connects to `service` at `address`; a refused or silent address is [`CliError::Unreachable`].
    pub async fn connect(service: &'static str, address: &str) -> Result<Conn, CliError> {
        let url = normalize_url(address);
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
            channel,
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
