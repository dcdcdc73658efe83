//! Deciding one request: read the bearer credential, verify it with the token store or the JWKS,
//! and check the path's requirement. Owns which verifier a credential goes to; must never know
//! how the answer travels (gRPC or HTTP: that is [`crate::layer`]).

use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;

use crate::table::{Requirement, requirement};
use crate::token::TOKEN_PREFIX;
use crate::{AuthError, Caller, JwtVerifier, TokenStore};

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
    },
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
            },
        }
    }

    pub fn is_on(&self) -> bool {
        matches!(self.mode, Mode::On { .. })
    }

    /// Who sent these headers.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthError> {
        match &self.mode {
            Mode::Off(caller) => Ok(caller.clone()),
            Mode::On { tokens, jwt } => {
                let credential = bearer(headers)?;
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
        if let Mode::Off(caller) = &self.mode {
            return Ok(Some(caller.clone()));
        }
        match requirement(path) {
            Requirement::Open => Ok(None),
            Requirement::Role(required) => {
                let caller = self.authenticate(headers).await?;
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
}
