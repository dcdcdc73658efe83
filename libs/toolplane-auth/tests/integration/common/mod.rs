//! Shared test plumbing: an echo service behind the auth layer on a real loopback socket, token
//! stores and JWTs signed with the committed test keys.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test fixtures fail loudly

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use toolplane_auth::{AuthLayer, Authenticator, Caller, JwtConfig, JwtVerifier, TokenStore};
use toolplane_proto::testing::v1::echo_service_client::EchoServiceClient;
use toolplane_proto::testing::v1::echo_service_server::{EchoService, EchoServiceServer};
use toolplane_proto::testing::v1::{EchoRequest, EchoResponse};
use toolplane_store::MemoryStore;

pub const ISSUER: &str = "https://idp.example.test";
pub const AUDIENCE: &str = "toolplane";

/// Echoes who called: `cell|role|principal|kind` of the `Caller` the layer inserted.
#[derive(Debug, Default, Clone, Copy)]
pub struct WhoAmI;

#[tonic::async_trait]
impl EchoService for WhoAmI {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoResponse>, Status> {
        let payload = match request.extensions().get::<Caller>() {
            Some(c) => format!("{}|{}|{}|{:?}", c.cell, c.role, c.principal, c.kind),
            None => "no caller".to_owned(),
        };
        Ok(Response::new(EchoResponse {
            payload: payload.into_bytes(),
        }))
    }
}

/// A server with the echo and gRPC health behind `AuthLayer`; dropped sender stops it.
pub struct Served {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

pub async fn serve(auth: Authenticator) -> Served {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<EchoServiceServer<WhoAmI>>().await;
    let routes = Routes::new(health).add_service(EchoServiceServer::new(WhoAmI));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = Server::builder()
        .layer(AuthLayer::new(auth))
        .add_routes(routes)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
            let _ = stopped.await;
        });
    tokio::spawn(server);
    Served { addr, _stop: stop }
}

pub async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Calls Echo with `authorization` set to `credential` (none when `None`).
pub async fn echo(addr: SocketAddr, authorization: Option<&str>) -> Result<String, Status> {
    let mut client = EchoServiceClient::new(channel(addr).await);
    let mut request = Request::new(EchoRequest { payload: vec![] });
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    let response = client.echo(request).await?;
    Ok(String::from_utf8(response.into_inner().payload).unwrap())
}

pub fn token_store() -> TokenStore {
    TokenStore::new(Arc::new(MemoryStore::default()))
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// A test signing key with its algorithm and `kid`.
pub struct TestKey {
    pub kid: &'static str,
    pub algorithm: Algorithm,
    pub key: EncodingKey,
}

pub fn rsa_key() -> TestKey {
    TestKey {
        kid: "rsa-1",
        algorithm: Algorithm::RS256,
        key: EncodingKey::from_rsa_der(&fixture("rsa-private.pkcs1.der")),
    }
}

pub fn ec_key() -> TestKey {
    TestKey {
        kid: "ec-1",
        algorithm: Algorithm::ES256,
        key: EncodingKey::from_ec_der(&fixture("ec-private.pkcs8.der")),
    }
}

/// A P-256 key the JWKS does not hold, but claiming the `kid` of [`ec_key`].
pub fn impostor_key() -> TestKey {
    TestKey {
        kid: "ec-1",
        algorithm: Algorithm::ES256,
        key: EncodingKey::from_ec_der(&fixture("ec-other-private.pkcs8.der")),
    }
}

/// The public JWKS of `keys`, as file text.
pub fn jwks(keys: &[&TestKey]) -> String {
    let keys = keys
        .iter()
        .map(|k| {
            let mut jwk = Jwk::from_encoding_key(&k.key, k.algorithm).unwrap();
            jwk.common.key_id = Some(k.kid.to_owned());
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).unwrap()
}

/// Writes the JWKS of the RSA and EC test keys to `dir/jwks.json` and builds a verifier.
pub fn jwt_verifier(dir: &Path) -> JwtVerifier {
    let path = dir.join("jwks.json");
    std::fs::write(&path, jwks(&[&rsa_key(), &ec_key()])).unwrap();
    JwtVerifier::new(JwtConfig::new(path, ISSUER, AUDIENCE)).unwrap()
}

/// Claims valid for an hour: `sub`, issuer, audience, cell and role.
pub fn claims(cell: &str, role: &str) -> Value {
    let now = now_secs();
    json!({
        "sub": "user-7",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 3600,
        "toolplane_cell": cell,
        "toolplane_role": role,
    })
}

pub fn sign(key: &TestKey, claims: &Value) -> String {
    let mut header = Header::new(key.algorithm);
    header.kid = Some(key.kid.to_owned());
    jsonwebtoken::encode(&header, claims, &key.key).unwrap()
}
