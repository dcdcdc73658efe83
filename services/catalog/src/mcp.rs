//! The MCP source: pulls a cell's cached MCP tools from the mcp-proxy over gRPC
//! (`McpProxyService.ListCachedTools`, unusable tools included).
//!
//! Owns the client, its deadline and the page loop. It never connects to an MCP server itself
//! and never decides usability on its own beyond what `convert` derives from the proxy's facts.
//! A failed pull is reported, never propagated: an unreachable mcp-proxy must not break the
//! listing of every other source.

use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_telemetry::{GrpcClientTrace, GrpcClientTraceLayer};
use tower_layer::Layer;

use crate::cell::CellId;
use crate::error::{CatalogCode, CatalogError};

/// Tools asked for per page (the proxy's maximum).
const PAGE: u32 = 1000;

/// A client of the mcp-proxy.
#[derive(Debug, Clone)]
pub struct McpClient {
    url: String,
    client: McpProxyServiceClient<GrpcClientTrace<Channel>>,
    /// `Bearer <credential>` sent with every request when the proxy requires a credential.
    authorization: Option<AsciiMetadataValue>,
    timeout: Duration,
    max_tools: usize,
}

/// What one pull got.
#[derive(Debug, Clone, PartialEq)]
pub struct Pulled {
    pub tools: Vec<pb::McpCachedTool>,
    /// The proxy has more tools than the catalog takes per cell.
    pub truncated: bool,
}

impl McpClient {
    /// A lazily connecting client; nothing is dialled until the first pull. With `token`, every
    /// request carries it as `authorization: Bearer …`; with `tls`, it connects over TLS (the URL
    /// `https://…`).
    pub fn new(
        url: &str,
        timeout: Duration,
        max_tools: usize,
        token: Option<&toolplane_auth::TokenSecret>,
        tls: Option<&toolplane_serve::tls::PeerTls>,
    ) -> Result<Self, CatalogError> {
        let authorization = match token {
            Some(secret) => {
                let mut value = MetadataValue::try_from(format!("Bearer {}", secret.expose()))
                    .map_err(|_| {
                        CatalogError::new(
                            CatalogCode::ConfigInvalid,
                            "the mcp-proxy credential is not a valid header value",
                        )
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| {
                CatalogError::new(
                    CatalogCode::ConfigInvalid,
                    format!("mcp_proxy_url `{url}`: {e}"),
                )
            })?
            .connect_timeout(timeout)
            .timeout(timeout)
            .tcp_nodelay(true);
        let channel = toolplane_serve::tls::peer_channel(endpoint, tls)
            .map_err(|e| CatalogError::new(CatalogCode::ConfigInvalid, e))?;
        Ok(McpClient {
            url: url.to_owned(),
            client: McpProxyServiceClient::new(GrpcClientTraceLayer.layer(channel))
                .max_decoding_message_size(64 * 1024 * 1024),
            authorization,
            timeout,
            max_tools,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every cached tool of a cell, page by page, within the configured deadline. The error is
    /// a lowercase explanation for the MCP source's diagnostic.
    pub async fn pull(&self, cell: &CellId) -> Result<Pulled, String> {
        let work = async {
            let mut client = self.client.clone();
            let mut tools = Vec::new();
            let mut token = String::new();
            // A proxy that keeps handing out tokens cannot keep the catalog looping forever.
            let max_pages = self.max_tools / PAGE as usize + 2;
            for _ in 0..max_pages {
                let mut request = tonic::Request::new(pb::ListCachedToolsRequest {
                    cell_id: cell.as_str().to_owned(),
                    server_ids: Vec::new(),
                    include_unusable: true,
                    query: String::new(),
                    page_size: PAGE,
                    page_token: token.clone(),
                });
                if let Some(value) = &self.authorization {
                    request
                        .metadata_mut()
                        .insert("authorization", value.clone());
                }
                let response = client
                    .list_cached_tools(request)
                    .await
                    .map_err(|s| {
                        format!(
                            "the mcp-proxy at {} answered {:?}: {}",
                            self.url,
                            s.code(),
                            s.message()
                        )
                    })?
                    .into_inner();
                tools.extend(response.tools);
                if tools.len() > self.max_tools {
                    tools.truncate(self.max_tools);
                    return Ok(Pulled {
                        tools,
                        truncated: true,
                    });
                }
                if response.next_page_token.is_empty() {
                    return Ok(Pulled {
                        tools,
                        truncated: false,
                    });
                }
                token = response.next_page_token;
            }
            Ok(Pulled {
                tools,
                truncated: true,
            })
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "the mcp-proxy at {} did not answer within {} ms",
                self.url,
                self.timeout.as_millis()
            )),
        }
    }
}
