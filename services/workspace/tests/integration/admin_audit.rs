//! The workspace's admin audit over a real socket with the auth layer mounted: importing and
//! deleting a skill each leave a record naming the caller's token; only admins read it, and only
//! their own cell's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request};
use toolplane_auth::{AuthLayer, Authenticator, NewToken, Role, TokenStore};
use toolplane_proto::v1::admin_audit_service_client::AdminAuditServiceClient;
use toolplane_proto::v1::{self as pb, workspace_service_client::WorkspaceServiceClient};
use toolplane_serve::MessageLimits;
use toolplane_store::{FsStore, MemoryStore, StoreOptions};
use toolplane_workspace::{Workspace, limits::Limits, tree::NoHooks};

async fn serve(tokens: &TokenStore) -> (SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    let store = FsStore::open(data.join("store"), StoreOptions::default())
        .await
        .unwrap();
    let ws = Arc::new(
        Workspace::open_on_disk(data, Arc::new(store), Limits::default(), Arc::new(NoHooks))
            .await
            .unwrap(),
    );
    let (routes, _) = toolplane_workspace::services_naming(ws, Some(tokens.clone()))
        .into_routes(MessageLimits::default())
        .await;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .layer(AuthLayer::new(Authenticator::on(
                Some(tokens.clone()),
                None,
            )))
            .add_routes(routes)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    (addr, dir)
}

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

fn skill_folder(root: &Path) {
    std::fs::write(
        root.join("SKILL.md"),
        "---\nname: travel\ndescription: \"Plan trips\"\n---\n# Travel\nUse the checklist.\n",
    )
    .unwrap();
}

async fn audit(
    channel: &Channel,
    secret: &str,
) -> Result<Vec<pb::AdminAuditRecord>, tonic::Status> {
    Ok(AdminAuditServiceClient::new(channel.clone())
        .list_admin_audit(with(secret, pb::ListAdminAuditRequest::default()))
        .await?
        .into_inner()
        .records)
}

#[tokio::test(flavor = "multi_thread")]
async fn skill_imports_and_deletions_are_recorded_for_the_cells_admins_only() {
    let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
    let admin = token(&tokens, "skills-admin", "a", Role::Admin).await;
    let reader = token(&tokens, "dashboard", "a", Role::Reader).await;
    let agent = token(&tokens, "agent-host", "a", Role::Agent).await;
    let other_admin = token(&tokens, "b-admin", "b", Role::Admin).await;
    let (addr, _dir) = serve(&tokens).await;
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut storage = WorkspaceServiceClient::new(channel.clone());
    let src = tempfile::tempdir().unwrap();
    skill_folder(src.path());
    storage
        .import_skill(with(
            &admin,
            pb::ImportSkillRequest {
                source_path: src.path().display().to_string(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();
    storage
        .delete_skill(with(
            &admin,
            pb::DeleteSkillRequest {
                name: "travel".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap();

    let records = audit(&channel, &admin).await.unwrap();
    let seen: Vec<(&str, &str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r.rpc.as_str(),
                r.kind.as_str(),
                r.object_id.as_str(),
                r.who.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ImportSkill", "skill", "travel", "skills-admin"),
            ("DeleteSkill", "skill", "travel", "skills-admin"),
        ]
    );
    assert!(
        records
            .iter()
            .all(|r| r.cell_id == "a" && r.service == "workspace")
    );
    for secret in [&reader, &agent] {
        let refused = audit(&channel, secret).await.unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied);
    }
    assert!(audit(&channel, &other_admin).await.unwrap().is_empty());
}
