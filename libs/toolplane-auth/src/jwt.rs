//! JWTs from the operator's identity provider. Owns signature checks against a JWKS file
//! (RS256 and ES256 only), the issuer, audience and expiry checks, and reading the caller's cell
//! and role from configurable claims; must never accept an unsigned token, a symmetric (HS*)
//! algorithm or a key the JWKS file does not hold.
//!
//! The JWKS file is re-read when its modification time changes, checked at most once per
//! [`RELOAD_CHECK_INTERVAL`]; a file that no longer parses keeps the previous keys (and logs why),
//! so a half-written rotation never locks everyone out.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::{AuthError, Caller, CallerKind, Role};

/// How often, at most, a verification looks at the JWKS file's modification time.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How to verify JWTs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtConfig {
    /// A JSON Web Key Set file (`{"keys": [...]}`) with the provider's public keys.
    pub jwks_path: PathBuf,
    /// The required `iss` claim.
    pub issuer: String,
    /// The required `aud` claim (one of its values, when it is a list).
    pub audience: String,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// The claim holding the caller's cell (a string).
    pub cell_claim: String,
    /// The claim holding the caller's role: a string, or a list of strings of which the highest
    /// role named counts (other values are ignored).
    pub role_claim: String,
}

impl JwtConfig {
    /// Defaults for everything but the file, issuer and audience: 30 s leeway, claims
    /// `toolplane_cell` and `toolplane_role`.
    pub fn new(jwks_path: impl Into<PathBuf>, issuer: &str, audience: &str) -> JwtConfig {
        JwtConfig {
            jwks_path: jwks_path.into(),
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            leeway_secs: 30,
            cell_claim: "toolplane_cell".to_owned(),
            role_claim: "toolplane_role".to_owned(),
        }
    }
}

/// One usable key of the set.
struct VerifyKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

struct Loaded {
    keys: Vec<VerifyKey>,
    modified: Option<SystemTime>,
}

/// Verifies JWTs against a JWKS file.
pub struct JwtVerifier {
    config: JwtConfig,
    loaded: RwLock<Loaded>,
    last_check: Mutex<Instant>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Reads the JWKS file; fails (`auth.jwks_invalid`) when it cannot be read, does not parse,
    /// or holds no RS256 / ES256 key.
    pub fn new(config: JwtConfig) -> Result<JwtVerifier, AuthError> {
        if jsonwebtoken::crypto::CryptoProvider::try_get_default().is_none() {
            return Err(AuthError::Jwks(
                "no JWT crypto provider is available in this build".into(),
            ));
        }
        let loaded = load(&config.jwks_path)?;
        Ok(JwtVerifier {
            config,
            loaded: RwLock::new(loaded),
            last_check: Mutex::new(Instant::now()),
        })
    }

    pub fn config(&self) -> &JwtConfig {
        &self.config
    }

    /// The caller a JWT stands for: signature by a key of the set, `iss`, `aud`, `exp` (and
    /// `nbf` when present) within the leeway, a `sub`, and the configured cell and role claims.
    pub fn verify(&self, token: &str) -> Result<Caller, AuthError> {
        self.reload_if_changed();
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| AuthError::InvalidCredential)?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(AuthError::InvalidCredential);
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = self.config.leeway_secs;
        validation.validate_nbf = true;

        let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
        let candidates = loaded.keys.iter().filter(|key| {
            key.algorithm == header.alg
                && (header.kid.is_none() || key.kid.as_deref() == header.kid.as_deref())
        });
        let mut outcome = Err(AuthError::InvalidCredential);
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
                Ok(data) => {
                    outcome = Ok(data.claims);
                    break;
                }
                Err(error) => {
                    if matches!(
                        error.kind(),
                        jsonwebtoken::errors::ErrorKind::ExpiredSignature
                    ) {
                        outcome = Err(AuthError::Expired);
                    }
                }
            }
        }
        drop(loaded);
        self.caller(&outcome?)
    }

    fn caller(&self, claims: &Map<String, Value>) -> Result<Caller, AuthError> {
        let missing = |claim: &str| AuthError::MissingClaim {
            claim: claim.chars().take(64).collect(),
        };
        let principal = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|sub| !sub.is_empty())
            .ok_or_else(|| missing("sub"))?;
        let cell = claims
            .get(&self.config.cell_claim)
            .and_then(Value::as_str)
            .filter(|cell| !cell.is_empty())
            .ok_or_else(|| missing(&self.config.cell_claim))?;
        let role = match claims.get(&self.config.role_claim) {
            Some(Value::String(name)) => name.parse::<Role>().ok(),
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(|name| name.as_str()?.parse::<Role>().ok())
                .max(),
            _ => None,
        }
        .ok_or_else(|| missing(&self.config.role_claim))?;
        Ok(Caller {
            cell: cell.to_owned(),
            role,
            principal: principal.to_owned(),
            kind: CallerKind::Jwt,
        })
    }

    /// Re-reads the file if its modification time changed since the last load.
    fn reload_if_changed(&self) {
        {
            let mut last = self.last_check.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() < RELOAD_CHECK_INTERVAL {
                return;
            }
            *last = Instant::now();
        }
        let modified = modified(&self.config.jwks_path);
        let current = self
            .loaded
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .modified;
        if modified == current {
            return;
        }
        match load(&self.config.jwks_path) {
            Ok(loaded) => {
                tracing::info!(path = %self.config.jwks_path.display(), keys = loaded.keys.len(), "jwks reloaded");
                *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = loaded;
            }
            Err(error) => {
                tracing::warn!(path = %self.config.jwks_path.display(), %error, "jwks reload failed; keeping the previous keys");
            }
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn load(path: &Path) -> Result<Loaded, AuthError> {
    let modified = modified(path);
    let text = std::fs::read_to_string(path)
        .map_err(|e| AuthError::Jwks(format!("{}: {e}", path.display())))?;
    let set: JwkSet = serde_json::from_str(&text)
        .map_err(|e| AuthError::Jwks(format!("{}: {e}", path.display())))?;
    let keys: Vec<VerifyKey> = set
        .keys
        .iter()
        .filter_map(|jwk| {
            let algorithm = match (&jwk.common.key_algorithm, &jwk.algorithm) {
                (Some(KeyAlgorithm::RS256), AlgorithmParameters::RSA(_)) => Algorithm::RS256,
                (Some(KeyAlgorithm::ES256), AlgorithmParameters::EllipticCurve(ec))
                    if ec.curve == EllipticCurve::P256 =>
                {
                    Algorithm::ES256
                }
                (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
                (None, AlgorithmParameters::EllipticCurve(ec))
                    if ec.curve == EllipticCurve::P256 =>
                {
                    Algorithm::ES256
                }
                _ => return None,
            };
            Some(VerifyKey {
                kid: jwk.common.key_id.clone(),
                algorithm,
                key: DecodingKey::from_jwk(jwk).ok()?,
            })
        })
        .collect();
    if keys.is_empty() {
        return Err(AuthError::Jwks(format!(
            "{}: no RS256 or ES256 (P-256) key",
            path.display()
        )));
    }
    Ok(Loaded { keys, modified })
}
