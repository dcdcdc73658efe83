//! Deciding one request: read the bearer credential, verify it with the token store or the JWKS,
//! and check the path's requirement. Owns which verifier a credential goes to; must never know
//! how the answer travels (gRPC or HTTP: that is [`crate::layer`]).

use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::table::{Requirement, requirement};
use crate::token::TOKEN_PREFIX;
use crate::{AuthError, Caller, CallerKind, JwtVerifier, Role, TokenSecret, TokenStore};

/// The principal of a request made with the service credential.
pub const SERVICE_PRINCIPAL: &str = "service";

/// Verifies callers: either off (every request is a default-cell admin, today's developer
/// posture) or on, with toolplane tokens, operator JWTs, or both.
#[derive(Clone, Debug)]
pub struct Authenticator {
    mode: Mode,
}

#[derive(Clone, Debug)]
enum Mode {
    Off(Caller),
    On {
        tokens: Option<TokenStore>,
        jwt: Option<Arc<JwtVerifier>>,
        service: Option<Arc<ServiceCredential>>,
    },
}

/// A credential held in memory (never in a token store): the SHA-256 of its secret and the
/// caller it stands for.
struct ServiceCredential {
    sha256: [u8; 32],
    caller: Caller,
}

impl std::fmt::Debug for ServiceCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceCredential")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Authentication off: every request, on every path, is [`Caller::auth_off`] of `cell`.
    pub fn off(default_cell: &str) -> Authenticator {
        Authenticator {
            mode: Mode::Off(Caller::auth_off(default_cell)),
        }
    }

    /// Authentication on. A `tp_…` credential goes to `tokens`, anything else to `jwt`; a kind
    /// without a verifier is refused.
    pub fn on(tokens: Option<TokenStore>, jwt: Option<JwtVerifier>) -> Authenticator {
        Authenticator {
            mode: Mode::On {
                tokens,
                jwt: jwt.map(Arc::new),
                service: None,
            },
        }
    }

    /// The token store toolplane tokens are verified against, when authentication is on with
    /// one: the store a token administration service must write to, so the tokens it makes are
    /// the ones this authenticator accepts.
    pub fn tokens(&self) -> Option<&TokenStore> {
        match &self.mode {
            Mode::On { tokens, .. } => tokens.as_ref(),
            Mode::Off(_) => None,
        }
    }

    /// Also accepts `secret` as an admin of `cell` (principal `service`): the credential one
    /// service of the plane calls another with — generated at start by `toolplane up`, or read
    /// from a file (a Kubernetes Secret) by the separate service binaries. It is compared in
    /// constant time and never stored; it replaces an earlier one. No effect when off.
    #[must_use]
    pub fn with_service_credential(mut self, secret: &TokenSecret, cell: &str) -> Authenticator {
        if let Mode::On { service, .. } = &mut self.mode {
            *service = Some(Arc::new(ServiceCredential {
                sha256: Sha256::digest(secret.expose().as_bytes()).into(),
                caller: Caller {
                    cell: cell.to_owned(),
                    role: Role::Admin,
                    principal: SERVICE_PRINCIPAL.to_owned(),
                    kind: CallerKind::Token,
                },
            }));
        }
        self
    }

    pub fn is_on(&self) -> bool {
        matches!(self.mode, Mode::On { .. })
    }

    /// Who sent these headers.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthError> {
        match &self.mode {
            Mode::Off(caller) => Ok(caller.clone()),
            Mode::On {
                tokens,
                jwt,
                service,
            } => {
                let credential = bearer(headers)?;
                if let Some(service) = service {
                    let digest: [u8; 32] = Sha256::digest(credential.as_bytes()).into();
                    if bool::from(digest.ct_eq(&service.sha256)) {
                        return Ok(service.caller.clone());
                    }
                }
                if credential.starts_with(TOKEN_PREFIX) {
                    let tokens = tokens.as_ref().ok_or(AuthError::UnsupportedCredential {
                        kind: "toolplane token",
                    })?;
                    tokens.verify(credential).await
                } else {
                    let jwt = jwt
                        .as_ref()
                        .ok_or(AuthError::UnsupportedCredential { kind: "JWT" })?;
                    jwt.verify(credential)
                }
            }
        }
    }

    /// Whether a request for `path` with these headers may proceed, and as whom: `Ok(None)` for
    /// an open path with authentication on (no credential is read), `Ok(Some(caller))` for a
    /// caller whose role includes the path's requirement.
    pub async fn authorize(
        &self,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Option<Caller>, AuthError> {
        self.authorize_with(path, headers, None).await
    }

    /// [`Authenticator::authorize`] for a request whose connection's transport vouches for
    /// `transport` (a verified client certificate): that caller is used when the request sends
    /// no `authorization` header at all; a credential, when sent, is verified as always and wins.
    pub async fn authorize_with(
        &self,
        path: &str,
        headers: &HeaderMap,
        transport: Option<&Caller>,
    ) -> Result<Option<Caller>, AuthError> {
        if let Mode::Off(caller) = &self.mode {
            return Ok(Some(caller.clone()));
        }
        match requirement(path) {
            Requirement::Open => Ok(None),
            Requirement::Role(required) => {
                let caller = match transport {
                    Some(caller) if !headers.contains_key(AUTHORIZATION) => caller.clone(),
                    _ => self.authenticate(headers).await?,
                };
                caller.check_role(required)?;
                Ok(Some(caller))
            }
        }
    }
}

