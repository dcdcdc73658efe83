//! Egress of model calls: a model endpoint's base URL, every address its host resolves to and
//! every redirect it answers with are checked against the egress policy of the run's cell
//! (`toolplane_core::egress`, docs/egress.md), through the one implementation the mcp-proxy's
//! HTTP connections share (`toolplane-egress`): the HTTP client resolves names itself and
//! connects only to the addresses it checked, so a name that answers differently later (DNS
//! rebinding) cannot lead elsewhere. The policy decides; this module only names the runtime's
//! code and redirect rule.

use toolplane_core::egress::EgressPolicy;
use toolplane_egress::Redirects;

/// The code every refusal of the egress policy starts with.
pub const EGRESS_DENIED: &str = "model.egress_denied";

/// Checks a base URL's host (IP literals never reach the resolver; names on a non-empty
/// `allowed_hosts` list).
pub fn check_base_url(policy: &EgressPolicy, url: &str) -> Result<(), String> {
    toolplane_egress::check_host(policy, EGRESS_DENIED, url).map(|_| ())
}

/// A client builder with the policy applied: names resolved to checked addresses only, every
/// redirect hop checked and followed, and no environment proxy when private ranges are denied.
pub fn apply(policy: &EgressPolicy, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    toolplane_egress::apply(builder, policy, EGRESS_DENIED, Redirects::Follow)
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
