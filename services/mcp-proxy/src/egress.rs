//! Egress of streamable HTTP connections: the URL of a registration, every address its host
//! resolves to and every redirect its server answers with are checked against the proxy's
//! egress policy (`toolplane_core::egress`, docs/egress.md).
//!
//! A URL is checked when it is registered (its host, and the addresses the name resolves to
//! then) and again on every connection: the connection's HTTP client resolves names through
//! [`CheckedResolver`], which refuses a name if any of its addresses is denied and otherwise
//! hands the client exactly the addresses it checked, so a name that changes its answer between
//! the check and the connection (DNS rebinding) cannot lead elsewhere. Redirects are checked hop
//! by hop and, as rmcp's own client does, followed only within the same origin. This module
//! decides nothing itself; the policy does.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use toolplane_core::egress::{EgressPolicy, HostVerdict};

use crate::error::{MCP_EGRESS_DENIED, MCP_INVALID_REGISTRATION, ProxyError};
use crate::registration::shown;

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

fn denied(url: &str, why: impl std::fmt::Display) -> ProxyError {
    ProxyError::new(MCP_EGRESS_DENIED, format!("`{}`: {why}", shown(url)))
}

fn host_of(url: &str) -> Result<(String, u16), ProxyError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        ProxyError::new(
            MCP_INVALID_REGISTRATION,
            format!("url `{}`: {e}", shown(url)),
        )
    })?;
    let host = parsed.host_str().unwrap_or_default().to_owned();
    let port = parsed.port_or_known_default().unwrap_or(80);
    Ok((host, port))
}

fn is_ip_literal(host: &str) -> bool {
    IpAddr::from_str(host.trim_start_matches('[').trim_end_matches(']')).is_ok()
}

/// Checks a URL as it is registered: its host and, for a name the policy does not vouch for,
/// every address it resolves to now (a name that does not resolve yet is checked when it is
/// connected to).
pub async fn check_url(policy: &EgressPolicy, url: &str) -> Result<(), ProxyError> {
    let (host, port) = host_of(url)?;
    let verdict = policy.check_host(&host).map_err(|e| denied(url, e))?;
    if verdict == HostVerdict::Vouched || is_ip_literal(&host) {
        return Ok(());
    }
    if let Ok(addrs) = tokio::net::lookup_host((host.as_str(), port)).await {
        for addr in addrs {
            policy
                .check_ip(addr.ip())
                .map_err(|e| denied(url, format!("`{host}` resolves to {}: {e}", addr.ip())))?;
        }
    }
    Ok(())
}

/// Checks a URL's host before connecting (IP literals never reach the resolver).
pub fn check_host_of(policy: &EgressPolicy, url: &str) -> Result<(), ProxyError> {
    let (host, _) = host_of(url)?;
    policy
        .check_host(&host)
        .map(|_| ())
        .map_err(|e| denied(url, e))
}

/// The HTTP client of one streamable HTTP connection: names resolved through
/// [`CheckedResolver`], redirects checked hop by hop, no idle pooling (as rmcp's own client), and
/// no environment proxy when private ranges are denied (the checked address must be the one
/// connected to).
pub fn http_client(policy: &EgressPolicy) -> Result<reqwest::Client, ProxyError> {
    let policy = Arc::new(policy.clone());
    let for_redirects = Arc::clone(&policy);
    let mut builder = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .dns_resolver(CheckedResolver {
            policy: Arc::clone(&policy),
        })
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            redirect(&for_redirects, attempt)
        }));
    if policy.denies_private() {
        builder = builder.no_proxy();
    }
    builder.build().map_err(|e| {
        ProxyError::new(
            crate::error::MCP_CONNECTION_FAILED,
            format!("cannot build the http client: {e}"),
        )
    })
}

fn redirect(
    policy: &EgressPolicy,
    attempt: reqwest::redirect::Attempt<'_>,
) -> reqwest::redirect::Action {
    if attempt.previous().len() >= MAX_REDIRECTS {
        return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
    }
    let url = attempt.url();
    if let Some(host) = url.host_str()
        && let Err(e) = policy.check_host(host)
    {
        let message = format!(
            "{}: redirect to `{}`: {e}",
            MCP_EGRESS_DENIED.code,
            shown(url.as_str())
        );
        return attempt.error(message);
    }
    let same_origin = attempt
        .previous()
        .first()
        .is_none_or(|first| first.origin() == url.origin());
    if same_origin {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// Resolves a name and checks every address; the client connects only to what was checked.
#[derive(Debug, Clone)]
pub struct CheckedResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let refuse = |why: String| -> Box<dyn std::error::Error + Send + Sync> {
                Box::new(std::io::Error::other(format!(
                    "{}: `{host}`: {why}",
                    MCP_EGRESS_DENIED.code
                )))
            };
            let verdict = policy
                .check_host(&host)
                .map_err(|e| refuse(e.to_string()))?;
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if verdict == HostVerdict::CheckAddresses {
                for addr in &addrs {
                    policy
                        .check_ip(addr.ip())
                        .map_err(|e| refuse(format!("resolves to {}: {e}", addr.ip())))?;
                }
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}
