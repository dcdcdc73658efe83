//! TLS on the shared start, over real sockets, with a CA, server and client certificates made
//! here: with a client CA, a client without a certificate or with one of another CA is refused
//! at the handshake, a CA-signed client is served as the caller its certificate's SAN URI names
//! (or with its bearer token when the certificate names no one); health stays reachable; and
//! certificate files replaced on disk are what the next connection sees, on both sides, without
//! a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::Endpoint;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use toolplane_auth::{Authenticator, Caller, NewToken, Role, TokenStore};
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};
use toolplane_serve::tls::{PeerTls, ServerTls, peer_channel};
use toolplane_serve::{ServeOptions, Services, Serving};
use toolplane_store::MemoryStore;

/// Answers `cell|role|kind|principal` of the caller the layer inserted.
#[derive(Clone)]
struct WhoAmI;

#[tonic::async_trait]
impl EchoService for WhoAmI {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let who = match request.extensions().get::<Caller>() {
            Some(c) => format!("{}|{}|{:?}|{}", c.cell, c.role, c.kind, c.principal),
            None => "no caller".to_owned(),
        };
        Ok(Response::new(EchoResponse {
            payload: who.into_bytes(),
        }))
    }
}

type Ca = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A certificate of `ca` (PEM certificate, PEM key, DER certificate).
fn leaf(ca: &Ca, name: &str, sans: Vec<SanType>) -> (String, String, CertificateDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.subject_alt_names = sans;
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().clone())
}

fn server_sans() -> Vec<SanType> {
    vec![
        SanType::IpAddress("127.0.0.1".parse().unwrap()),
        SanType::DnsName("localhost".try_into().unwrap()),
    ]
}

fn spiffe(cell: &str, role: &str) -> SanType {
    SanType::URI(
        format!("spiffe://plane.test/cell/{cell}/role/{role}")
            .try_into()
            .unwrap(),
    )
}

