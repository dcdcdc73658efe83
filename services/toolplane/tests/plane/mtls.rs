//! mTLS between the plane's services, end to end: the workspace, the mcp-proxy, the catalog and
//! the runtime each served over TLS with client certificates required, authentication on with
//! no token at all, so the only way in is a certificate of the plane's CA. The runtime calls the
//! workspace, the catalog and the mcp-proxy, and the catalog the mcp-proxy, with their client
//! certificates; a host with its own certificate registers an MCP server, opens an invocation
//! and completes a workspace and an MCP tool call, and a host without one is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::openai_calls;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use serde_json::json;
use tokio::net::TcpListener;
use tonic::transport::{Channel, Endpoint};
use toolplane_auth::Authenticator;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::runtime_service_client::RuntimeServiceClient;
use toolplane_serve::tls::{PeerTls, TlsConfig, peer_channel};
use toolplane_store::{FsStore, Store, StoreExt, StoreOptions};

type Ca = CertifiedIssuer<'static, KeyPair>;

fn ca() -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "plane ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// Writes a certificate of `ca` with `sans` as `<name>.pem` and `<name>.key`.
fn issue(ca: &Ca, dir: &Path, name: &str, sans: Vec<SanType>) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = sans;
    let cert = params.signed_by(&key, ca).unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn admin_of_default() -> SanType {
    SanType::URI(
        "spiffe://plane.test/cell/default/role/admin"
            .try_into()
            .unwrap(),
    )
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

fn https(listener: &TcpListener) -> String {
    format!("https://{}", listener.local_addr().unwrap())
}

#[tokio::test]
async fn runtime_calls_its_peers_over_mtls_with_certificates_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let certs = d.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let plane_ca = ca();
    let ca_pem = certs.join("ca.pem");
    std::fs::write(&ca_pem, plane_ca.pem()).unwrap();
    let server_sans = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let (server_cert, server_key) = issue(&plane_ca, &certs, "server", server_sans);
    let (runtime_cert, runtime_key) = issue(&plane_ca, &certs, "runtime", vec![admin_of_default()]);
    let (catalog_cert, catalog_key) = issue(&plane_ca, &certs, "catalog", vec![admin_of_default()]);
    let (host_cert, host_key) = issue(&plane_ca, &certs, "host", vec![admin_of_default()]);
    let tls = |peer: Option<(&PathBuf, &PathBuf)>| TlsConfig {
        cert_file: Some(server_cert.clone()),
        key_file: Some(server_key.clone()),
        client_ca_file: Some(ca_pem.clone()),
        peer_ca_file: peer.map(|_| ca_pem.clone()),
        peer_cert_file: peer.map(|(c, _)| c.clone()),
        peer_key_file: peer.map(|(_, k)| k.clone()),
    };
    // On, with neither a token store nor a JWKS: only a certificate's identity gets in.
    let auth = Authenticator::on(None, None);
    let (ws_l, mcp_l, catalog_l, runtime_l) =
        (bind().await, bind().await, bind().await, bind().await);

    let ws = toolplane_workspace::Workspace::open(toolplane_workspace::EngineOptions {
        data_dir: d.join("workspace"),
        limits: Default::default(),
    })
    .await
    .unwrap();
    let workspace_url = https(&ws_l);
    let workspace = toolplane_workspace::start_on_with_tls(
        ws_l,
        Arc::new(ws),
        bind().await,
        auth.clone(),
        tls(None).server().unwrap(),
    )
    .await
    .unwrap();

    let fixture = toolplane_testkit::mcp_fixture::fixture_binary().unwrap();
    let mut settings = toolplane_mcp_proxy::ProxySettings::default();
    settings
        .processes
        .allowed_commands
        .push(fixture.to_string_lossy().into_owned());
    let store: Arc<dyn Store> = Arc::new(
        FsStore::open(d.join("mcp-proxy"), StoreOptions::default())
            .await
            .unwrap(),
    );
    let proxy = toolplane_mcp_proxy::McpProxy::open(
        store
            .namespace(toolplane_mcp_proxy::STORE_NAMESPACE)
            .unwrap(),
        settings,
    )
    .await
    .unwrap();
    let mcp_url = https(&mcp_l);
    let mcp_proxy = toolplane_mcp_proxy::start_on_with_tls(
        mcp_l,
        proxy,
        None,
        auth.clone(),
        tls(None).server().unwrap(),
    )
    .await
    .unwrap();

    let catalog_config = toolplane_catalog::CatalogConfig {
        store: toolplane_catalog::StoreConfig::Fs {
            root: d.join("catalog"),
        },
        mcp_proxy_url: Some(mcp_url.clone()),
        tls: tls(Some((&catalog_cert, &catalog_key))),
        ..Default::default()
    };
    let catalog_url = https(&catalog_l);
    let catalog_store = toolplane_catalog::open_store(&catalog_config.store)
        .await
        .unwrap();
    let catalog = toolplane_catalog::start_on(
        catalog_config,
        catalog_store,
        catalog_l,
        bind().await,
        auth.clone(),
    )
    .await
    .unwrap();

    let runtime_config = toolplane_runtime::RuntimeConfig {
        catalog_url: catalog_url.clone(),
        workspace_url,
        mcp_proxy_url: mcp_url.clone(),
        data_dir: d.join("runtime"),
        tls: tls(Some((&runtime_cert, &runtime_key))),
        ..Default::default()
    };
    let runtime_url = https(&runtime_l);
    let runtime = toolplane_runtime::start_on(runtime_config, runtime_l, auth)
        .await
        .unwrap();

    // The agent host, with its own certificate of the plane's CA.
    let host = PeerTls::from_files(ca_pem.clone(), Some((host_cert, host_key))).unwrap();
    let connect = |url: &str, tls: &PeerTls| -> Channel {
        peer_channel(Endpoint::from_shared(url.to_owned()).unwrap(), Some(tls)).unwrap()
    };
    let server_id = McpProxyServiceClient::new(connect(&mcp_url, &host))
        .upsert_server(pb::UpsertServerRequest {
            display_name: "fixture".into(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                    command: fixture.to_string_lossy().into_owned(),
                    ..Default::default()
                })),
            }),
            default_permission: pb::McpToolPermission::Allow as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .server
        .unwrap()
        .server_id;
    assert!(!server_id.is_empty());
    // The catalog pulls the mcp-proxy's tools with its own certificate.
    CatalogServiceClient::new(connect(&catalog_url, &host))
        .refresh_sources(pb::RefreshSourcesRequest {
            cell_id: String::new(),
        })
        .await
        .unwrap();
    ProfileServiceClient::new(connect(&catalog_url, &host))
        .put_profile(pb::PutProfileRequest {
            profile_id: "tls".into(),
            profile_json: json!({"id": "tls", "tools": {"allow": ["builtin:workspace.*", "mcp:fixture/echo"]}})
                .to_string(),
            ..Default::default()
        })
        .await
        .unwrap();

    let mut rt = RuntimeServiceClient::new(connect(&runtime_url, &host));
    let run = rt
        .create_run(pb::CreateRunRequest {
            profile_id: "tls".into(),
            mode: pb::RunMode::Background as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;
    let opened = rt
        .open_invocation(pb::OpenInvocationRequest {
            run_id: run,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let done = rt
        .execute_tool_calls(pb::ExecuteToolCallsRequest {
            invocation_id: opened.invocation_id,
            turn_id: opened.first_turn.unwrap().turn_id,
            provider_format: pb::ProviderFormat::OpenaiChat as i32,
            calls_json: openai_calls(&[
                (
                    "c1",
                    "workspace_write_file",
                    json!({"path": "output/tls.md", "content": "over mTLS\n"}),
                ),
                (
                    "c2",
                    "workspace_read_file",
                    json!({"path": "output/tls.md"}),
                ),
                (
                    "c3",
                    "mcp__fixture__echo",
                    json!({"text": "hello over mTLS"}),
                ),
            ])
            .to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let codes: Vec<Option<&str>> = done
        .results
        .iter()
        .map(|r| r.error_code.as_deref())
        .collect();
    assert_eq!(codes, [None, None, None], "{:?}", done.results);
    assert!(
        done.result_messages_json.contains("over mTLS")
            && done.result_messages_json.contains("hello over mTLS"),
        "{}",
        done.result_messages_json
    );

    // A host without a certificate does not get past the handshake.
    let bare = PeerTls::from_files(ca_pem, None).unwrap();
    let refused = RuntimeServiceClient::new(connect(&runtime_url, &bare))
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap_err();
    assert!(
        !matches!(
            refused.code(),
            tonic::Code::Ok | tonic::Code::Unauthenticated
        ),
        "{refused:?}"
    );

    runtime.shutdown().await;
    catalog.shutdown().await.unwrap();
    mcp_proxy.shutdown().await.unwrap();
    workspace.shutdown().await.unwrap();
}
