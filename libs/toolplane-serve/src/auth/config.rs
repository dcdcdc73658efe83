//! The `[auth]` section of a service's TOML configuration file: the same settings as the
//! authentication flags ([`super::AuthArgs`]), for operators who configure a service by file
//! (docs/auth.md, "In a configuration file"). Flags and their environment variables override the
//! file. Owns only the merge; what the settings mean is [`super::AuthArgs`]'s.
//!
//! The loud `--insecure-no-auth-on-network` has no file equivalent on purpose: serving beyond
//! loopback without authentication stays a decision made on the command line, where it is seen.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::AuthArgs;

/// `[auth]` in a service's configuration file; every key is optional and unknown keys are
/// refused by the file's parser.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// `--auth`: require a credential on everything but health.
    pub enabled: bool,
    /// `--auth-tokens`: the token store's directory.
    pub tokens_dir: Option<PathBuf>,
    /// `--auth-jwks`: the identity provider's JWKS file.
    pub jwks_file: Option<PathBuf>,
    /// `--auth-issuer`.
    pub issuer: Option<String>,
    /// `--auth-audience`.
    pub audience: Option<String>,
    /// `--auth-cell-claim`.
    pub cell_claim: Option<String>,
    /// `--auth-role-claim`.
    pub role_claim: Option<String>,
    /// `--auth-service-token-file`.
    pub service_token_file: Option<PathBuf>,
    /// `--auth-token-cache-ms`.
    pub token_cache_ms: Option<u64>,
}

impl AuthArgs {
    /// These flags over a file's `[auth]`: a flag (or its environment variable) that is given
    /// wins, a missing one takes the file's value. `--auth` can only switch authentication on:
    /// it is on when the flag or the file says so.
    #[must_use]
    pub fn over(&self, file: &AuthConfig) -> AuthArgs {
        AuthArgs {
            auth: self.auth || file.enabled,
            insecure_no_auth_on_network: self.insecure_no_auth_on_network,
            auth_tokens: self.auth_tokens.clone().or_else(|| file.tokens_dir.clone()),
            auth_jwks: self.auth_jwks.clone().or_else(|| file.jwks_file.clone()),
            auth_issuer: self.auth_issuer.clone().or_else(|| file.issuer.clone()),
            auth_audience: self.auth_audience.clone().or_else(|| file.audience.clone()),
            auth_cell_claim: self
                .auth_cell_claim
                .clone()
                .or_else(|| file.cell_claim.clone()),
            auth_role_claim: self
                .auth_role_claim
                .clone()
                .or_else(|| file.role_claim.clone()),
            auth_service_token_file: self
                .auth_service_token_file
                .clone()
                .or_else(|| file.service_token_file.clone()),
            auth_token_cache_ms: self.auth_token_cache_ms.or(file.token_cache_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> AuthConfig {
        AuthConfig {
            enabled: true,
            tokens_dir: Some("/file/tokens".into()),
            jwks_file: Some("/file/jwks.json".into()),
            issuer: Some("https://file.example".into()),
            audience: Some("file-aud".into()),
            cell_claim: Some("file_cell".into()),
            role_claim: Some("file_role".into()),
            service_token_file: Some("/file/service-token".into()),
            token_cache_ms: Some(250),
        }
    }

    #[test]
    fn the_file_fills_what_no_flag_gives() {
        let merged = AuthArgs::default().over(&file());
        assert!(merged.auth);
        assert!(!merged.insecure_no_auth_on_network);
        assert_eq!(merged.auth_tokens, Some("/file/tokens".into()));
        assert_eq!(merged.auth_jwks, Some("/file/jwks.json".into()));
        assert_eq!(merged.auth_issuer.as_deref(), Some("https://file.example"));
        assert_eq!(merged.auth_audience.as_deref(), Some("file-aud"));
        assert_eq!(merged.auth_cell_claim.as_deref(), Some("file_cell"));
        assert_eq!(merged.auth_role_claim.as_deref(), Some("file_role"));
        assert_eq!(
            merged.auth_service_token_file,
            Some("/file/service-token".into())
        );
        assert_eq!(merged.auth_token_cache_ms, Some(250));
    }

    #[test]
    fn flags_override_the_file() {
        let flags = AuthArgs {
            auth: false,
            insecure_no_auth_on_network: false,
            auth_tokens: Some("/flag/tokens".into()),
            auth_jwks: Some("/flag/jwks.json".into()),
            auth_issuer: Some("https://flag.example".into()),
            auth_audience: Some("flag-aud".into()),
            auth_cell_claim: Some("flag_cell".into()),
            auth_role_claim: Some("flag_role".into()),
            auth_service_token_file: Some("/flag/service-token".into()),
            auth_token_cache_ms: Some(0),
        };
        let merged = flags.over(&file());
        // Switched on by the file: a flag cannot switch it off.
        assert!(merged.auth);
        assert_eq!(merged.auth_tokens, Some("/flag/tokens".into()));
        assert_eq!(merged.auth_jwks, Some("/flag/jwks.json".into()));
        assert_eq!(merged.auth_issuer.as_deref(), Some("https://flag.example"));
        assert_eq!(merged.auth_audience.as_deref(), Some("flag-aud"));
        assert_eq!(merged.auth_cell_claim.as_deref(), Some("flag_cell"));
        assert_eq!(merged.auth_role_claim.as_deref(), Some("flag_role"));
        assert_eq!(
            merged.auth_service_token_file,
            Some("/flag/service-token".into())
        );
        assert_eq!(merged.auth_token_cache_ms, Some(0));
    }

    #[test]
    fn an_empty_section_changes_nothing() {
        let flags = AuthArgs {
            auth: true,
            auth_issuer: Some("https://flag.example".into()),
            ..AuthArgs::default()
        };
        let merged = flags.over(&AuthConfig::default());
        assert!(merged.auth);
        assert_eq!(merged.auth_issuer.as_deref(), Some("https://flag.example"));
        assert_eq!(merged.auth_tokens, None);
        assert_eq!(merged.auth_cell_claim, None);
    }
}
