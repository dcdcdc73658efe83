//! The token service of the catalog: a token's secret is answered once and never listed; an admin
//! manages the tokens of its own cell only, the default cell's admin those of every cell; another
//! cell's token is not found, exactly like a missing one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use tonic::transport::Channel;
use tonic::{Code, Request};
use toolplane_auth::{Caller, CallerKind, Role};
use toolplane_catalog::tokens::TokenGrpc;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::token_service_client::TokenServiceClient;
use toolplane_proto::v1::token_service_server::TokenService;

fn admin_of(cell: &str) -> Caller {
    Caller {
        cell: cell.into(),
        role: Role::Admin,
        principal: format!("tok_{cell}"),
        kind: CallerKind::Token,
    }
}

fn as_caller<T>(who: &Caller, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(who.clone());
    request
}

fn create(cell: &str, role: &str) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest {
        cell_id: cell.into(),
        role: role.into(),
        name: format!("{cell}-{role}"),
        expires_at_unix_ms: None,
        request_id: String::new(),
    }
}

#[tokio::test]
async fn tokens_are_created_once_listed_without_secrets_and_revoked() {
    let c = start().await;
    let channel = Channel::from_shared(c.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut tokens = TokenServiceClient::new(channel);
    let created = tokens
        .create_token(create("b", "agent"))
        .await
        .unwrap()
        .into_inner();
    assert!(created.secret.starts_with("tp_"), "{}", created.secret);
    let info = created.token.unwrap();
    assert_eq!((info.cell_id.as_str(), info.role.as_str()), ("b", "agent"));
    let listed = tokens
        .list_tokens(pb::ListTokensRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tokens, vec![info.clone()]);
    assert!(!format!("{listed:?}").contains(&created.secret));
    let bad = tokens.create_token(create("b", "root")).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let revoked = tokens
        .revoke_token(pb::RevokeTokenRequest {
            token_id: info.token_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(revoked.token.unwrap().revoked);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_admin_manages_its_own_cells_tokens_and_the_default_cells_admin_every_cells() {
    let c = start().await;
    let store = toolplane_store::MemoryStore::new(toolplane_store::StoreOptions::default());
    let svc = TokenGrpc::new(toolplane_auth::TokenStore::new(std::sync::Arc::new(store)));
    let operator = admin_of("default");
    let a = svc
        .create_token(as_caller(&operator, create("a", "admin")))
        .await
        .unwrap()
        .into_inner()
        .token
        .unwrap();
    let b_admin = admin_of("b");
    let refused = svc
        .create_token(as_caller(&b_admin, create("a", "agent")))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    let own = svc
        .create_token(as_caller(&b_admin, create("", "reader")))
        .await
        .unwrap()
        .into_inner()
        .token
        .unwrap();
    assert_eq!(own.cell_id, "b");

    let seen_by_b = svc
        .list_tokens(as_caller(&b_admin, pb::ListTokensRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seen_by_b.tokens, vec![own.clone()]);
    let seen_by_operator = svc
        .list_tokens(as_caller(&operator, pb::ListTokensRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(seen_by_operator.tokens.len(), 2);

    let revoke = |id: &str| pb::RevokeTokenRequest {
        token_id: id.into(),
    };
    let hidden = svc
        .revoke_token(as_caller(&b_admin, revoke(&a.token_id)))
        .await
        .unwrap_err();
    let missing = svc
        .revoke_token(as_caller(&b_admin, revoke("tok_0000000000000000")))
        .await
        .unwrap_err();
    assert_eq!(hidden.code(), Code::NotFound);
    assert_eq!(
        hidden.message().replace(&a.token_id, "<id>"),
        missing.message().replace("tok_0000000000000000", "<id>")
    );
    let still = svc
        .list_tokens(as_caller(
            &operator,
            pb::ListTokensRequest {
                cell_id: "a".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!still.tokens[0].revoked);
    c.shutdown().await.unwrap();
}
