//! The one way every toolplane server builds an error status (docs/errors.md, "Error details").
//!
//! A status made here carries, in `grpc-status-details-bin`, a `google.rpc.Status` with:
//! - `google.rpc.ErrorInfo`: `reason` is the stable error code (`runtime.not_found`), `domain`
//!   is [`DOMAIN`], `metadata` what is known about the failure (the service, a tool id, a limit,
//!   a run id);
//! - `google.rpc.RetryInfo` when retrying the same request may succeed: every `UNAVAILABLE`
//!   (after [`DEFAULT_RETRY_DELAY`] unless the caller named a delay) and any status given a delay
//!   with [`Details::retry_after`];
//! - `google.rpc.BadRequest` for every `INVALID_ARGUMENT`: the field violations named with
//!   [`Details::field`], or one violation with an empty field (the request as a whole).
//!
//! A service that fails because a peer refused keeps what the peer said: [`Details::caused_by`]
//! under its own code, or [`relay`] to pass the peer's status on as it is.
//!
//! The message is for people and states the code once: `"<code>: <text>"`, whatever prefixes of
//! the same code the text already had. A status relayed from a peer keeps the peer's details
//! ([`relay`]).

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// `ErrorInfo.domain` of every toolplane error.
pub const DOMAIN: &str = "toolplane.dev";

/// The `RetryInfo` delay of an `UNAVAILABLE` status that names none.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(1);

/// What a status says beyond its code and message.
#[derive(Debug, Clone, Default)]
pub struct Details {
    metadata: HashMap<String, String>,
    retry_after: Option<Duration>,
    violations: Vec<(String, String)>,
}

impl Details {
    pub fn new() -> Details {
        Details::default()
    }

    /// One `ErrorInfo.metadata` entry (`tool_id`, `limit`, `run_id`, …). Empty values are left
    /// out.
    pub fn meta(mut self, key: &str, value: impl Into<String>) -> Details {
        let value = value.into();
        if !value.is_empty() {
            self.metadata.insert(key.to_owned(), value);
        }
        self
    }

    /// A `RetryInfo` with this delay: the same request may succeed after it.
    pub fn retry_after(mut self, delay: Duration) -> Details {
        self.retry_after = Some(delay);
        self
    }

    /// What a peer's status (its raw details) said, under this service's own code: the peer's
    /// reason as metadata `cause`, its metadata (where this status has none of that name), its
    /// retry delay (where this status names none) and its field violations.
    pub fn caused_by(mut self, raw: &[u8]) -> Details {
        let peer = Status::with_details(Code::Unknown, "", raw.to_vec().into()).get_error_details();
        if let Some(info) = peer.error_info() {
            self.metadata
                .entry("cause".to_owned())
                .or_insert_with(|| info.reason.clone());
            for (key, value) in &info.metadata {
                self.metadata
                    .entry(key.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        if let Some(retry) = peer.retry_info() {
            self.retry_after = self.retry_after.or(retry.retry_delay);
        }
        if let Some(bad) = peer.bad_request() {
            for v in &bad.field_violations {
                self.violations
                    .push((v.field.clone(), v.description.clone()));
            }
        }
        self
    }

    /// A `BadRequest` field violation: the request field (`page_token`, `spec.profile_id`) and
    /// what is wrong with it.
    pub fn field(mut self, field: &str, description: impl Into<String>) -> Details {
        self.violations.push((field.to_owned(), description.into()));
        self
    }
}

/// The status of a failure with stable code `error_code`: the message `"<error_code>: <text>"`
/// (any leading copies of `"<error_code>: "` in `message` are dropped) and the details the module
/// documentation lists.
pub fn status(code: Code, error_code: &str, message: &str, details: Details) -> Status {
    let text = strip_code(error_code, message);
    let message = format!("{error_code}: {text}");
    let mut rich = ErrorDetails::new();
    rich.set_error_info(error_code, DOMAIN, details.metadata);
    let retry = details
        .retry_after
        .or((code == Code::Unavailable).then_some(DEFAULT_RETRY_DELAY));
    if let Some(delay) = retry {
        rich.set_retry_info(Some(delay));
    }
    if details.violations.is_empty() {
        if code == Code::InvalidArgument {
            rich.add_bad_request_violation(request_field(error_code), text);
        }
    } else {
        for (field, description) in details.violations {
            rich.add_bad_request_violation(field, description);
        }
    }
    Status::with_error_details(code, message, rich)
}

/// The request field a shared request code is about (`""`: the request as a whole).
fn request_field(error_code: &str) -> &'static str {
    match error_code {
        crate::page_token::CODE => "page_token",
        IDEMPOTENCY_MISMATCH => "request_id",
        _ => "",
    }
}

/// The code of a request whose `request_id` was used before for a different request.
pub const IDEMPOTENCY_MISMATCH: &str = "request.idempotency_mismatch";

/// `message` without leading `"<error_code>: "` prefixes (however many times it repeats).
pub fn strip_code<'a>(error_code: &str, message: &'a str) -> &'a str {
    let mut text = message;
    while let Some(rest) = text
        .strip_prefix(error_code)
        .and_then(|rest| rest.strip_prefix(':'))
    {
        text = rest.trim_start();
    }
    text
}

