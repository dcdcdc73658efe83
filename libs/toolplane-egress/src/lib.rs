//! The egress policy (`toolplane_core::egress`, docs/egress.md) applied to reqwest, the one way
//! the runtime's model clients and the mcp-proxy's streamable HTTP connections reach a URL a
//! registration or a request named:
//!
//! - [`check_host`] checks a URL's host before anything connects (an IP literal never reaches a
//!   resolver);
//! - [`check_resolved`] also resolves a name now and checks every address (at registration);
//! - [`apply`] gives a client builder the [`CheckedResolver`] — it refuses a name if any of its
//!   addresses is denied and otherwise hands the client exactly the addresses it checked, so a
//!   name that answers differently later (DNS rebinding) cannot lead elsewhere — redirects
//!   checked hop by hop (at most [`MAX_REDIRECTS`]), and no environment proxy when private ranges
//!   are denied (the checked address must be the one connected to).
//!
//! Every refusal starts with the caller's code (`model.egress_denied`, `mcp.egress_denied`), so
//! each service keeps its own error contract. The policy decides; this crate only applies it.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use toolplane_core::egress::{EgressPolicy, HostVerdict};

/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 10;

/// Which redirects a client follows once the policy allowed the hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Every allowed hop.
    Follow,
    /// Only hops within the first request's origin; a redirect elsewhere is returned, not
    /// followed (as rmcp's own client does: custom headers carry secrets).
    SameOrigin,
}

/// A URL or host cut to 80 characters, control characters replaced, for messages.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Checks `url`'s host against `policy`; the error is the whole message, starting with `code`.
/// A URL that does not parse is the caller's to refuse (its own validation runs first), and is
/// refused here as having no allowed host.
pub fn check_host(policy: &EgressPolicy, code: &str, url: &str) -> Result<HostVerdict, String> {
    let host = reqwest::Url::parse(url)
        .map(|u| u.host_str().unwrap_or_default().to_owned())
        .map_err(|e| format!("{code}: `{}`: {e}", shown(url)))?;
    policy
        .check_host(&host)
        .map_err(|e| format!("{code}: `{}`: {e}", shown(url)))
}

/// [`check_host`], then, for a name the policy does not vouch for, every address it resolves to
/// now (a name that does not resolve yet is checked when it is connected to).
pub async fn check_resolved(policy: &EgressPolicy, code: &str, url: &str) -> Result<(), String> {
    let verdict = check_host(policy, code, url)?;
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Ok(());
    };
    let host = parsed.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if verdict == HostVerdict::Vouched || IpAddr::from_str(bare).is_ok() {
        return Ok(());
    }
    let port = parsed.port_or_known_default().unwrap_or(80);
    if let Ok(addrs) = tokio::net::lookup_host((host, port)).await {
        for addr in addrs {
            policy.check_ip(addr.ip()).map_err(|e| {
                format!(
                    "{code}: `{}`: `{host}` resolves to {}: {e}",
                    shown(url),
                    addr.ip()
                )
            })?;
        }
    }
    Ok(())
}

/// `builder` with `policy` applied: names resolved through [`CheckedResolver`], redirects
/// checked hop by hop and followed as `redirects` says, no environment proxy when private ranges
/// are denied. Refusals start with `code`.
pub fn apply(
    builder: reqwest::ClientBuilder,
    policy: &EgressPolicy,
    code: &'static str,
    redirects: Redirects,
) -> reqwest::ClientBuilder {
    let policy = Arc::new(policy.clone());
    let for_redirects = Arc::clone(&policy);
    let builder = builder
        .dns_resolver(CheckedResolver {
            policy: Arc::clone(&policy),
            code,
        })
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            redirect(&for_redirects, code, redirects, attempt)
        }));
    if policy.denies_private() {
        builder.no_proxy()
    } else {
        builder
    }
}

fn redirect(
    policy: &EgressPolicy,
    code: &str,
    redirects: Redirects,
    attempt: reqwest::redirect::Attempt<'_>,
) -> reqwest::redirect::Action {
    if attempt.previous().len() >= MAX_REDIRECTS {
        return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
    }
    let url = attempt.url();
    if let Some(host) = url.host_str()
        && let Err(e) = policy.check_host(host)
    {
        let message = format!("{code}: redirect to `{}`: {e}", shown(url.as_str()));
        return attempt.error(message);
    }
    let follow = match redirects {
        Redirects::Follow => true,
        Redirects::SameOrigin => attempt
            .previous()
            .first()
            .is_none_or(|first| first.origin() == url.origin()),
    };
    if follow {
        attempt.follow()
    } else {
        attempt.stop()
    }
}

/// Resolves a name and checks every address; the client connects only to what was checked.
#[derive(Debug, Clone)]
pub struct CheckedResolver {
    policy: Arc<EgressPolicy>,
    code: &'static str,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let code = self.code;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let refuse = |why: String| -> Box<dyn std::error::Error + Send + Sync> {
                Box::new(std::io::Error::other(format!(
                    "{code}: `{}`: {why}",
                    shown(&host)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use toolplane_core::egress::PrivateNetworks;

    use super::*;

    fn deployed() -> EgressPolicy {
        EgressPolicy {
            private_networks: PrivateNetworks::Deny,
            ..EgressPolicy::default()
        }
    }

    #[test]
    fn hosts_are_checked_with_the_callers_code() {
        let e = check_host(&deployed(), "x.egress_denied", "http://169.254.169.254/").unwrap_err();
        assert!(
            e.starts_with("x.egress_denied: `http://169.254.169.254/`: "),
            "{e}"
        );
        assert!(e.contains("link-local"), "{e}");
        assert_eq!(
            check_host(&deployed(), "x", "https://api.example.com/v1"),
            Ok(HostVerdict::CheckAddresses)
        );
    }

    #[tokio::test]
    async fn names_are_resolved_and_every_address_checked() {
        let e = check_resolved(&deployed(), "x.egress_denied", "http://localhost:9/")
            .await
            .unwrap_err();
        assert!(e.contains("`localhost` resolves to"), "{e}");
        let laptop = EgressPolicy::default().for_posture(false);
        check_resolved(&laptop, "x", "http://localhost:9/")
            .await
            .unwrap();
    }
}
