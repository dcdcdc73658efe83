//! The JWKS file is re-read when it changes; a broken rewrite keeps the previous keys.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use std::time::Duration;

use common::*;
use toolplane_auth::{JwtConfig, JwtVerifier};

#[tokio::test]
async fn a_rotated_jwks_file_is_picked_up_and_a_broken_one_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let verifier = jwt_verifier(dir.path());
    let by_rsa = sign(&rsa_key(), &claims("c", "reader"));
    let by_other = sign(&impostor_key(), &claims("c", "reader"));
    assert!(verifier.verify(&by_rsa).is_ok());
    assert!(verifier.verify(&by_other).is_err());

    // Rotate: the RSA key goes, the other EC key comes (under the same kid as before).
    std::fs::write(dir.path().join("jwks.json"), jwks(&[&impostor_key()])).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(verifier.verify(&by_other).is_ok());
    assert!(verifier.verify(&by_rsa).is_err());

    // A half-written file keeps the keys that worked.
    std::fs::write(dir.path().join("jwks.json"), "{\"keys\": [").unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(verifier.verify(&by_other).is_ok());
}

#[test]
fn a_jwks_file_without_a_usable_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    for text in [
        "not json",
        "{\"keys\": []}",
        "{\"keys\": [{\"kty\": \"oct\", \"k\": \"c2VjcmV0\"}]}",
    ] {
        std::fs::write(&path, text).unwrap();
        let err = JwtVerifier::new(JwtConfig::new(&path, ISSUER, AUDIENCE)).unwrap_err();
        assert_eq!(err.code(), "auth.jwks_invalid", "{text}: {err}");
    }
    let missing = JwtVerifier::new(JwtConfig::new(
        dir.path().join("nope.json"),
        ISSUER,
        AUDIENCE,
    ));
    assert_eq!(missing.unwrap_err().code(), "auth.jwks_invalid");
}

#[test]
fn claim_names_are_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&[&ec_key()])).unwrap();
    let mut config = JwtConfig::new(&path, ISSUER, AUDIENCE);
    config.cell_claim = "https://example.test/tenant".into();
    config.role_claim = "roles".into();
    let verifier = JwtVerifier::new(config).unwrap();
    let mut custom = claims("ignored", "ignored");
    custom["https://example.test/tenant"] = "tenant-9".into();
    custom["roles"] = serde_json::json!(["agent"]);
    let caller = verifier.verify(&sign(&ec_key(), &custom)).unwrap();
    assert_eq!(
        (caller.cell.as_str(), caller.role.as_str()),
        ("tenant-9", "agent")
    );
    assert!(
        verifier
            .verify(&sign(&ec_key(), &claims("c", "admin")))
            .is_err()
    );
}
