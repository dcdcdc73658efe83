//! Cells that never meet in the mcp-proxy: with cell B's admin and reader credentials, cell A's
//! registration is answered exactly like a server id that does not exist, no listing shows it or
//! its cached tools, and a request naming cell A is refused (docs/auth.md, "Cells"). The handlers
//! are called with the `Caller` the auth layer puts into each request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use tonic::{Code, Request, Status};
use toolplane_auth::{Caller, CallerKind, Role};
use toolplane_mcp_proxy::grpc::GrpcProxy;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::mcp_proxy_service_server::McpProxyService;

fn caller(cell: &str, role: Role) -> Caller {
    Caller {
        cell: cell.into(),
        role,
        principal: format!("tok_{cell}_{role}"),
        kind: CallerKind::Token,
    }
}

fn as_caller<T>(who: &Caller, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(who.clone());
    request
}

/// A refusal with the id masked, so another cell's id and an unknown one compare equal.
fn shape(status: &Status, id: &str) -> (Code, String) {
    (status.code(), status.message().replace(id, "<id>"))
}

/// Every RPC that takes a server id, as `who`, on `id`: each refusal's shape.
async fn probe(svc: &GrpcProxy, who: &Caller, id: &str) -> Vec<(&'static str, (Code, String))> {
    let server_id = id.to_owned();
    vec![
        (
            "GetServer",
            shape(
                &svc.get_server(as_caller(
                    who,
                    pb::GetServerRequest {
                        server_id: server_id.clone(),
                        ..Default::default()
                    },
                ))
                .await
                .unwrap_err(),
                id,
            ),
        ),
        (
            "SetServerState",
            shape(
                &svc.set_server_state(as_caller(
                    who,
                    pb::SetServerStateRequest {
                        server_id: server_id.clone(),
                        state: pb::McpServerState::Paused.into(),
                        ..Default::default()
                    },
                ))
                .await
                .unwrap_err(),
                id,
            ),
        ),
        (
            "SetToolPermission",
            shape(
                &svc.set_tool_permission(as_caller(
                    who,
                    pb::SetToolPermissionRequest {
                        server_id: server_id.clone(),
                        native_name: "echo".into(),
                        permission: pb::McpToolPermission::Off.into(),
                        ..Default::default()
                    },
                ))
                .await
                .unwrap_err(),
                id,
            ),
        ),
        (
            "RefreshServer",
            shape(
                &svc.refresh_server(as_caller(
                    who,
                    pb::RefreshServerRequest {
                        server_id: server_id.clone(),
                        ..Default::default()
                    },
                ))
                .await
                .unwrap_err(),
                id,
            ),
        ),
        (
            "DeregisterServer",
            shape(
                &svc.deregister_server(as_caller(
                    who,
                    pb::DeregisterServerRequest {
                        server_id,
                        ..Default::default()
                    },
                ))
                .await
                .unwrap_err(),
                id,
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_cells_registrations_are_not_found_and_never_listed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start(dir.path()).await;
    // Cell A's server, registered and connected (its tools cached).
    let registered = h
        .upsert(pb::UpsertServerRequest {
            cell_id: "a".into(),
            ..fixture("fixture", &[])
        })
        .await;
    let a_id = registered.server.unwrap().server_id;
    let svc = GrpcProxy::new(h.proxy.clone());
    let admin_a = caller("a", Role::Admin);
    let seen_by_a = svc
        .list_cached_tools(as_caller(&admin_a, pb::ListCachedToolsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(!seen_by_a.tools.is_empty(), "cell a sees its cached tools");

    let unknown = "00000000-0000-4000-8000-000000000000";
    for who in [caller("b", Role::Admin), caller("b", Role::Reader)] {
        if who.role == Role::Admin {
            // Every id RPC: cell A's id is answered exactly like an id that does not exist.
            let other = probe(&svc, &who, &a_id).await;
            let missing = probe(&svc, &who, unknown).await;
            for ((rpc, got), (_, expected)) in other.iter().zip(&missing) {
                assert_eq!(got.0, Code::NotFound, "{rpc}: {got:?}");
                assert_eq!(got, expected, "{rpc}");
            }
        } else {
            let got = svc
                .get_server(as_caller(
                    &who,
                    pb::GetServerRequest {
                        server_id: a_id.clone(),
                        ..Default::default()
                    },
                ))
                .await
                .unwrap_err();
            assert_eq!(got.code(), Code::NotFound, "{got:?}");
        }
        let servers = svc
            .list_servers(as_caller(&who, pb::ListServersRequest::default()))
            .await
            .unwrap()
            .into_inner();
        assert!(servers.servers.is_empty(), "{:?}", servers.servers);
        let tools = svc
            .list_cached_tools(as_caller(
                &who,
                pb::ListCachedToolsRequest {
                    server_ids: vec![a_id.clone()],
                    include_unusable: true,
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(tools.tools.is_empty(), "{:?}", tools.tools);
        // Naming cell A is refused outright.
        let named = svc
            .list_servers(as_caller(
                &who,
                pb::ListServersRequest {
                    cell_id: "a".into(),
                    ..Default::default()
                },
            ))
            .await
            .unwrap_err();
        assert_eq!(named.code(), Code::PermissionDenied, "{named:?}");
    }

    // Cell A's registration is untouched by all of it.
    let still = svc
        .get_server(as_caller(
            &admin_a,
            pb::GetServerRequest {
                server_id: a_id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let server = still.server.unwrap();
    assert_eq!(server.server_id, a_id);
    assert_eq!(server.state, pb::McpServerState::Active as i32);
    h.stop().await;
}
