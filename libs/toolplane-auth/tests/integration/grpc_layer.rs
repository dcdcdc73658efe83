//! The auth layer on a real tonic server over loopback: who gets through, who is refused, and
//! what a refused caller is told.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use toolplane_auth::{Authenticator, NewToken, Role};

fn new_token(role: Role, expires_at_unix_ms: Option<u64>) -> NewToken {
    NewToken {
        name: "test".into(),
        cell: "cell-a".into(),
        role,
        expires_at_unix_ms,
    }
}

/// The status of a refused call; fails the test if the call went through.
async fn refused(addr: std::net::SocketAddr, authorization: Option<&str>) -> tonic::Status {
    match echo(addr, authorization).await {
        Ok(payload) => panic!("{authorization:?} was let through as {payload}"),
        Err(status) => status,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_checked_and_the_caller_reaches_the_handler() {
    let tokens = token_store();
    let admin = tokens.create(new_token(Role::Admin, None)).await.unwrap();
    let reader = tokens.create(new_token(Role::Reader, None)).await.unwrap();
    let agent = tokens.create(new_token(Role::Agent, None)).await.unwrap();
    let revoked = tokens.create(new_token(Role::Admin, None)).await.unwrap();
    tokens.revoke(&revoked.info.id).await.unwrap();
    let soon = toolplane_now_ms() + 1_500;
    let expiring = tokens
        .create(new_token(Role::Admin, Some(soon)))
        .await
        .unwrap();
    let server = serve(Authenticator::on(Some(tokens), None)).await;

    // The echo path is in no table row, so it needs an admin.
    let bearer = |secret: &str| format!("Bearer {secret}");
    assert!(
        echo(server.addr, Some(&bearer(expiring.secret.expose())))
            .await
            .is_ok()
    );
    let payload = echo(server.addr, Some(&bearer(admin.secret.expose())))
        .await
        .unwrap();
    assert_eq!(payload, format!("cell-a|admin|{}|Token", admin.info.id));

    let status = refused(server.addr, None).await;
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(
        status.message().starts_with("auth.unauthenticated: "),
        "{status:?}"
    );

    let wrong = format!("tp_{}", "0".repeat(64));
    for secret in [
        wrong.as_str(),
        revoked.secret.expose(),
        "tp_short",
        "not-a-token",
    ] {
        let status = refused(server.addr, Some(&bearer(secret))).await;
        assert_eq!(status.code(), Code::Unauthenticated, "{secret}: {status:?}");
        assert!(!status.message().contains(secret), "{status:?}");
    }
    assert!(
        refused(server.addr, Some(&bearer(revoked.secret.expose())))
            .await
            .message()
            .contains("revoked")
    );
    let basic = refused(server.addr, Some("Basic dXNlcjpwYXNz")).await;
    assert_eq!(basic.code(), Code::Unauthenticated);
    assert!(!basic.message().contains("dXNlcjpwYXNz"));

    for lower in [&reader, &agent] {
        let status = refused(server.addr, Some(&bearer(lower.secret.expose()))).await;
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert!(status.message().starts_with("auth.permission_denied: "));
        assert!(status.message().contains("requires admin"), "{status:?}");
        assert!(!status.message().contains(lower.secret.expose()));
    }

    while toolplane_now_ms() <= soon {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = refused(server.addr, Some(&bearer(expiring.secret.expose()))).await;
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(status.message().contains("expired"), "{status:?}");
}

fn toolplane_now_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(now.unwrap().as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn health_stays_open_without_a_credential() {
    let server = serve(Authenticator::on(Some(token_store()), None)).await;
    let mut health = HealthClient::new(channel(server.addr).await);
    let response = health
        .check(HealthCheckRequest {
            service: "toolplane.testing.v1.EchoService".into(),
        })
        .await
        .unwrap();
    assert_eq!(response.into_inner().status(), ServingStatus::Serving);
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_off_answers_as_a_default_cell_admin() {
    let server = serve(Authenticator::off("default")).await;
    assert_eq!(
        echo(server.addr, None).await.unwrap(),
        "default|admin|anonymous|AuthOff"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn jwts_signed_by_the_jwks_are_accepted_with_their_cell_and_role() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(Authenticator::on(None, Some(jwt_verifier(dir.path())))).await;
    for key in [rsa_key(), ec_key()] {
        let jwt = sign(&key, &claims("cell-j", "admin"));
        assert_eq!(
            echo(server.addr, Some(&format!("Bearer {jwt}")))
                .await
                .unwrap(),
            "cell-j|admin|user-7|Jwt"
        );
    }
    // A list of roles counts its highest known one.
    let mut list = claims("cell-j", "x");
    list["toolplane_role"] = json!(["viewer", "admin", "reader"]);
    assert!(
        echo(
            server.addr,
            Some(&format!("Bearer {}", sign(&ec_key(), &list)))
        )
        .await
        .is_ok()
    );

    let reader = sign(&rsa_key(), &claims("cell-j", "reader"));
    let status = refused(server.addr, Some(&format!("Bearer {reader}"))).await;
    assert_eq!(status.code(), Code::PermissionDenied);
}

#[tokio::test(flavor = "multi_thread")]
async fn jwts_with_a_wrong_issuer_audience_expiry_key_or_claims_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(Authenticator::on(None, Some(jwt_verifier(dir.path())))).await;
    let now = now_secs();
    let mutate = |field: &str, value: serde_json::Value| {
        let mut claims = claims("cell-j", "admin");
        claims[field] = value;
        claims
    };
    let mut no_cell = claims("cell-j", "admin");
    no_cell.as_object_mut().unwrap().remove("toolplane_cell");
    let cases = [
        (
            "wrong issuer",
            sign(&rsa_key(), &mutate("iss", json!("https://evil.test"))),
        ),
        (
            "wrong audience",
            sign(&rsa_key(), &mutate("aud", json!("someone-else"))),
        ),
        // Past the 30 s leeway.
        ("expired", sign(&ec_key(), &mutate("exp", json!(now - 120)))),
        (
            "not yet valid",
            sign(&ec_key(), &mutate("nbf", json!(now + 600))),
        ),
        (
            "unknown key",
            sign(&impostor_key(), &claims("cell-j", "admin")),
        ),
        (
            "unknown role",
            sign(&ec_key(), &mutate("toolplane_role", json!("root"))),
        ),
        ("no cell", sign(&ec_key(), &no_cell)),
        ("garbage", "a.b.c".to_owned()),
        (
            "symmetric algorithm",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &claims("cell-j", "admin"),
                &jsonwebtoken::EncodingKey::from_secret(b"guessable").unwrap(),
            )
            .unwrap(),
        ),
    ];
    for (what, jwt) in cases {
        let status = refused(server.addr, Some(&format!("Bearer {jwt}"))).await;
        assert_eq!(status.code(), Code::Unauthenticated, "{what}: {status:?}");
        assert!(!status.message().contains(&jwt), "{what}: {status:?}");
    }
    let expired = sign(&ec_key(), &mutate("exp", json!(now - 120)));
    let status = refused(server.addr, Some(&format!("Bearer {expired}"))).await;
    assert!(status.message().contains("expired"), "{status:?}");
    // Within the leeway an expiry a few seconds ago still passes.
    let skewed = sign(&ec_key(), &mutate("exp", json!(now - 5)));
    assert!(
        echo(server.addr, Some(&format!("Bearer {skewed}")))
            .await
            .is_ok()
    );
    // A toolplane token with no token store configured is refused as such.
    let status = refused(server.addr, Some("Bearer tp_abc")).await;
    assert_eq!(status.code(), Code::Unauthenticated);
}

/// A token store that fails (a symlink planted in the store root) is the plane's failure:
/// INTERNAL, with the detail (which names stored keys) kept out of the answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_token_store_answers_internal_without_details() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let store = toolplane_store::FsStore::open(&root, toolplane_store::StoreOptions::default())
        .await
        .unwrap();
    let tokens = toolplane_auth::TokenStore::new(std::sync::Arc::new(store));
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), root.join("tokens")).unwrap();
    let server = serve(Authenticator::on(Some(tokens), None)).await;
    let secret = format!("tp_{}", "a".repeat(64));
    let status = refused(server.addr, Some(&format!("Bearer {secret}"))).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(
        status.message(),
        "auth.store: the credential could not be checked"
    );
}
