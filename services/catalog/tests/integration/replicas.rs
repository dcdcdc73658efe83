//! Two catalog processes over one PostgreSQL store are replicas: a registration or profile written
//! through one is what the other lists and resolves on its very next request, long before its
//! periodic refresh (set to an hour here) would have read it (docs/deploy.md, "Scaling out").
//! The PostgreSQL server is the store tests' own harness (`pg_server`), started by this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../../libs/toolplane-store/tests/pg_server/mod.rs"]
mod pg_server;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tonic::transport::Channel;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;

/// A catalog process, killed when dropped so a failed assertion leaves nothing running.
struct Replica {
    child: Child,
    url: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts `toolplane-catalog` with a `[store]` of kind `postgres` on `table` and waits until it
/// answers gRPC.
async fn replica(dir: &Path, name: &str, socket_dir: &Path, table: &str) -> Replica {
    let (grpc, http) = (free_port(), free_port());
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{http}\"\n\
             refresh_interval_ms = 3600000\n\
             [store]\nkind = \"postgres\"\n\
             connection = \"host={} port=5432 user=postgres dbname=postgres\"\n\
             table = \"{table}\"\n",
            socket_dir.display()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolplane-catalog"));
    command
        .arg("--config")
        .arg(&config)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for var in [
        "TOOLPLANE_AUTH",
        "TOOLPLANE_AUTH_TOKENS",
        "TOOLPLANE_CATALOG_CONFIG",
        "TOOLPLANE_CATALOG_DATA_DIR",
        "TOOLPLANE_CATALOG_MEMORY_STORE",
        "TOOLPLANE_CATALOG_LISTEN",
        "TOOLPLANE_CATALOG_HTTP_LISTEN",
        "TOOLPLANE_CATALOG_PROFILES_DIR",
        "TOOLPLANE_CATALOG_REFRESH_INTERVAL_MS",
        "TOOLPLANE_CATALOG_MCP_PROXY_URL",
        "PGPASSWORD",
    ] {
        command.env_remove(var);
    }
    let mut replica = Replica {
        child: command.spawn().unwrap(),
        url: format!("http://127.0.0.1:{grpc}"),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = replica.child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(replica.child.stderr.as_mut().unwrap(), &mut stderr)
                .unwrap();
            panic!("catalog {name} exited with {status}: {stderr}");
        }
        if Channel::from_shared(replica.url.clone())
            .unwrap()
            .connect()
            .await
            .is_ok()
        {
            return replica;
        }
        assert!(
            Instant::now() < deadline,
            "catalog {name} not serving after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn clients(r: &Replica) -> (CatalogServiceClient<Channel>, ProfileServiceClient<Channel>) {
    let channel = Channel::from_shared(r.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    (
        CatalogServiceClient::new(channel.clone()),
        ProfileServiceClient::new(channel),
    )
}

fn register(host: &str, tools: &[&str]) -> pb::RegisterToolsRequest {
    pb::RegisterToolsRequest {
        host_id: host.into(),
        display_name: format!("{host} host"),
        endpoint: Some(pb::ExecutorEndpoint {
            url: "http://127.0.0.1:7001".into(),
            timeout_ms: 5000,
            max_concurrent_calls: 4,
            ..Default::default()
        }),
        tools: tools
            .iter()
            .map(|id| pb::ToolRegistration {
                descriptor: Some(pb::ToolDescriptor {
                    id: (*id).into(),
                    description: format!("Does {id}."),
                    input_schema_json: json!({"type": "object"}).to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn put(profile: serde_json::Value) -> pb::PutProfileRequest {
    pb::PutProfileRequest {
        profile_json: profile.to_string(),
        ..Default::default()
    }
}

async fn resolved_tools(p: &mut ProfileServiceClient<Channel>, id: &str) -> (u64, Vec<String>) {
    let r = p
        .resolve_profile(pb::ResolveProfileRequest {
            profile_id: id.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ids = r
        .tools
        .iter()
        .map(|t| t.descriptor.as_ref().unwrap().id.clone())
        .collect();
    (r.profile.unwrap().version, ids)
}

async fn listed(c: &mut CatalogServiceClient<Channel>) -> Vec<String> {
    let page = c
        .list_tools(pb::ListToolsRequest {
            sources: vec![pb::ToolSource::External as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    page.tools
        .iter()
        .map(|t| t.descriptor.as_ref().unwrap().id.clone())
        .collect()
}

#[tokio::test]
async fn a_write_through_one_replica_is_what_the_other_serves_next() {
    let server = pg_server::server().await;
    let dir = tempfile::tempdir().unwrap();
    let a = replica(dir.path(), "a", &server.dir, "catalog_replicas").await;
    let b = replica(dir.path(), "b", &server.dir, "catalog_replicas").await;
    let (mut cat_a, mut prof_a) = clients(&a).await;
    let (mut cat_b, mut prof_b) = clients(&b).await;

    prof_a
        .put_profile(put(
            json!({"id": "lead", "tools": {"allow": ["ext/crm:*"]}}),
        ))
        .await
        .unwrap();
    // B reads the cell now, so what follows must reach a cell B already holds.
    assert_eq!(resolved_tools(&mut prof_b, "lead").await, (1, vec![]));
    assert!(listed(&mut cat_b).await.is_empty());

    cat_a
        .register_tools(register("crm", &["ext/crm:lookup"]))
        .await
        .unwrap();
    assert_eq!(
        listed(&mut cat_b).await,
        ["ext/crm:lookup"],
        "B lists A's host"
    );
    assert_eq!(
        resolved_tools(&mut prof_b, "lead").await,
        (1, vec!["ext/crm:lookup".to_owned()]),
        "B resolves with A's host"
    );

    // A profile changed on B is what A compiles next: a sub-agent tool and a wider allow list.
    prof_b
        .put_profile(put(json!({
            "id": "researcher", "description": "Finds facts.", "tools": {"allow": ["builtin:workspace.*"]},
            "model": {"kind": "openai-compatible", "baseUrl": "http://127.0.0.1:8000/v1", "model": "m"},
            "delegation": {"callableAsTool": true}
        })))
        .await
        .unwrap();
    prof_b
        .put_profile(put(
            json!({"id": "lead", "tools": {"allow": ["ext/crm:*", "agent/researcher:run"]}}),
        ))
        .await
        .unwrap();
    assert_eq!(
        resolved_tools(&mut prof_a, "lead").await,
        (
            2,
            vec![
                "ext/crm:lookup".to_owned(),
                "agent/researcher:run".to_owned()
            ]
        ),
        "A resolves B's profiles"
    );

    cat_b
        .deregister_tools(pb::DeregisterToolsRequest {
            host_id: "crm".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        listed(&mut cat_a).await.is_empty(),
        "A drops the host B removed"
    );
    assert_eq!(
        resolved_tools(&mut prof_a, "lead").await,
        (2, vec!["agent/researcher:run".to_owned()])
    );
}
