//! The mcp-proxy's admin audit with authentication on: registering, pausing, setting a tool's
//! permission and removing a server each leave a record naming the caller's token, without a
//! header value; only admins read it, and only their own cell's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::http;
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::{Code, Request};
use toolplane_auth::{Authenticator, NewToken, Role, TokenStore};
use toolplane_mcp_proxy::{McpProxy, ProxySettings, STORE_NAMESPACE};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::admin_audit_service_client::AdminAuditServiceClient;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_store::{MemoryStore, Store, StoreExt as _};

const HEADER_SECRET: &str = "Bearer header-secret-51c0";

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

async fn audit(
    channel: &Channel,
    secret: &str,
) -> Result<Vec<pb::AdminAuditRecord>, tonic::Status> {
    let page = AdminAuditServiceClient::new(channel.clone())
        .list_admin_audit(with(secret, pb::ListAdminAuditRequest::default()))
        .await?
        .into_inner();
    assert!(page.next_page_token.is_empty());
    Ok(page.records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_changes_are_recorded_with_the_token_name_for_the_cells_admins_only() {
    let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
    let admin = token(&tokens, "ops", "a", Role::Admin).await;
    let reader = token(&tokens, "dashboard", "a", Role::Reader).await;
    let agent = token(&tokens, "agent-host", "a", Role::Agent).await;
    let other_admin = token(&tokens, "b-admin", "b", Role::Admin).await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let proxy = McpProxy::open(
        store.namespace(STORE_NAMESPACE).unwrap(),
        ProxySettings::default(),
    )
    .await
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let auth = Authenticator::on(Some(tokens.clone()), None);
    let serving = toolplane_mcp_proxy::start_on(listener, proxy, None, auth)
        .await
        .unwrap();
    let channel = Channel::from_shared(format!("http://{}", serving.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut admin_client = McpProxyServiceClient::new(channel.clone());

    let mut remote = http("http://127.0.0.1:9/mcp");
    if let Some(pb::mcp_transport::Kind::StreamableHttp(t)) = remote.kind.as_mut() {
        t.headers
            .insert("authorization".into(), HEADER_SECRET.to_owned());
    }
    let server = admin_client
        .upsert_server(with(
            &admin,
            pb::UpsertServerRequest {
                display_name: "remote".into(),
                transport: Some(remote),
                skip_refresh: true,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap();
    let id = server.server_id.clone();
    admin_client
        .set_server_state(with(
            &admin,
            pb::SetServerStateRequest {
                server_id: id.clone(),
                state: pb::McpServerState::Paused as i32,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    admin_client
        .set_tool_permission(with(
            &admin,
            pb::SetToolPermissionRequest {
                server_id: id.clone(),
                native_name: "search".into(),
                permission: pb::McpToolPermission::Off as i32,
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    admin_client
        .deregister_server(with(
            &admin,
            pb::DeregisterServerRequest {
                server_id: id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();

    let records = audit(&channel, &admin).await.unwrap();
    let rpcs: Vec<&str> = records.iter().map(|r| r.rpc.as_str()).collect();
    assert_eq!(
        rpcs,
        [
            "UpsertServer",
            "SetServerState",
            "SetToolPermission",
            "DeregisterServer"
        ]
    );
    for r in &records {
        assert_eq!(
            (
                r.who.as_str(),
                r.kind.as_str(),
                r.cell_id.as_str(),
                r.object_id.as_str(),
                r.service.as_str()
            ),
            ("ops", "registration", "a", id.as_str(), "mcp-proxy"),
            "{r:?}"
        );
        assert!(!format!("{r:?}").contains("header-secret"), "{r:?}");
    }
    for secret in [&reader, &agent] {
        let refused = audit(&channel, secret).await.unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied);
    }
    assert!(audit(&channel, &other_admin).await.unwrap().is_empty());
    serving.shutdown().await.unwrap();
}
