//! The catalog's admin audit over real sockets with authentication on: every token, host,
//! profile and policy change leaves a record naming the caller's token; only admins read it, and
//! only their own cell's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::register;
use serde_json::json;
use tonic::transport::Channel;
use tonic::{Code, Request};
use toolplane_auth::{Authenticator, NewToken, Role, TokenStore};
use toolplane_catalog::{CatalogConfig, RunningCatalog};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::admin_audit_service_client::AdminAuditServiceClient;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::token_service_client::TokenServiceClient;
use toolplane_store::MemoryStore;

async fn token(tokens: &TokenStore, name: &str, cell: &str, role: Role) -> String {
    tokens
        .create(NewToken {
            name: name.into(),
            cell: cell.into(),
            role,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap()
        .secret
        .expose()
        .to_owned()
}

fn with<T>(secret: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {secret}").parse().unwrap());
    request
}

async fn channel(c: &RunningCatalog) -> Channel {
    Channel::from_shared(c.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn audit_of(
    channel: &Channel,
    secret: &str,
    request: pb::ListAdminAuditRequest,
) -> Result<Vec<pb::AdminAuditRecord>, tonic::Status> {
    let mut client = AdminAuditServiceClient::new(channel.clone());
    let mut records = Vec::new();
    let mut request = request;
    loop {
        let page = client
            .list_admin_audit(with(secret, request.clone()))
            .await?
            .into_inner();
        records.extend(page.records);
        if page.next_page_token.is_empty() {
            return Ok(records);
        }
        request.page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn every_admin_change_is_recorded_with_the_token_name_and_only_its_cells_admins_read_it() {
    let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
    let admin = token(&tokens, "ci-admin", "a", Role::Admin).await;
    let reader = token(&tokens, "dashboard", "a", Role::Reader).await;
    let agent = token(&tokens, "agent-host", "a", Role::Agent).await;
    let other_admin = token(&tokens, "b-admin", "b", Role::Admin).await;
    let auth = Authenticator::on(Some(tokens.clone()), None);
    let c = toolplane_catalog::start_with_auth(CatalogConfig::ephemeral(), auth)
        .await
        .unwrap();
    let ch = channel(&c).await;

    // Tokens.
    let mut token_client = TokenServiceClient::new(ch.clone());
    let made = token_client
        .create_token(with(
            &admin,
            pb::CreateTokenRequest {
                role: "reader".into(),
                name: "temp".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let made_id = made.token.unwrap().token_id;
    token_client
        .revoke_token(with(
            &admin,
            pb::RevokeTokenRequest {
                token_id: made_id.clone(),
            },
        ))
        .await
        .unwrap();
    // Profiles and policies.
    let mut profiles = ProfileServiceClient::new(ch.clone());
    let doc = json!({"id": "writer", "name": "Writer", "description": "Writes.", "tools": {"allow": ["builtin:workspace.*"]}});
    profiles
        .put_profile(with(
            &admin,
            pb::PutProfileRequest {
                profile_json: doc.to_string(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    profiles
        .put_profile(with(
            &admin,
            pb::PutProfileRequest {
                profile_json: doc.to_string(),
                validate_only: true,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    profiles
        .delete_profile(with(
            &admin,
            pb::DeleteProfileRequest {
                profile_id: "writer".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    profiles
        .put_platform_policy(with(
            &admin,
            pb::PutPlatformPolicyRequest {
                policy_json: json!({"disabledTools": ["builtin:dice.roll"]}).to_string(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    profiles
        .put_user_policy(with(
            &admin,
            pb::PutUserPolicyRequest {
                actor_id: "alice@example.com".into(),
                policy_json: json!({"deny": ["ext/crm:export"]}).to_string(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    // External tool hosts (their registration carries a header value that must not show).
    let mut catalog = CatalogServiceClient::new(ch.clone());
    catalog
        .register_tools(with(
            &admin,
            register("crm", "http://127.0.0.1:7001", &["ext/crm:lookup"]),
        ))
        .await
        .unwrap();
    catalog
        .deregister_tools(with(
            &admin,
            pb::DeregisterToolsRequest {
                host_id: "crm".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    // A refused change leaves nothing.
    let refused = profiles
        .put_profile(with(
            &reader,
            pb::PutProfileRequest {
                profile_json: doc.to_string(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);

    let records = audit_of(&ch, &admin, pb::ListAdminAuditRequest::default())
        .await
        .unwrap();
    let seen: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| (r.kind.as_str(), r.rpc.as_str(), r.object_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("token", "CreateToken", made_id.as_str()),
            ("token", "RevokeToken", made_id.as_str()),
            ("profile", "PutProfile", "writer"),
            ("profile", "DeleteProfile", "writer"),
            ("policy", "PutPlatformPolicy", "platform"),
            ("policy", "PutUserPolicy", "user/alice@example.com"),
            ("registration", "RegisterTools", "crm"),
            ("registration", "DeregisterTools", "crm"),
        ]
    );
    for r in &records {
        assert_eq!(
            (r.who.as_str(), r.role.as_str(), r.cell_id.as_str()),
            ("ci-admin", "admin", "a"),
            "{r:?}"
        );
        assert_eq!(
            (r.service.as_str(), r.caller_kind.as_str()),
            ("catalog", "token")
        );
        assert!(r.at_unix_ms > 0 && !r.summary.is_empty());
        assert!(!format!("{r:?}").contains("Bearer secret"), "{r:?}");
    }
    assert!(records.windows(2).all(|w| w[0].record_id < w[1].record_id));

    let policies = audit_of(
        &ch,
        &admin,
        pb::ListAdminAuditRequest {
            kind: "policy".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(policies.len(), 2);
    let later = audit_of(
        &ch,
        &admin,
        pb::ListAdminAuditRequest {
            since_unix_ms: records[7].at_unix_ms,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(later.iter().all(|r| r.at_unix_ms >= records[7].at_unix_ms));
    assert!(later.iter().any(|r| r.rpc == "DeregisterTools"));

    for secret in [&reader, &agent] {
        let refused = audit_of(&ch, secret, pb::ListAdminAuditRequest::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    }
    let b_sees = audit_of(&ch, &other_admin, pb::ListAdminAuditRequest::default())
        .await
        .unwrap();
    assert!(b_sees.is_empty(), "{b_sees:?}");
    let naming_a = audit_of(
        &ch,
        &other_admin,
        pb::ListAdminAuditRequest {
            cell_id: "a".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(naming_a.code(), Code::PermissionDenied);
    c.shutdown().await.unwrap();
}
