//! The auth matrix of a plane started with authentication on: every RPC of every service,
//! enumerated from the wire contract's descriptor set (so none is forgotten), and every HTTP
//! route, called with no credential, a malformed one, a JWT of an unknown key, an expired JWT, a
//! revoked token, reader, agent and admin tokens, and an admin token of another cell. Each answer must be exactly what the role
//! table documents (docs/auth.md): UNAUTHENTICATED / 401 for a bad credential, PERMISSION_DENIED
//! / 403 for a role too low, and anything but those when allowed (the requests are empty, so an
//! allowed call may well fail validation). Health stays open. The admin of another cell is
//! allowed exactly where an admin is: roles are checked by path, and an empty request acts in
//! the credential's own cell (docs/auth.md, "Cells").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use prost_types::FileDescriptorSet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use toolplane::plane::{Plane, PlaneConfig};
use toolplane_auth::{
    Authenticator, JwtConfig, JwtVerifier, NewToken, Requirement, Role, TokenStore, requirement,
};

const ISSUER: &str = "https://idp.example.test";
const AUDIENCE: &str = "toolplane";

/// What a credential must get on a path.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Outcome {
    Unauthenticated,
    PermissionDenied,
    Allowed,
}

struct Credential {
    name: &'static str,
    header: Option<String>,
    /// `None` for a credential that is refused everywhere but on open paths.
    role: Option<Role>,
}

impl Credential {
    fn expected(&self, path: &str) -> Outcome {
        match (requirement(path), self.role) {
            (Requirement::Open, _) => Outcome::Allowed,
            (Requirement::Role(_), None) => Outcome::Unauthenticated,
            (Requirement::Role(need), Some(have)) if have.includes(need) => Outcome::Allowed,
            (Requirement::Role(_), Some(_)) => Outcome::PermissionDenied,
        }
    }
}

fn key(name: &str) -> EncodingKey {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../libs/toolplane-auth/tests/fixtures")
        .join(name);
    EncodingKey::from_ec_der(&std::fs::read(path).unwrap())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn jwt(key: &EncodingKey, exp: u64) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("ec-1".into());
    let claims = serde_json::json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "someone", "exp": exp,
        "toolplane_cell": "default", "toolplane_role": "admin",
    });
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

