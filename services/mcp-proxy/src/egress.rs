//! Egress of streamable HTTP connections: the URL of a registration, every address its host
//! resolves to and every redirect its server answers with are checked against the egress policy
//! of the registration's cell (`toolplane_core::egress`, docs/egress.md), through the one
//! implementation the runtime's model clients share (`toolplane-egress`).
//!
//! A URL is checked when it is registered (its host, and the addresses the name resolves to
//! then) and again on every connection, whose HTTP client resolves names only to checked
//! addresses. Redirects are checked hop by hop and, as rmcp's own client does, followed only
//! within the same origin. This module only maps refusals to the proxy's errors; the policy
//! decides.
//!
//! The HTTP client is one per distinct policy for the process's life, shared by every connection
//! under that policy, so connections to a server are pooled and reused across requests and
//! reconnects. Pooling keeps every check: a pooled connection was opened to an address the
//! policy's resolver accepted, and it is only ever reused by a client of the same policy (the
//! pool belongs to the client); a cell whose policy differs gets a client, and a pool, of its own.

use std::sync::{Mutex, PoisonError};

use toolplane_core::egress::EgressPolicy;
use toolplane_egress::Redirects;

use crate::error::{MCP_EGRESS_DENIED, MCP_INVALID_REGISTRATION, ProxyError};
use crate::registration::shown;

fn parsed(url: &str) -> Result<(), ProxyError> {
    reqwest::Url::parse(url).map(|_| ()).map_err(|e| {
        ProxyError::new(
            MCP_INVALID_REGISTRATION,
            format!("url `{}`: {e}", shown(url)),
        )
    })
}

/// The refusal's message without the code the shared helper starts it with: the proxy's error
/// states its code once.
fn denied(message: String) -> ProxyError {
    let prefix = format!("{}: ", MCP_EGRESS_DENIED.code);
    let message = message.strip_prefix(&prefix).unwrap_or(&message).to_owned();
    ProxyError::new(MCP_EGRESS_DENIED, message)
}

/// Checks a URL as it is registered: its host and, for a name the policy does not vouch for,
/// every address it resolves to now (a name that does not resolve yet is checked when it is
/// connected to).
pub async fn check_url(policy: &EgressPolicy, url: &str) -> Result<(), ProxyError> {
    parsed(url)?;
    toolplane_egress::check_resolved(policy, MCP_EGRESS_DENIED.code, url)
        .await
        .map_err(denied)
}

/// Checks a URL's host before connecting (IP literals never reach the resolver).
pub fn check_host_of(policy: &EgressPolicy, url: &str) -> Result<(), ProxyError> {
    parsed(url)?;
    toolplane_egress::check_host(policy, MCP_EGRESS_DENIED.code, url)
        .map(|_| ())
        .map_err(denied)
}

/// The clients built so far, one per distinct policy (a handful: one per cell at most).
static CLIENTS: Mutex<Vec<(EgressPolicy, reqwest::Client)>> = Mutex::new(Vec::new());

/// The HTTP client of streamable HTTP connections under `policy`: the policy applied (checked
/// names, same-origin redirects checked hop by hop, no environment proxy when private ranges
/// are denied), built once per distinct policy and shared, with its connection pool.
pub fn http_client(policy: &EgressPolicy) -> Result<reqwest::Client, ProxyError> {
    let mut clients = CLIENTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, client)) = clients.iter().find(|(p, _)| p == policy) {
        return Ok(client.clone());
    }
    let client = toolplane_egress::apply(
        reqwest::Client::builder(),
        policy,
        MCP_EGRESS_DENIED.code,
        Redirects::SameOrigin,
    )
    .build()
    .map_err(|e| {
        ProxyError::new(
            crate::error::MCP_CONNECTION_FAILED,
            format!("cannot build the http client: {e}"),
        )
    })?;
    clients.push((policy.clone(), client.clone()));
    Ok(client)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An HTTP/1.1 server that keeps connections alive and counts the ones it accepted.
    async fn counting_server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = conn.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        let reply = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if conn.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    async fn get(client: reqwest::Client, url: &str) {
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(resp.text().await.unwrap(), "ok");
    }

    /// Connections under one policy, each asking for its client, share one TCP connection to
    /// the server; a different policy opens its own.
    #[tokio::test]
    async fn connections_under_one_policy_reuse_pooled_connections_and_another_policy_does_not() {
        let (url, accepted) = counting_server().await;
        let policy = EgressPolicy::default();
        for _ in 0..3 {
            get(http_client(&policy).unwrap(), &url).await;
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);

        let other = EgressPolicy {
            allowed_cidrs: vec!["10.0.3.0/24".parse().unwrap()],
            ..EgressPolicy::default()
        };
        get(http_client(&other).unwrap(), &url).await;
        get(http_client(&other).unwrap(), &url).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// A shared client still refuses what its policy refuses: a name resolving to a private
    /// address under a policy that denies private networks.
    #[tokio::test]
    async fn the_shared_client_keeps_checking_resolved_addresses() {
        let (url, _) = counting_server().await;
        let denied = EgressPolicy {
            private_networks: toolplane_core::egress::PrivateNetworks::Deny,
            ..EgressPolicy::default()
        };
        let url = url.replace("127.0.0.1", "localhost");
        for _ in 0..2 {
            let err = http_client(&denied)
                .unwrap()
                .get(&url)
                .send()
                .await
                .unwrap_err();
            assert!(
                format!("{err:?}").contains(MCP_EGRESS_DENIED.code),
                "{err:?}"
            );
        }
    }
}
