//! The streamable HTTP client of a connection, which lets [`RawListing`] see the raw
//! `tools/list` responses that rmcp parses into its `Tool` (and so drops `execution`).
//!
//! [`ListingClient`] hands every request to reqwest's client as rmcp does. For a `tools/list`
//! request it also reads what came back before rmcp parses it: an SSE response's events are
//! observed as they stream past (each event's `data` is one JSON-RPC message); a plain JSON
//! response has already been parsed by the time it is returned, so the same request is posted
//! once more on the same session and that raw body is observed. Either way a task-only tool of
//! an HTTP server is listed unusable with `mcp.task_required`, as a stdio server's is
//! (docs/mcp-proxy.md, "MCP tasks").

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use crate::raw_listing::RawListing;

/// reqwest's client with a view of the raw `tools/list` responses.
#[derive(Debug, Clone)]
pub struct ListingClient {
    inner: reqwest::Client,
    raw: RawListing,
}

impl ListingClient {
    pub fn new(inner: reqwest::Client, raw: RawListing) -> ListingClient {
        ListingClient { inner, raw }
    }

    /// Posts `message` again on the session and observes the raw body (JSON or SSE), read up to
    /// `cap` bytes. Any failure only means the listing's `execution` fields stay unknown.
    async fn observe_again(
        &self,
        uri: &str,
        message: &ClientJsonRpcMessage,
        session_id: Option<&str>,
        auth_header: Option<&str>,
        custom_headers: &HashMap<HeaderName, HeaderValue>,
        cap: usize,
    ) {
        let mut request = self
            .inner
            .post(uri)
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            request = request.header(name.clone(), value.clone());
        }
        if let Some(id) = session_id {
            request = request.header("mcp-session-id", id);
        }
        let Ok(mut response) = request.json(message).send().await else {
            return;
        };
        if !response.status().is_success() {
            return;
        }
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            if body.len() + chunk.len() > cap {
                return;
            }
            body.extend_from_slice(&chunk);
        }
        self.observe_body(&body);
    }

    /// Observes a whole response body: one JSON message, or SSE events whose `data:` lines are.
    fn observe_body(&self, body: &[u8]) {
        let text = String::from_utf8_lossy(body);
        if text.trim_start().starts_with('{') {
            self.raw.observe(body);
            return;
        }
        let mut data = String::new();
        for line in text.lines().chain(std::iter::once("")) {
            if let Some(rest) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            } else if line.is_empty() && !data.is_empty() {
                self.raw.observe(data.as_bytes());
                data.clear();
            }
        }
    }
}

fn is_tools_list(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::ListToolsRequest(_)))
}

impl StreamableHttpClient for ListingClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        if !is_tools_list(&message) {
            return self
                .inner
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await;
        }
        let response = self
            .inner
            .post_message_with_response_limits(
                Arc::clone(&uri),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
                limits,
            )
            .await?;
        match response {
            StreamableHttpPostResponse::Sse(stream, id) => {
                let raw = self.raw.clone();
                let stream = stream
                    .inspect(move |event| {
                        if let Ok(event) = event
                            && let Some(data) = &event.data
                        {
                            raw.observe(data.as_bytes());
                        }
                    })
                    .boxed();
                Ok(StreamableHttpPostResponse::Sse(stream, id))
            }
            json @ StreamableHttpPostResponse::Json(..) => {
                self.observe_again(
                    &uri,
                    &message,
                    session_id.as_deref(),
                    auth_header.as_deref(),
                    &custom_headers,
                    limits.max_json_response_size,
                )
                .await;
                Ok(json)
            }
            other => Ok(other),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn client() -> ListingClient {
        ListingClient::new(reqwest::Client::new(), RawListing::default())
    }

    fn restored(raw: &RawListing, name: &str) -> Option<String> {
        let mut tool = json!({ "name": name });
        raw.restore(&mut tool);
        tool["execution"]["taskSupport"].as_str().map(str::to_owned)
    }

    #[test]
    fn a_json_body_and_sse_events_are_both_read_as_listings() {
        let c = client();
        c.observe_body(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{},"execution":{"taskSupport":"required"}}]}}"#);
        assert_eq!(restored(&c.raw, "a").as_deref(), Some("required"));

        let c = client();
        // Two events; the second's data spans two `data:` lines, and the stream ends without a
        // blank line.
        let sse = "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n\
                   event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[{\"name\":\"b\",\n\
                   data: \"inputSchema\":{},\"execution\":{\"taskSupport\":\"required\"}}]}}";
        c.observe_body(sse.as_bytes());
        assert_eq!(restored(&c.raw, "b").as_deref(), Some("required"));
        assert_eq!(restored(&c.raw, "a"), None);
    }
}
