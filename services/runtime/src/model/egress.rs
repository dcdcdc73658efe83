//! Egress of model calls: a model endpoint's base URL, every address its host resolves to and
//! every redirect it answers with are checked against the runtime's egress policy
//! (`toolplane_core::egress`, docs/egress.md). The HTTP client resolves names itself and connects
//! only to the addresses it checked, so a name that answers differently later (DNS rebinding)
//! cannot lead elsewhere. The policy decides; this module only applies it to reqwest.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use toolplane_core::egress::{EgressPolicy, HostVerdict};

/// The code every refusal of the egress policy starts with.
pub const EGRESS_DENIED: &str = "model.egress_denied";
/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// Checks a base URL's host (IP literals never reach the resolver; names on a non-empty
/// `allowed_hosts` list).
pub fn check_base_url(policy: &EgressPolicy, url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}`: {e}"))?;
    let host = parsed.host_str().unwrap_or_default();
    policy
        .check_host(host)
        .map(|_| ())
        .map_err(|e| format!("{EGRESS_DENIED}: the model endpoint `{url}`: {e}"))
}

/// A client builder with the policy applied: names resolved through [`CheckedResolver`],
/// redirects checked hop by hop, and no environment proxy when private ranges are denied.
pub fn apply(policy: &EgressPolicy, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    let policy = Arc::new(policy.clone());
    let for_redirects = Arc::clone(&policy);
    let builder = builder
        .dns_resolver(CheckedResolver {
            policy: Arc::clone(&policy),
        })
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            let refused = attempt
                .url()
                .host_str()
                .and_then(|host| for_redirects.check_host(host).err());
            match refused {
                Some(e) => {
                    let message = format!("{EGRESS_DENIED}: redirect to `{}`: {e}", attempt.url());
                    attempt.error(message)
                }
                None => attempt.follow(),
            }
        }));
    if policy.denies_private() {
        builder.no_proxy()
    } else {
        builder
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
                    "{EGRESS_DENIED}: `{host}`: {why}"
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
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::time::Duration;

    use serde_json::Map;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use toolplane_core::egress::PrivateNetworks;
    use toolplane_core::profile::ModelEndpoint as ProfileEndpoint;

    use super::*;
    use crate::model::provider::{Endpoint, ModelClient};

    fn endpoint(base_url: &str) -> Endpoint {
        let e: ProfileEndpoint = serde_json::from_value(
            serde_json::json!({"kind": "openai-compatible", "baseUrl": base_url, "model": "m"}),
        )
        .unwrap();
        Endpoint::from_profile(&e, Duration::from_secs(5), 0).unwrap()
    }

    fn deployed(cidrs: &[&str]) -> EgressPolicy {
        EgressPolicy {
            private_networks: PrivateNetworks::Deny,
            allowed_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            ..Default::default()
        }
    }

    async fn call(client: &ModelClient) -> String {
        client
            .call("system", &[], &Map::new(), 1)
            .await
            .unwrap_err()
            .message
    }

    /// An HTTP server on `127.0.0.2` that answers every request with a redirect to `target`.
    async fn redirecting_server(target: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 16 * 1024];
                let _ = socket.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        format!("http://{addr}/v1")
    }

    #[tokio::test]
    async fn a_deployed_runtime_refuses_metadata_loopback_and_redirects_to_them() {
        let policy = deployed(&[]);
        for url in [
            "http://169.254.169.254/v1",
            "http://127.0.0.1:9/v1",
            "http://[::1]:9/v1",
        ] {
            let err = ModelClient::new(endpoint(url), &policy).unwrap_err();
            assert!(err.starts_with("model.egress_denied: "), "{url}: {err}");
        }
        // A name is checked when it resolves.
        let client = ModelClient::new(endpoint("http://localhost:9/v1"), &policy).unwrap();
        let err = call(&client).await;
        assert!(err.contains("model.egress_denied"), "{err}");

        // The endpoint's own address is allowed; where it redirects to is not.
        let url = redirecting_server("http://127.0.0.1:9/v1/chat/completions").await;
        let client = ModelClient::new(endpoint(&url), &deployed(&["127.0.0.2/32"])).unwrap();
        let err = call(&client).await;
        assert!(err.contains("model.egress_denied"), "{err}");
        assert!(err.contains("127.0.0.1"), "{err}");

        // On a laptop the same endpoint is followed to its target (nothing listens there).
        let laptop = EgressPolicy::default().for_posture(false);
        let client = ModelClient::new(endpoint(&url), &laptop).unwrap();
        let err = call(&client).await;
        assert!(!err.contains("egress"), "{err}");
        ModelClient::new(endpoint("http://169.254.169.254/v1"), &laptop).unwrap();
    }
}
