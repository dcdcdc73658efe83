//! A stand-in OpenTelemetry collector: an OTLP/gRPC trace service on 127.0.0.1:0 that keeps every
//! span it receives, so the exporter path can be asserted without a real collector. It never
//! answers with anything but success.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// A running fake collector; stops when dropped.
pub(crate) struct FakeCollector {
    addr: SocketAddr,
    received: Received,
    server: JoinHandle<()>,
}

impl FakeCollector {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Received::default();
        let sink = Sink {
            received: received.clone(),
        };
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(sink))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Self {
            addr,
            received,
            server,
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, with its resource's string attributes.
    pub(crate) fn spans(&self) -> Vec<(HashMap<String, String>, Span)> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for resource_spans in received.iter().flat_map(|r| &r.resource_spans) {
            let resource = resource_spans
                .resource
                .as_ref()
                .map(|resource| string_attributes(&resource.attributes))
                .unwrap_or_default();
            for scope_spans in &resource_spans.scope_spans {
                for span in &scope_spans.spans {
                    spans.push((resource.clone(), span.clone()));
                }
            }
        }
        spans
    }
}

impl Drop for FakeCollector {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn string_attributes(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(value) => Some((kv.key.clone(), value.clone())),
            _ => None,
        })
        .collect()
}

struct Sink {
    received: Received,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}
