//! The crate's one error type with its stable `auth.*` codes. Owns what a refused caller is told;
//! must never put a credential, a secret or a hash into a message.

use crate::Role;

/// Everything authentication and authorization can fail with. The `Display` text starts with
/// the stable code returned by [`AuthError::code`] and never contains the credential presented.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The request carried no `authorization: Bearer …` credential.
    #[error("auth.unauthenticated: no bearer credential; send `authorization: Bearer <token>`")]
    MissingCredential,
    /// The credential is not one this plane accepts: unknown, malformed, badly signed, wrong
    /// issuer or audience. One message for all, so a caller learns nothing about which.
    #[error("auth.unauthenticated: the bearer credential is not valid")]
    InvalidCredential,
    /// The token or JWT is past its expiry.
    #[error("auth.unauthenticated: the bearer credential has expired")]
    Expired,
    /// The token was revoked.
    #[error("auth.unauthenticated: the bearer credential was revoked")]
    Revoked,
    /// A kind of credential this server has no verifier for (a JWT without a JWKS configured).
    #[error("auth.unauthenticated: this server does not accept {kind} credentials")]
    UnsupportedCredential { kind: &'static str },
    /// The caller's role does not include the one the path requires.
    #[error("auth.permission_denied: role {role} may not call this; it requires {required}")]
    PermissionDenied { role: Role, required: Role },
    /// The caller asked for a cell other than its own.
    #[error("auth.permission_denied: the credential is not valid for cell {cell:?}")]
    WrongCell { cell: String },
    /// A role name that is not `reader`, `agent` or `admin`.
    #[error("auth.invalid_role: {role:?} is not reader, agent or admin")]
    InvalidRole { role: String },
    /// A token field (name, cell, expiry) is empty, too long or otherwise unusable.
    #[error("auth.invalid_request: {0}")]
    InvalidRequest(String),
    /// No token with this id.
    #[error("auth.token_not_found: {id}")]
    TokenNotFound { id: String },
    /// A JWT claim the configuration names (cell, role) is missing or unusable.
    #[error("auth.unauthenticated: the bearer credential lacks a usable {claim} claim")]
    MissingClaim { claim: String },
    /// The JWKS file could not be read or parsed.
    #[error("auth.jwks_invalid: {0}")]
    Jwks(String),
    /// A stored token record could not be read back.
    #[error("auth.corrupt_record: {0}")]
    CorruptRecord(String),
    /// The token store failed.
    #[error("auth.store: {0}")]
    Store(#[from] toolplane_store::StoreError),
    /// Writing the bootstrap token file failed.
    #[error("auth.io: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// How a refusal is answered on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// gRPC UNAUTHENTICATED (16), HTTP 401.
    Unauthenticated,
    /// gRPC PERMISSION_DENIED (7), HTTP 403.
    PermissionDenied,
    /// gRPC INTERNAL (13) / UNAVAILABLE, HTTP 500: the plane failed, not the caller.
    Internal,
}

impl AuthError {
    /// The stable `auth.*` code, also the start of the message.
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::MissingCredential
            | AuthError::InvalidCredential
            | AuthError::Expired
            | AuthError::Revoked
            | AuthError::UnsupportedCredential { .. }
            | AuthError::MissingClaim { .. } => "auth.unauthenticated",
            AuthError::PermissionDenied { .. } | AuthError::WrongCell { .. } => {
                "auth.permission_denied"
            }
            AuthError::InvalidRole { .. } => "auth.invalid_role",
            AuthError::InvalidRequest(_) => "auth.invalid_request",
            AuthError::TokenNotFound { .. } => "auth.token_not_found",
            AuthError::Jwks(_) => "auth.jwks_invalid",
            AuthError::CorruptRecord(_) => "auth.corrupt_record",
            AuthError::Store(_) => "auth.store",
            AuthError::Io { .. } => "auth.io",
        }
    }

    /// This error as a gRPC status with its error details (`toolplane_proto::status`): a refusal
    /// is UNAUTHENTICATED or PERMISSION_DENIED, a bad token request INVALID_ARGUMENT, an unknown
    /// token NOT_FOUND; a failure of the plane is INTERNAL and its text stays in the log (it may
    /// name stored keys).
    pub fn to_status(&self) -> tonic::Status {
        use tonic::Code;
        let code = self.code();
        let grpc = match code {
            "auth.unauthenticated" => Code::Unauthenticated,
            "auth.permission_denied" => Code::PermissionDenied,
            "auth.invalid_role" | "auth.invalid_request" => Code::InvalidArgument,
            "auth.token_not_found" => Code::NotFound,
            _ => Code::Internal,
        };
        let mut details = toolplane_proto::status::Details::new();
        match self {
            AuthError::PermissionDenied { role, required } => {
                details = details
                    .meta("role", role.to_string())
                    .meta("required_role", required.to_string());
            }
            AuthError::WrongCell { cell } => details = details.meta("cell_id", cell.clone()),
            AuthError::InvalidRole { .. } => {
                details = details.field("role", "not reader, agent or admin")
            }
            AuthError::TokenNotFound { id } => details = details.meta("token_id", id.clone()),
            _ => {}
        }
        let message = if grpc == Code::Internal {
            "the credential could not be checked".to_owned()
        } else {
            self.to_string()
        };
        toolplane_proto::status::status(grpc, code, &message, details)
    }

    /// How the layer answers this error.
    pub fn refusal(&self) -> Refusal {
        match self.code() {
            "auth.unauthenticated" => Refusal::Unauthenticated,
            "auth.permission_denied" => Refusal::PermissionDenied,
            _ => Refusal::Internal,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> AuthError {
        AuthError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Every code [`AuthError::code`] returns, in documentation order (`docs/auth.md`).
pub const CODES: &[&str] = &[
    "auth.unauthenticated",
    "auth.permission_denied",
    "auth.invalid_role",
    "auth.invalid_request",
    "auth.token_not_found",
    "auth.jwks_invalid",
    "auth.corrupt_record",
    "auth.store",
    "auth.io",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code_and_every_code_is_documented() {
        let errors = [
            AuthError::MissingCredential,
            AuthError::InvalidCredential,
            AuthError::Expired,
            AuthError::Revoked,
            AuthError::UnsupportedCredential { kind: "JWT" },
            AuthError::PermissionDenied {
                role: Role::Reader,
                required: Role::Admin,
            },
            AuthError::WrongCell { cell: "b".into() },
            AuthError::InvalidRole { role: "x".into() },
            AuthError::InvalidRequest("x".into()),
            AuthError::TokenNotFound { id: "x".into() },
            AuthError::MissingClaim { claim: "x".into() },
            AuthError::Jwks("x".into()),
            AuthError::CorruptRecord("x".into()),
            AuthError::io("x", std::io::Error::other("x")),
        ];
        for error in &errors {
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("{}: ", error.code())),
                "{error}"
            );
            assert!(CODES.contains(&error.code()), "{}", error.code());
        }
        let doc = include_str!("../../../docs/auth.md");
        for code in CODES {
            assert!(
                doc.contains(&format!("| `{code}` |")),
                "docs/auth.md misses {code}"
            );
        }
    }

    #[test]
    fn refusals_map_to_the_wire() {
        assert_eq!(AuthError::Expired.refusal(), Refusal::Unauthenticated);
        assert_eq!(
            AuthError::WrongCell { cell: "b".into() }.refusal(),
            Refusal::PermissionDenied
        );
        assert_eq!(AuthError::Jwks("x".into()).refusal(), Refusal::Internal);
    }
}
