//! toolplane-auth: who is calling, as a library every service mounts.
//!
//! - Credentials, both as `authorization: Bearer …` (gRPC metadata and HTTP headers):
//!   toolplane tokens ([`TokenStore`]: `tp_` + 256 random bits, stored only as SHA-256 hashes,
//!   verified by hash lookup and a constant-time compare, revocable, optionally expiring) and
//!   JWTs of the operator's identity provider ([`JwtVerifier`]: RS256 / ES256 against a JWKS
//!   file, issuer, audience, expiry, cell and role from configurable claims).
//! - [`Role`]s (admin ⊇ agent ⊇ reader) and the [`Caller`] a request runs as; a
//!   [`TransportCaller`] is the caller a verified client certificate stands for, used when a
//!   request sends no bearer credential.
//! - [`table`]: the one table of what every RPC and HTTP path requires.
//! - [`AuthLayer`]: the tower layer for tonic and axum servers, which inserts the [`Caller`]
//!   into the request's extensions or refuses with UNAUTHENTICATED / PERMISSION_DENIED (HTTP
//!   401 / 403), and which can be switched off ([`Authenticator::off`]).
//! - [`bootstrap_admin_token`]: the first admin token, written to `<data-dir>/admin.token`.
//! - [`AdminAuditLog`]: the append-only record of administrative changes, per service and cell.
//!
//! This crate knows no protobuf message and no service: it sees paths and headers only. Errors
//! are one enum, [`AuthError`], whose messages start with a stable `auth.*` code and never hold a
//! credential. See `docs/auth.md`.

mod audit;
mod authenticator;
mod bootstrap;
mod cache;
mod error;
mod jwt;
mod layer;
mod role;
pub mod table;
mod token;

pub use audit::{
    ADMIN_AUDIT_PREFIX, AdminAuditLog, AdminAuditPage, AdminAuditQuery, AdminAuditRecord,
    AdminChange, AdminKind, DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE,
};
pub use authenticator::{Authenticator, SERVICE_PRINCIPAL, bearer};
pub use bootstrap::{
    ADMIN_TOKEN_FILE, BOOTSTRAP_TOKEN_NAME, admin_token_path, bootstrap_admin_token,
};
pub use cache::{DEFAULT_CACHE_CAPACITY, DEFAULT_CACHE_TTL};
pub use error::{AuthError, CODES, Refusal};
pub use jwt::{JwtConfig, JwtVerifier, RELOAD_CHECK_INTERVAL};
pub use layer::{AuthBody, AuthLayer, AuthService};
pub use role::{Caller, CallerKind, Role, TransportCaller};
pub use table::{Requirement, requirement};
pub use token::{CreatedToken, NewToken, TOKEN_PREFIX, TokenInfo, TokenSecret, TokenStore};
