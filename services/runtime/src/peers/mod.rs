//! The tonic adapters of the runtime's ports: gRPC clients of the catalog, the workspace service,
//! the mcp-proxy and external tool hosts ([`Peers`], implementing the traits of
//! `context::ports` in [`ports`]), and [`Runtime::open`](crate::context::Runtime::open), which
//! assembles a runtime from its configuration. Channels connect lazily and carry W3C trace
//! context; one channel per endpoint is shared by all calls (tonic channels multiplex). Calls to
//! the catalog, the workspace and the mcp-proxy carry the runtime's peer credential
//! (`authorization: Bearer …`, docs/auth.md) when it has one, and go over TLS with the runtime's
//! client certificate when `[tls]` names a peer CA (`--peer-tls-ca`; docs/auth.md, "mTLS between
//! services"); calls to external hosts never do either.
//!
//! The top of the runtime's layers below the service: the only place, with `convert` and the
//! service, that knows protobuf and tonic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::metadata::{AsciiMetadataValue, MetadataKey, MetadataMap, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::tool_executor_client::ToolExecutorClient;
use toolplane_proto::v1::workspace_service_client::WorkspaceServiceClient;
use toolplane_serve::tls::PeerTls;
use toolplane_telemetry::TraceContextInterceptor;

pub mod again;
pub mod appends;
pub mod models;
mod ports;

use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use appends::Appends;

pub type Traced = InterceptedService<Channel, PeerInterceptor>;

/// Adds W3C trace context to every call, and the peer credential to calls of the plane's own
/// services.
#[derive(Clone, Debug, Default)]
pub struct PeerInterceptor {
    authorization: Option<AsciiMetadataValue>,
}

impl Interceptor for PeerInterceptor {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let mut request = TraceContextInterceptor.call(request)?;
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// Header names and values to send to an external host, by host id and endpoint URL.
type HostHeaders = HashMap<(String, String), Vec<(String, String)>>;

/// Largest message the runtime accepts from a peer.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Peers {
    catalog: Channel,
    workspace: Channel,
    mcp_proxy: Channel,
    external: Arc<Mutex<HashMap<String, Channel>>>,
    /// Header values of external hosts' endpoints (e.g. `authorization`) by host id and URL, as the
    /// catalog's `ResolveProfile` last gave them; sent with every call to that host.
    external_headers: Arc<Mutex<HostHeaders>>,
    appends: Arc<Appends>,
    /// For the catalog, the workspace and the mcp-proxy only.
    plane: PeerInterceptor,
}

fn channel(url: &str) -> Result<Channel, RuntimeError> {
    Ok(endpoint(url)?.connect_lazy())
}

fn endpoint(url: &str) -> Result<Endpoint, RuntimeError> {
    Ok(Endpoint::from_shared(url.to_owned())
        .map_err(|e| RuntimeError::invalid(format!("`{url}` is not a valid endpoint: {e}")))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5)))
}

/// A channel to one of the plane's own services: over TLS when the runtime has peer TLS.
fn plane_channel(url: &str, tls: Option<&PeerTls>) -> Result<Channel, RuntimeError> {
    toolplane_serve::tls::peer_channel(endpoint(url)?, tls).map_err(RuntimeError::invalid)
}

impl Peers {
    pub fn new(cfg: &RuntimeConfig) -> Result<Self, RuntimeError> {
        let authorization = match &cfg.peer_token {
            Some(secret) => {
                let mut value = MetadataValue::try_from(format!("Bearer {}", secret.expose()))
                    .map_err(|_| {
                        RuntimeError::invalid("the peer credential is not a valid header value")
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let tls = cfg.tls.peer().map_err(RuntimeError::invalid)?;
        let tls = tls.as_ref();
        Ok(Peers {
            catalog: plane_channel(&cfg.catalog_url, tls)?,
            workspace: plane_channel(&cfg.workspace_url, tls)?,
            mcp_proxy: plane_channel(&cfg.mcp_proxy_url, tls)?,
            external: Arc::new(Mutex::new(HashMap::new())),
            external_headers: Arc::new(Mutex::new(HashMap::new())),
            appends: Arc::new(Appends::default()),
            plane: PeerInterceptor { authorization },
        })
    }

    pub fn profiles(&self) -> ProfileServiceClient<Traced> {
        ProfileServiceClient::with_interceptor(self.catalog.clone(), self.plane.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// The catalog's tool listings (an MCP server's current tools, for catalog changes).
    pub fn tool_catalog(&self) -> CatalogServiceClient<Traced> {
        CatalogServiceClient::with_interceptor(self.catalog.clone(), self.plane.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    pub fn workspace(&self) -> WorkspaceServiceClient<Traced> {
        WorkspaceServiceClient::with_interceptor(self.workspace.clone(), self.plane.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Appends to a run's journal, sharing requests with other runs' appends under load
    /// ([`appends`]).
    pub async fn send_journal(
        &self,
        request: toolplane_proto::v1::AppendJournalRequest,
    ) -> Result<(), tonic::Status> {
        appends::append(self, request).await
    }

    /// The queue and request slots of this runtime's journal appends.
    pub(crate) fn appends(&self) -> &Appends {
        &self.appends
    }

    pub fn workspace_executor(&self) -> ToolExecutorClient<Traced> {
        ToolExecutorClient::with_interceptor(self.workspace.clone(), self.plane.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    pub fn mcp_executor(&self) -> ToolExecutorClient<Traced> {
        ToolExecutorClient::with_interceptor(self.mcp_proxy.clone(), self.plane.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Remembers the headers a host's registration asks its callers to send.
    pub fn set_external_headers(
        &self,
        host_id: &str,
        url: &str,
        headers: &HashMap<String, String>,
    ) {
        if let Ok(mut map) = self.external_headers.lock() {
            let headers = headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            map.insert((host_id.to_owned(), url.to_owned()), headers);
        }
    }

    /// Adds a host's registered headers to a call's metadata. The catalog accepts only lowercase
    /// ASCII names and printable ASCII values at registration; anything else would be skipped.
    pub fn add_external_headers(&self, host_id: &str, url: &str, metadata: &mut MetadataMap) {
        let Ok(map) = self.external_headers.lock() else {
            return;
        };
        for (name, value) in map
            .get(&(host_id.to_owned(), url.to_owned()))
            .into_iter()
            .flatten()
        {
            if let (Ok(k), Ok(v)) = (
                MetadataKey::from_bytes(name.as_bytes()),
                MetadataValue::try_from(value.as_str()),
            ) {
                metadata.insert(k, v);
            }
        }
    }

    /// The executor of an external host; channels are cached per endpoint.
    pub fn external_executor(
        &self,
        endpoint: &str,
    ) -> Result<ToolExecutorClient<Traced>, RuntimeError> {
        let ch = {
            let mut map = self
                .external
                .lock()
                .map_err(|_| RuntimeError::dependency("executor channel table poisoned"))?;
            match map.get(endpoint) {
                Some(c) => c.clone(),
                None => {
                    let c = channel(endpoint)?;
                    map.insert(endpoint.to_owned(), c.clone());
                    c
                }
            }
        };
        Ok(
            ToolExecutorClient::with_interceptor(ch, PeerInterceptor::default())
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
    }
}
