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

/// The HTTP client of one streamable HTTP connection: the policy applied (checked names,
/// same-origin redirects checked hop by hop, no environment proxy when private ranges are
/// denied) and no idle pooling, as rmcp's own client.
pub fn http_client(policy: &EgressPolicy) -> Result<reqwest::Client, ProxyError> {
    let builder = reqwest::Client::builder().pool_max_idle_per_host(0);
    toolplane_egress::apply(
        builder,
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
    })
}
