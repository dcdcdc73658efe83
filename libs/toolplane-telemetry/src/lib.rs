//! Telemetry for toolplane's services: logs, OpenTelemetry traces, and the W3C trace context that
//! ties one agent's call across catalog, runtime, workspace and mcp-proxy into one trace.
//!
//! A service binary calls [`init`] once at start (inside its tokio runtime) and keeps the returned
//! [`TelemetryGuard`] until it exits; dropping the guard flushes the spans still queued for export.
//! Its gRPC server is wrapped with [`GrpcServerTraceLayer`], which opens one server span per request
//! whose parent is the caller's span, read from the `traceparent`/`tracestate` metadata. Its gRPC
//! clients either wrap their channel with [`GrpcClientTraceLayer`] (a client span per call, the
//! context injected into the request) or add [`TraceContextInterceptor`] (the current span's
//! context injected, no span of its own).
//!
//! ```no_run
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let _telemetry = toolplane_telemetry::init(
//!     toolplane_telemetry::TelemetryConfig::new("catalog")
//!         .with_service_version(env!("CARGO_PKG_VERSION")),
//! )?;
//! // tonic::transport::Server::builder()
//! //     .layer(toolplane_telemetry::GrpcServerTraceLayer)
//! //     .add_service(...)
//! # Ok(())
//! # }
//! ```
//!
//! Export is opt-in and follows the OpenTelemetry environment variables: spans leave the process
//! over OTLP/gRPC only when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is
//! set and `OTEL_SDK_DISABLED` is not `true`; otherwise the service writes plain logs.
//!
//! This crate never decides what a span means for the domain: span names and attributes for tools
//! and runs (`execute_tool {tool name}`, `gen_ai.tool.name`, `run.id`, …) are set by the services
//! that own those facts. It knows gRPC and HTTP headers, never protobuf messages.

mod attributes;
mod config;
mod grpc;
pub mod metrics;
mod otlp_metrics;
mod propagation;
mod setup;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use attributes::set_string_array;
pub use config::TelemetryConfig;
pub use grpc::{
    GrpcClientTrace, GrpcClientTraceLayer, GrpcServerTrace, GrpcServerTraceLayer, GrpcTraceBody,
    GrpcTraceFuture,
};
pub use propagation::{
    TraceContextInterceptor, current_trace_context, extract_context, extract_context_from_metadata,
    inject_context, inject_context_into_headers, install_propagator,
};
pub use setup::{TelemetryGuard, init};

/// Why telemetry could not be set up or shut down. Messages start with a stable
/// `telemetry.*` code.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// Something (an earlier [`init`], a test harness) already installed the process-wide
    /// tracing subscriber; there can be only one.
    #[error("telemetry.already_initialized: a global tracing subscriber is already installed")]
    AlreadyInitialized,
    /// OTLP export was configured but [`init`] ran outside a tokio runtime: the gRPC exporter's
    /// channel lives on the runtime.
    #[error("telemetry.no_runtime: otlp export needs a tokio runtime, call init from inside one")]
    NoRuntime,
    /// The OTLP exporter rejected its configuration (an unparsable endpoint, an `https` endpoint
    /// without TLS support, …).
    #[error("telemetry.exporter: {0}")]
    Exporter(opentelemetry_otlp::ExporterBuildError),
    /// Flushing queued spans on shutdown failed or timed out; those spans are lost.
    #[error("telemetry.shutdown: {0}")]
    Shutdown(opentelemetry_sdk::error::OTelSdkError),
}
