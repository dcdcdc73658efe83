//! The caller a connection's transport vouches for (a verified client certificate): used only
//! for a request that sends no credential, under the same role check, never in place of a bad
//! credential, and never read on open paths.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use toolplane_auth::{Authenticator, Caller, CallerKind, Role, SERVICE_PRINCIPAL, TokenSecret};

fn headers(values: &[&str]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for value in values {
        map.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
    }
    map
}

#[tokio::test]
async fn a_transport_caller_stands_in_only_for_a_missing_credential() {
    let secret = TokenSecret::generate().unwrap();
    let auth = Authenticator::on(None, None).with_service_credential(&secret, "default");
    let path = "/toolplane.v1.WorkspaceService/PutAuditObject";
    let certificate = |role| Caller {
        cell: "c1".to_owned(),
        role,
        principal: "spiffe://d/cell/c1/role/x".to_owned(),
        kind: CallerKind::Certificate,
    };
    let admin = certificate(Role::Admin);
    let caller = auth
        .authorize_with(path, &HeaderMap::new(), Some(&admin))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(caller, admin);
    // Its role is checked like any caller's.
    let reader = certificate(Role::Reader);
    let err = auth
        .authorize_with(path, &HeaderMap::new(), Some(&reader))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "auth.permission_denied");
    // A credential sent wins, and a bad one is refused rather than replaced.
    let value = format!("Bearer {}", secret.expose());
    let caller = auth
        .authorize_with(path, &headers(&[&value]), Some(&reader))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(caller.principal, SERVICE_PRINCIPAL);
    assert!(
        auth.authorize_with(path, &headers(&["Bearer tp_bad"]), Some(&admin))
            .await
            .is_err()
    );
    // Open paths read nothing.
    let health = "/grpc.health.v1.Health/Check";
    let none = HeaderMap::new();
    let open = auth.authorize_with(health, &none, Some(&admin)).await;
    assert!(open.unwrap().is_none());
}