/// Writes `text` to `dir/name` the way a Secret volume or a renewal tool would: a new file moved
/// into place.
fn put(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

async fn start(tls: ServerTls, auth: Authenticator) -> Serving {
    let registry = Arc::new(toolplane_telemetry::metrics::Registry::new());
    let options = ServeOptions::new("echo")
        .metrics(TcpListener::bind("127.0.0.1:0").await.unwrap(), registry)
        .auth(auth)
        .tls(Some(tls));
    toolplane_serve::serve(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        Services::new().add_service(EchoServiceServer::new(WhoAmI)),
        options,
    )
    .await
    .unwrap()
}

async fn echo(
    serving: &Serving,
    tls: &PeerTls,
    credential: Option<&str>,
) -> Result<String, Status> {
    let endpoint = Endpoint::from_shared(serving.url()).unwrap();
    let channel = peer_channel(endpoint, Some(tls)).unwrap();
    let mut request = Request::new(EchoRequest { payload: vec![] });
    if let Some(secret) = credential {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {secret}").parse().unwrap());
    }
    let answer = EchoServiceClient::new(channel).echo(request).await?;
    Ok(String::from_utf8(answer.into_inner().payload).unwrap())
}

/// The handshake's failure, not an answer of the authentication layer.
fn refused_at_handshake(result: Result<String, Status>) {
    let status = result.unwrap_err();
    assert!(
        !matches!(
            status.code(),
            Code::Ok | Code::Unauthenticated | Code::PermissionDenied
        ),
        "{status:?}"
    );
}

async fn admin_token(tokens: &TokenStore) -> String {
    tokens
        .create(NewToken {
            name: "admin".to_owned(),
            cell: "tok-cell".to_owned(),
            role: Role::Admin,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap()
        .secret
        .expose()
        .to_owned()
}

/// A TLS client of `addr` trusting `ca_pem`: the certificate the server presented.
async fn server_cert_seen(
    addr: SocketAddr,
    ca_pem: &Path,
    alpn: &[u8],
) -> (
    CertificateDer<'static>,
    tokio_rustls::client::TlsStream<TcpStream>,
) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_file_iter(ca_pem).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let cert = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
    (cert, stream)
}

#[tokio::test]
async fn mtls_serves_the_certificates_identity_and_refuses_other_clients() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plane = ca("plane ca");
    let other = ca("other ca");
    let ca_pem = put(d, "ca.pem", &plane.pem());
    let (cert, key, _) = leaf(&plane, "echo", server_sans());
    let tls = ServerTls::from_files(
        put(d, "server.pem", &cert),
        put(d, "server.key", &key),
        Some(ca_pem.clone()),
    )
    .unwrap();
    let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
    let token = admin_token(&tokens).await;
    let serving = start(tls, Authenticator::on(Some(tokens), None)).await;
    assert!(serving.url().starts_with("https://127.0.0.1:"));

    let (cert, key, _) = leaf(&plane, "runtime", vec![spiffe("c1", "admin")]);
    let admin = PeerTls::from_files(
        ca_pem.clone(),
        Some((put(d, "admin.pem", &cert), put(d, "admin.key", &key))),
    )
    .unwrap();
    assert_eq!(
        echo(&serving, &admin, None).await.unwrap(),
        "c1|admin|Certificate|spiffe://plane.test/cell/c1/role/admin"
    );
    // A credential, when sent, wins over the certificate.
    assert!(
        echo(&serving, &admin, Some(&token))
            .await
            .unwrap()
            .starts_with("tok-cell|admin|Token|")
    );

    // The certificate's role is the caller's role: this echo requires admin.
    let (cert, key, _) = leaf(&plane, "viewer", vec![spiffe("c1", "reader")]);
    let reader = PeerTls::from_files(
        ca_pem.clone(),
        Some((put(d, "reader.pem", &cert), put(d, "reader.key", &key))),
    )
    .unwrap();
    let denied = echo(&serving, &reader, None).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    // A certificate of the CA that names no one: the connection is accepted, each request
    // still needs a credential.
    let (cert, key, _) = leaf(&plane, "anonymous", Vec::new());
    let nameless = PeerTls::from_files(
        ca_pem.clone(),
        Some((put(d, "nameless.pem", &cert), put(d, "nameless.key", &key))),
    )
    .unwrap();
    let refused = echo(&serving, &nameless, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert!(
        echo(&serving, &nameless, Some(&token))
            .await
            .unwrap()
            .starts_with("tok-cell|admin|Token|")
    );

    // No client certificate, or one of another CA (even naming an admin): refused at the
    // handshake, whatever the request carries.
    let bare = PeerTls::from_files(ca_pem.clone(), None).unwrap();
    refused_at_handshake(echo(&serving, &bare, Some(&token)).await);
    let (cert, key, _) = leaf(&other, "intruder", vec![spiffe("c1", "admin")]);
    let intruder = PeerTls::from_files(
        ca_pem.clone(),
        Some((put(d, "intruder.pem", &cert), put(d, "intruder.key", &key))),
    )
    .unwrap();
    refused_at_handshake(echo(&serving, &intruder, Some(&token)).await);

    // Health: over gRPC with the plane's certificate and no credential, and on the HTTP port
    // with TLS and no client certificate at all (as a kubelet probe reaches it).
    let channel = peer_channel(
        Endpoint::from_shared(serving.url()).unwrap(),
        Some(&nameless),
    )
    .unwrap();
    let health = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(health.into_inner().status, 1);
    let (_, mut stream) =
        server_cert_seen(serving.http_addr().unwrap(), &ca_pem, b"http/1.1").await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    serving.shutdown().await.unwrap();
}

#[tokio::test]
async fn replaced_certificate_files_apply_to_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plane = ca("plane ca");
    let ca_pem = put(d, "ca.pem", &plane.pem());
    let (cert, key, first_server) = leaf(&plane, "echo v1", server_sans());
    let tls = ServerTls::from_files(
        put(d, "server.pem", &cert),
        put(d, "server.key", &key),
        Some(ca_pem.clone()),
    )
    .unwrap();
    let serving = start(tls, Authenticator::on(None, None)).await;
    let (cert, key, _) = leaf(&plane, "client v1", vec![spiffe("c1", "admin")]);
    let client = PeerTls::from_files(
        ca_pem.clone(),
        Some((put(d, "client.pem", &cert), put(d, "client.key", &key))),
    )
    .unwrap();
    assert!(
        echo(&serving, &client, None)
            .await
            .unwrap()
            .starts_with("c1|admin|Certificate")
    );
    let (seen, _) = server_cert_seen(serving.http_addr().unwrap(), &ca_pem, b"http/1.1").await;
    assert_eq!(seen, first_server);

    // Renewed: a new server certificate (new key, serial and subject) and a client certificate
    // naming another cell, each written over the old files.
    let (cert, key, second_server) = leaf(&plane, "echo v2", server_sans());
    assert_ne!(second_server, first_server);
    put(d, "server.key", &key);
    put(d, "server.pem", &cert);
    let (cert, key, _) = leaf(&plane, "client v2", vec![spiffe("c2", "admin")]);
    put(d, "client.key", &key);
    put(d, "client.pem", &cert);

    let (seen, _) = server_cert_seen(serving.http_addr().unwrap(), &ca_pem, b"http/1.1").await;
    assert_eq!(seen, second_server);
    // The same PeerTls, a new connection: the new client certificate.
    assert!(
        echo(&serving, &client, None)
            .await
            .unwrap()
            .starts_with("c2|admin|Certificate")
    );

    // A file that cannot be used keeps the last good one.
    put(d, "server.pem", "not a certificate");
    let (seen, _) = server_cert_seen(serving.http_addr().unwrap(), &ca_pem, b"http/1.1").await;
    assert_eq!(seen, second_server);

    serving.shutdown().await.unwrap();
}
