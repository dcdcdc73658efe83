//! The runtime's errors and their one mapping to gRPC statuses.
//!
//! Every error carries a stable code from the core's table; the code's class decides the status:
//! provider-contract violations are `FAILED_PRECONDITION`, invalid input `INVALID_ARGUMENT` (or
//! `NOT_FOUND`), system failures `UNAVAILABLE` / `INTERNAL`. Statuses are made by
//! `toolplane_proto::status`: the message states the code once and the details carry it as
//! `ErrorInfo.reason`, with what a peer's refusal said when one caused the error (docs/errors.md,
//! "Error details").

use std::sync::Arc;

use toolplane_core::error::{self as codes, CoreError, ErrorClass, ErrorCode};
use toolplane_proto::status::{self as rich, Details};

/// A runtime failure: a core error (code + message), and the raw error details of the peer's
/// status that caused it, if any.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub CoreError, pub Option<Arc<[u8]>>);

impl RuntimeError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RuntimeError(CoreError::new(code, message), None)
    }

    /// This error, caused by a peer's refusal whose raw status details these are.
    pub fn caused_by(mut self, peer: Option<Arc<[u8]>>) -> Self {
        self.1 = peer;
        self
    }

    pub fn code(&self) -> ErrorCode {
        self.0.code
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        RuntimeError::new(codes::RUNTIME_NOT_FOUND, what)
    }

    pub fn invalid(what: impl Into<String>) -> Self {
        RuntimeError::new(codes::RUNTIME_INVALID_REQUEST, what)
    }

    pub fn dependency(what: impl Into<String>) -> Self {
        RuntimeError::new(codes::RUNTIME_DEPENDENCY_UNAVAILABLE, what)
    }

    pub fn journal(what: impl Into<String>) -> Self {
        RuntimeError::new(codes::RUNTIME_JOURNAL_FAILED, what)
    }
}

impl From<CoreError> for RuntimeError {
    fn from(e: CoreError) -> Self {
        RuntimeError(e, None)
    }
}

impl From<RuntimeError> for tonic::Status {
    fn from(e: RuntimeError) -> tonic::Status {
        use tonic::Code;
        let code = e.0.code;
        let grpc = match code.class() {
            ErrorClass::ProviderContract => Code::FailedPrecondition,
            ErrorClass::InvalidInput if code == codes::RUNTIME_NOT_FOUND => Code::NotFound,
            ErrorClass::InvalidInput
                if code == codes::RUNTIME_INVOCATION_NOT_OPEN
                    || code == codes::RUNTIME_STALE_EPOCH
                    || code == codes::RUNTIME_APPROVAL_DECIDED
                    || code == codes::RUNTIME_APPROVAL_PENDING
                    || code == codes::RUNTIME_NOT_OWNER =>
            {
                Code::FailedPrecondition
            }
            ErrorClass::InvalidInput => Code::InvalidArgument,
            ErrorClass::System
                if code == codes::RUNTIME_DEPENDENCY_UNAVAILABLE
                    || code == codes::MODEL_CALL_FAILED
                    || code == codes::RUNTIME_DRAINING =>
            {
                Code::Unavailable
            }
            ErrorClass::System if code == codes::RUNTIME_CANCELLED => Code::Cancelled,
            ErrorClass::System if code == codes::RUNTIME_LEASE_LOST => Code::FailedPrecondition,
            ErrorClass::System => Code::Internal,
            ErrorClass::Recoverable | ErrorClass::PolicyDenied => Code::FailedPrecondition,
        };
        let mut details = Details::new().meta("service", "runtime");
        if let Some(peer) = &e.1 {
            details = details.caused_by(peer);
        }
        rich::status(grpc, code.as_str(), &e.0.message, details)
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
