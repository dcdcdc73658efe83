//! The runtime's errors and their one mapping to gRPC statuses.
//!
//! Every error carries a stable code from the core's table; the code's class decides the status:
//! provider-contract violations are `FAILED_PRECONDITION`, invalid input `INVALID_ARGUMENT` (or
//! `NOT_FOUND`), system failures `UNAVAILABLE` / `INTERNAL`. Messages start with the code.

use toolplane_core::error::{self as codes, CoreError, ErrorClass, ErrorCode};

/// A runtime failure: a core error (code + message) with where it came from.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RuntimeError(pub CoreError);

impl RuntimeError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RuntimeError(CoreError::new(code, message))
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
        RuntimeError(e)
    }
}

impl From<RuntimeError> for tonic::Status {
    fn from(e: RuntimeError) -> tonic::Status {
        let code = e.0.code;
        let message = e.0.to_string();
        match code.class() {
            ErrorClass::ProviderContract => tonic::Status::failed_precondition(message),
            ErrorClass::InvalidInput if code == codes::RUNTIME_NOT_FOUND => {
                tonic::Status::not_found(message)
            }
            ErrorClass::InvalidInput
                if code == codes::RUNTIME_INVOCATION_NOT_OPEN
                    || code == codes::RUNTIME_STALE_EPOCH
                    || code == codes::RUNTIME_APPROVAL_DECIDED
                    || code == codes::RUNTIME_APPROVAL_PENDING =>
            {
                tonic::Status::failed_precondition(message)
            }
            ErrorClass::InvalidInput => tonic::Status::invalid_argument(message),
            ErrorClass::System
                if code == codes::RUNTIME_DEPENDENCY_UNAVAILABLE
                    || code == codes::MODEL_CALL_FAILED =>
            {
                tonic::Status::unavailable(message)
            }
            ErrorClass::System if code == codes::RUNTIME_CANCELLED => {
                tonic::Status::cancelled(message)
            }
            ErrorClass::System => tonic::Status::internal(message),
            ErrorClass::Recoverable | ErrorClass::PolicyDenied => {
                tonic::Status::failed_precondition(message)
            }
        }
    }
}

/// Reads the stable code at the start of another service's status message (`"workspace.x: …"`).
pub fn status_code_prefix(status: &tonic::Status) -> Option<&str> {
    let (code, _) = status.message().split_once(':')?;
    toolplane_core::result::is_well_formed_code(code).then_some(code)
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