/// The credential of `authorization: Bearer <credential>` (scheme case-insensitive).
pub fn bearer(headers: &HeaderMap) -> Result<&str, AuthError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(AuthError::MissingCredential)?;
    if values.next().is_some() {
        return Err(AuthError::InvalidCredential);
    }
    let value = value.to_str().map_err(|_| AuthError::InvalidCredential)?;
    let (scheme, credential) = value.split_once(' ').ok_or(AuthError::InvalidCredential)?;
    let credential = credential.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || credential.is_empty() {
        return Err(AuthError::InvalidCredential);
    }
    Ok(credential)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn bearer_reads_one_bearer_credential_only() {
        assert_eq!(bearer(&headers(&["Bearer tp_x"])).unwrap(), "tp_x");
        assert_eq!(bearer(&headers(&["bearer  a.b.c "])).unwrap(), "a.b.c");
        assert!(matches!(
            bearer(&headers(&[])),
            Err(AuthError::MissingCredential)
        ));
        for bad in ["Basic dXNlcjpwdw==", "Bearer", "Bearer  ", "tp_x"] {
            assert!(matches!(
                bearer(&headers(&[bad])),
                Err(AuthError::InvalidCredential)
            ));
        }
        assert!(bearer(&headers(&["Bearer a", "Bearer b"])).is_err());
    }

    #[tokio::test]
    async fn off_is_a_default_cell_admin_everywhere() {
        let auth = Authenticator::off("default");
        assert!(!auth.is_on());
        let caller = auth
            .authorize("/toolplane.v1.ProfileService/PutProfile", &HeaderMap::new())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(caller, Caller::auth_off("default"));
    }

    #[tokio::test]
    async fn on_without_a_verifier_for_the_kind_refuses_it() {
        let auth = Authenticator::on(None, None);
        let path = "/toolplane.v1.CatalogService/ListTools";
        for (value, code) in [
            ("Bearer tp_abc", "toolplane token"),
            ("Bearer a.b.c", "JWT"),
        ] {
            let err = auth.authorize(path, &headers(&[value])).await.unwrap_err();
            assert!(err.to_string().contains(code), "{err}");
            assert!(!err.to_string().contains("abc"), "{err}");
        }
        assert!(
            auth.authorize("/grpc.health.v1.Health/Check", &HeaderMap::new())
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn the_service_credential_is_an_admin_and_nothing_else_is() {
        let secret = TokenSecret::generate().unwrap();
        let other = TokenSecret::generate().unwrap();
        let auth = Authenticator::on(None, None).with_service_credential(&secret, "default");
        let path = "/toolplane.v1.WorkspaceService/PutAuditObject";
        let value = format!("Bearer {}", secret.expose());
        let caller = auth
            .authorize(path, &headers(&[&value]))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(caller.role, Role::Admin);
        assert_eq!(caller.cell, "default");
        assert_eq!(caller.principal, SERVICE_PRINCIPAL);
        let wrong = format!("Bearer {}", other.expose());
        assert!(auth.authorize(path, &headers(&[&wrong])).await.is_err());
        // Off stays off: the credential changes nothing.
        let off = Authenticator::off("default").with_service_credential(&secret, "x");
        let caller = off
            .authorize(path, &HeaderMap::new())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(caller.kind, CallerKind::AuthOff);
    }

    #[test]
    fn secrets_parse_only_as_toolplane_tokens() {
        let secret = TokenSecret::generate().unwrap();
        let text = format!("  {}\n", secret.expose());
        assert_eq!(TokenSecret::parse(&text).unwrap(), secret);
        for bad in ["", "tp_short", "abc", &format!("tp_{}", "é".repeat(40))] {
            let err = TokenSecret::parse(bad).unwrap_err();
            assert_eq!(err.code(), "auth.invalid_request");
        }
    }
}
