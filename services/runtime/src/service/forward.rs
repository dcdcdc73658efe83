//! Forwarding a request to the runtime that drives its run (cluster mode, docs/runtime.md "Taking
//! a run over"): a change to a run, or a request about one of its invocations, that reaches a
//! runtime which does not drive the run and cannot take it over (its driver's lease is live) is
//! sent on to the driver's advertised URL (`[cluster] advertise`), with the caller's own
//! `authorization` header, so the driver authenticates and scopes the caller itself. A forwarded
//! request carries `x-toolplane-forwarded`; it is never forwarded again (a runtime that got one
//! for a run it does not drive answers `runtime.not_owner`), so no request goes round in circles.
//! Channels are kept per URL, over TLS with the runtime's peer certificate when `[tls]` names a
//! peer CA.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_serve::tls::PeerTls;

use crate::config::RuntimeConfig;
use crate::error::RuntimeError;

/// The header that marks a forwarded request.
pub const FORWARDED: &str = "x-toolplane-forwarded";

/// Largest message a forwarded answer may be.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Most channels kept (one per driving runtime seen); the table starts afresh beyond it.
const MAX_CHANNELS: usize = 256;

/// Where a request came from: the caller's credential to pass on, and whether it was forwarded.
#[derive(Debug, Clone)]
pub struct Origin {
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
    pub forwarded: bool,
}

impl Origin {
    pub fn of<T>(request: &Request<T>) -> Origin {
        Origin {
            authorization: request.metadata().get("authorization").cloned(),
            forwarded: request.metadata().contains_key(FORWARDED),
        }
    }

    /// `message` as a forwarded request with the caller's credential.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(a) = &self.authorization {
            request.metadata_mut().insert("authorization", a.clone());
        }
        request
            .metadata_mut()
            .insert(FORWARDED, MetadataValue::from_static("1"));
        request
    }
}

/// The clients of the other runtimes, by URL.
#[derive(Debug, Default)]
pub struct Forwarder {
    tls: Option<PeerTls>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Forwarder {
    pub fn new(cfg: &RuntimeConfig) -> Arc<Forwarder> {
        let tls = match cfg.tls.peer() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "peer TLS is not usable for forwarding between runtimes");
                None
            }
        };
        Arc::new(Forwarder {
            tls,
            channels: Mutex::new(HashMap::new()),
        })
    }

    /// A client of the runtime at `url`.
    pub fn client(&self, url: &str) -> Result<RuntimeServiceClient<Channel>, Status> {
        let mut channels = match self.channels.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        let channel = match channels.get(url) {
            Some(c) => c.clone(),
            None => {
                let endpoint = Endpoint::from_shared(url.to_owned())
                    .map_err(|e| {
                        RuntimeError::dependency(format!(
                            "the driving runtime's URL `{url}` is not usable: {e}"
                        ))
                    })?
                    .tcp_nodelay(true)
                    .connect_timeout(Duration::from_secs(5));
                let c = toolplane_serve::tls::peer_channel(endpoint, self.tls.as_ref())
                    .map_err(RuntimeError::dependency)?;
                if channels.len() >= MAX_CHANNELS {
                    channels.clear();
                }
                channels.insert(url.to_owned(), c.clone());
                c
            }
        };
        Ok(RuntimeServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }
}