/// The stable error code of a status: its `ErrorInfo.reason`, or, for a status without details
/// (one made outside toolplane), the `namespace.name` before the first `:` of its message.
pub fn error_code(status: &Status) -> Option<String> {
    if let Some(info) = status.get_details_error_info() {
        return Some(info.reason);
    }
    let (code, _) = status.message().split_once(':')?;
    is_code(code).then(|| code.to_owned())
}

/// A peer's status passed on with another gRPC code and message: the peer's details (its
/// `ErrorInfo`, `RetryInfo`, `BadRequest`) travel unchanged.
pub fn relay(code: Code, message: impl Into<String>, raw: &[u8]) -> Status {
    Status::with_details(code, message, raw.to_vec().into())
}

/// The raw details of a peer's status, to keep while the error travels through code that knows
/// no protobuf; [`relay`] or [`Details::caused_by`] use them again.
pub fn raw_details(status: &Status) -> Option<Vec<u8>> {
    let details = status.details();
    (!details.is_empty()).then(|| details.to_vec())
}

/// `namespace.snake_name` with lowercase ASCII letters, digits and `_`.
fn is_code(code: &str) -> bool {
    let Some((namespace, name)) = code.split_once('.') else {
        return false;
    };
    let part = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
    };
    part(namespace) && part(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_message_states_the_code_once() {
        let s = status(
            Code::InvalidArgument,
            "profile.invalid_selector",
            "profile.invalid_selector: profile.invalid_selector: `mcp:` names no server",
            Details::new(),
        );
        assert_eq!(
            s.message(),
            "profile.invalid_selector: `mcp:` names no server"
        );
        let plain = status(
            Code::NotFound,
            "runtime.not_found",
            "run r1",
            Details::new(),
        );
        assert_eq!(plain.message(), "runtime.not_found: run r1");
    }

    #[test]
    fn error_info_carries_reason_domain_and_metadata() {
        let s = status(
            Code::NotFound,
            "runtime.not_found",
            "no run r1",
            Details::new().meta("run_id", "r1").meta("empty", ""),
        );
        let info = s.get_details_error_info().unwrap();
        assert_eq!(info.reason, "runtime.not_found");
        assert_eq!(info.domain, DOMAIN);
        assert_eq!(info.metadata.get("run_id").map(String::as_str), Some("r1"));
        assert!(!info.metadata.contains_key("empty"));
        assert!(s.get_details_retry_info().is_none());
        assert!(s.get_details_bad_request().is_none());
        assert_eq!(error_code(&s).as_deref(), Some("runtime.not_found"));
    }

    #[test]
    fn unavailable_says_when_to_retry_and_invalid_argument_names_fields() {
        let s = status(Code::Unavailable, "x.down", "down", Details::new());
        let retry = s.get_details_retry_info().unwrap();
        assert_eq!(retry.retry_delay, Some(DEFAULT_RETRY_DELAY));
        let s = status(
            Code::ResourceExhausted,
            "x.busy",
            "busy",
            Details::new().retry_after(Duration::from_millis(250)),
        );
        let retry = s.get_details_retry_info().unwrap();
        assert_eq!(retry.retry_delay, Some(Duration::from_millis(250)));
        let s = status(
            Code::InvalidArgument,
            "x.bad",
            "bad token",
            Details::new().field("page_token", "not issued here"),
        );
        let bad = s.get_details_bad_request().unwrap();
        assert_eq!(bad.field_violations.len(), 1);
        assert_eq!(bad.field_violations[0].field, "page_token");
        let s = status(
            Code::InvalidArgument,
            "x.bad",
            "x.bad: whole",
            Details::new(),
        );
        let bad = s.get_details_bad_request().unwrap();
        assert_eq!(bad.field_violations[0].description, "whole");
    }

    #[test]
    fn a_relayed_status_keeps_the_peers_details() {
        let peer = status(
            Code::FailedPrecondition,
            "workspace.stale_epoch",
            "epoch 1 < 2",
            Details::new().meta("run_id", "r1"),
        );
        let relayed = relay(
            Code::Aborted,
            "workspace.stale_epoch: epoch 1 < 2",
            &raw_details(&peer).unwrap(),
        );
        assert_eq!(relayed.code(), Code::Aborted);
        let info = relayed.get_details_error_info().unwrap();
        assert_eq!(info.reason, "workspace.stale_epoch");
        let wrapped = status(
            Code::Unavailable,
            "runtime.dependency_unavailable",
            "appending: workspace.stale_epoch: epoch 1 < 2",
            Details::new()
                .meta("service", "runtime")
                .caused_by(&raw_details(&peer).unwrap()),
        );
        let info = wrapped.get_details_error_info().unwrap();
        assert_eq!(info.reason, "runtime.dependency_unavailable");
        assert_eq!(info.metadata["cause"], "workspace.stale_epoch");
        assert_eq!(info.metadata["run_id"], "r1");
        assert_eq!(info.metadata["service"], "runtime");
    }

    #[test]
    fn a_status_without_details_is_read_from_its_message() {
        let s = Status::internal("catalog.io: disk");
        assert_eq!(error_code(&s).as_deref(), Some("catalog.io"));
        assert_eq!(error_code(&Status::internal("no code here")), None);
        assert_eq!(error_code(&Status::internal("Bad.Code: x")), None);
    }
}