async fn token(tokens: &TokenStore, cell: &str, role: Role) -> String {
    let created = tokens
        .create(NewToken {
            name: role.as_str().into(),
            cell: cell.into(),
            role,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap();
    created.secret.expose().to_owned()
}

/// Every `/package.Service/Method` of the wire contract, with its service's name.
fn rpcs() -> Vec<(String, String)> {
    let set: FileDescriptorSet =
        prost::Message::decode(toolplane_proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut out = Vec::new();
    for file in set.file {
        for service in &file.service {
            for method in &service.method {
                let service = format!("{}.{}", file.package(), service.name());
                out.push((service.clone(), format!("/{service}/{}", method.name())));
            }
        }
    }
    out
}

/// The gRPC status code of calling `path` with an empty message, or 0 when it answered.
async fn call(channel: &Channel, path: &str, header: Option<&str>) -> i32 {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(());
    if let Some(value) = header {
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        grpc.server_streaming(request, path.parse::<PathAndQuery>().unwrap(), codec),
    )
    .await;
    match answer {
        Ok(Ok(_)) | Err(_) => 0,
        Ok(Err(status)) => status.code() as i32,
    }
}

fn grpc_outcome(code: i32) -> Outcome {
    match code {
        16 => Outcome::Unauthenticated,
        7 => Outcome::PermissionDenied,
        _ => Outcome::Allowed,
    }
}

/// The HTTP status of `GET path`.
async fn http_get(addr: &str, path: &str, header: Option<&str>) -> u16 {
    let addr = addr.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = header
        .map(|h| format!("authorization: {h}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

fn http_outcome(status: u16) -> Outcome {
    match status {
        401 => Outcome::Unauthenticated,
        403 => Outcome::PermissionDenied,
        _ => Outcome::Allowed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_rpc_and_route_answers_each_credential_as_the_role_table_says() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = toolplane_serve::auth::open_token_store(&dir.path().join("auth"))
        .await
        .unwrap();
    let jwks = dir.path().join("jwks.json");
    let mut jwk = Jwk::from_encoding_key(&key("ec-private.pkcs8.der"), Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("ec-1".into());
    std::fs::write(
        &jwks,
        serde_json::to_string(&JwkSet { keys: vec![jwk] }).unwrap(),
    )
    .unwrap();
    let verifier = JwtVerifier::new(JwtConfig::new(&jwks, ISSUER, AUDIENCE)).unwrap();

    let revoked = tokens
        .create(NewToken {
            name: "revoked".into(),
            cell: "default".into(),
            role: Role::Admin,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap();
    tokens.revoke(&revoked.info.id).await.unwrap();
    let bearer = |secret: &str| Some(format!("Bearer {secret}"));
    let credentials = [
        Credential {
            name: "none",
            header: None,
            role: None,
        },
        Credential {
            name: "malformed",
            header: Some("Basic dXNlcjpwdw==".into()),
            role: None,
        },
        Credential {
            name: "jwt of an unknown key",
            header: bearer(&jwt(&key("ec-other-private.pkcs8.der"), now() + 600)),
            role: None,
        },
        Credential {
            name: "expired jwt",
            header: bearer(&jwt(&key("ec-private.pkcs8.der"), now() - 600)),
            role: None,
        },
        Credential {
            name: "revoked",
            header: bearer(revoked.secret.expose()),
            role: None,
        },
        Credential {
            name: "reader",
            header: bearer(&token(&tokens, "default", Role::Reader).await),
            role: Some(Role::Reader),
        },
        Credential {
            name: "agent",
            header: bearer(&token(&tokens, "default", Role::Agent).await),
            role: Some(Role::Agent),
        },
        Credential {
            name: "admin jwt",
            header: bearer(&jwt(&key("ec-private.pkcs8.der"), now() + 600)),
            role: Some(Role::Admin),
        },
        Credential {
            name: "admin",
            header: bearer(&token(&tokens, "default", Role::Admin).await),
            role: Some(Role::Admin),
        },
        Credential {
            name: "admin of another cell",
            header: bearer(&token(&tokens, "other", Role::Admin).await),
            role: Some(Role::Admin),
        },
    ];

    let mut cfg = PlaneConfig::ephemeral(dir.path().join("plane"));
    cfg.auth = Authenticator::on(Some(tokens.clone()), Some(verifier));
    let plane = Plane::up(cfg).await.unwrap();
    let connect =
        |url: String| async move { Channel::from_shared(url).unwrap().connect().await.unwrap() };
    let runtime = connect(plane.runtime_url()).await;
    let catalog = connect(plane.catalog_url()).await;
    let workspace = connect(plane.workspace_url()).await;
    let mcp_proxy = connect(plane.mcp_proxy_url()).await;
    let every = [&runtime, &catalog, &workspace, &mcp_proxy];

    let mut failures = Vec::new();
    let mut checked = 0;
    let health = ["Check", "Watch", "List"].map(|m| {
        (
            "grpc.health.v1.Health".to_owned(),
            format!("/grpc.health.v1.Health/{m}"),
        )
    });
    let reflection = ["v1", "v1alpha"].map(|v| {
        (
            format!("grpc.reflection.{v}.ServerReflection"),
            format!("/grpc.reflection.{v}.ServerReflection/ServerReflectionInfo"),
        )
    });
    let all = rpcs();
    assert!(
        all.len() > 50,
        "the descriptor set lists {} RPCs",
        all.len()
    );
    for (service, path) in all.into_iter().chain(health).chain(reflection) {
        let servers: Vec<&Channel> = match service.as_str() {
            "toolplane.v1.RuntimeService" => vec![&runtime],
            "toolplane.v1.CatalogService" | "toolplane.v1.ProfileService" => vec![&catalog],
            "toolplane.v1.WorkspaceService" => vec![&workspace],
            "toolplane.v1.McpProxyService" => vec![&mcp_proxy],
            "toolplane.v1.ToolExecutor" => vec![&workspace, &mcp_proxy],
            // Health and reflection: on every server. Watch never ends on its own.
            _ if path.ends_with("/Watch") => vec![&runtime],
            _ => every.to_vec(),
        };
        for server in servers {
            for credential in &credentials {
                let got = grpc_outcome(call(server, &path, credential.header.as_deref()).await);
                checked += 1;
                if got != credential.expected(&path) {
                    failures.push(format!(
                        "{path} with {}: {got:?}, documented {:?}",
                        credential.name,
                        credential.expected(&path)
                    ));
                }
            }
        }
    }

    // The console is the runtime's; every other HTTP path is asked of the catalog's port.
    let runtime_http = plane.metrics_urls()[0].clone();
    let mut routes: Vec<(String, &str)> = toolplane_auth::table::HTTP_ROLES
        .iter()
        .map(|(path, _)| {
            let url = if path.starts_with("/console") {
                runtime_http.clone()
            } else {
                plane.catalog_http_url()
            };
            (url, *path)
        })
        .collect();
    for url in plane.metrics_urls() {
        routes.push((url.clone(), "/metrics"));
        routes.push((url, "/healthz"));
    }
    for (url, path) in routes {
        for credential in &credentials {
            let got = http_outcome(http_get(&url, path, credential.header.as_deref()).await);
            checked += 1;
            if got != credential.expected(path) {
                failures.push(format!(
                    "GET {url}{path} with {}: {got:?}, documented {:?}",
                    credential.name,
                    credential.expected(path)
                ));
            }
        }
    }
    plane.shutdown().await;
    assert!(
        failures.is_empty(),
        "{} of {checked}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
