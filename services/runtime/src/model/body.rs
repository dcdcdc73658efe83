//! Reading a model endpoint's response body within a cap: chunk by chunk, refused as soon as it
//! passes the cap, or before reading any of it when its `content-length` announces more. Memory
//! spent on one response is bounded by the cap whatever the endpoint sends (an endless body
//! included), never by the body.

use toolplane_core::error::with_causes;

use super::provider::CallError;

/// The body of `response` (whose HTTP status is `status`), at most `cap` bytes.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    status: u16,
    cap: usize,
) -> Result<Vec<u8>, CallError> {
    let too_large = |what: String| CallError {
        retryable: false,
        status: Some(status),
        message: format!("the response is {what}, over the {cap}-byte limit"),
        retry_after: None,
    };
    let announced = response.content_length();
    if let Some(length) = announced
        && length > u64::try_from(cap).unwrap_or(u64::MAX)
    {
        return Err(too_large(format!("{length} bytes by its content-length")));
    }
    // An honest announcement sizes the buffer once; it is within the cap (checked above).
    let mut body = Vec::with_capacity(
        announced
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(0)
            .min(cap),
    );
    loop {
        let chunk = response.chunk().await.map_err(|err| CallError {
            retryable: true,
            status: Some(status),
            message: format!("reading the response failed: {}", with_causes(&err)),
            retry_after: None,
        })?;
        let Some(chunk) = chunk else {
            return Ok(body);
        };
        if chunk.len() > cap.saturating_sub(body.len()) {
            return Err(too_large(format!(
                "more than {} bytes",
                body.len().saturating_add(chunk.len())
            )));
        }
        body.extend_from_slice(&chunk);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Map;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;
    use toolplane_core::profile::ModelEndpoint as ProfileEndpoint;

    use crate::model::provider::{Endpoint, MAX_RESPONSE_BYTES, ModelClient};

    /// A model endpoint on 127.0.0.1 that answers one request with `head` and then, when
    /// `endless`, 64 KiB chunks until the client goes away; reports the body bytes it wrote.
    async fn endpoint_answering(head: &'static str, endless: bool) -> (Endpoint, JoinHandle<u64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 64 * 1024];
            let _ = stream.read(&mut request).await;
            stream.write_all(head.as_bytes()).await.unwrap();
            let mut written = 0u64;
            if endless {
                let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                while stream.write_all(chunk.as_bytes()).await.is_ok() {
                    written += 0x10000;
                }
            } else {
                // Holds the connection open without sending the body it announced.
                let _ = stream.read(&mut request).await;
            }
            written
        });
        let e: ProfileEndpoint = serde_json::from_value(serde_json::json!({
            "kind": "openai-compatible",
            "baseUrl": format!("http://{addr}/v1"),
            "model": "m",
        }))
        .unwrap();
        let endpoint = Endpoint::from_profile(&e, Duration::from_secs(60), 0).unwrap();
        (endpoint, server)
    }

    async fn call(endpoint: Endpoint) -> crate::model::provider::CallError {
        let client =
            ModelClient::new(endpoint, &toolplane_core::egress::EgressPolicy::default()).unwrap();
        tokio::time::timeout(
            Duration::from_secs(20),
            client.call("system", &[], &Map::new(), 1),
        )
        .await
        .expect("the call did not end within 20 s")
        .unwrap_err()
    }

    #[tokio::test]
    async fn an_endless_body_is_refused_once_it_passes_the_cap() {
        let (endpoint, server) = endpoint_answering(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            true,
        )
        .await;
        let failed = call(endpoint).await;
        assert!(!failed.retryable, "{failed:?}");
        assert_eq!(failed.status, Some(200));
        assert!(
            failed
                .message
                .contains(&format!("over the {MAX_RESPONSE_BYTES}-byte limit")),
            "{failed:?}"
        );
        let written = tokio::time::timeout(Duration::from_secs(20), server)
            .await
            .unwrap()
            .unwrap();
        // The endpoint did send more than the cap; the client stopped reading soon after it.
        assert!(written > MAX_RESPONSE_BYTES as u64, "{written}");
    }

    #[tokio::test]
    async fn an_announced_length_over_the_cap_is_refused_before_the_body() {
        let (endpoint, server) = endpoint_answering(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1073741824\r\n\r\n",
            false,
        )
        .await;
        let failed = call(endpoint).await;
        assert!(!failed.retryable, "{failed:?}");
        assert!(
            failed
                .message
                .contains("1073741824 bytes by its content-length"),
            "{failed:?}"
        );
        server.abort();
    }
}
