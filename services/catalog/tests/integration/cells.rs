//! Cells that never meet in the catalog: with cell B's agent and admin credentials, cell A's
//! profiles, policies and tool hosts are answered exactly like ids that do not exist, no listing
//! shows them, and a request naming cell A is refused. The handlers are called with the `Caller`
//! the auth layer puts into each request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;
use tonic::{Code, Request, Status};
use toolplane_auth::{Caller, CallerKind, Role};
use toolplane_catalog::grpc::CatalogGrpc;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_server::CatalogService;
use toolplane_proto::v1::profile_service_server::ProfileService;

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

fn shape(status: &Status, id: &str) -> (Code, String) {
    (status.code(), status.message().replace(id, "<id>"))
}

#[tokio::test]
async fn another_cells_profiles_policies_and_hosts_are_not_found() {
    let c = start().await;
    let svc = CatalogGrpc::new(c.catalog().clone());
    let admin_a = caller("a", Role::Admin);
    let doc = json!({"id": "writer", "tools": {"allow": ["builtin:workspace.*"]}});
    svc.put_profile(as_caller(
        &admin_a,
        pb::PutProfileRequest {
            profile_json: doc.to_string(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let policy = json!({"deny": ["builtin:dice.roll"]});
    svc.put_platform_policy(as_caller(
        &admin_a,
        pb::PutPlatformPolicyRequest {
            policy_json: policy.to_string(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    svc.register_tools(as_caller(
        &admin_a,
        register("crm", "http://127.0.0.1:9", &["ext/crm:lookup"]),
    ))
    .await
    .unwrap();
    let own = svc
        .get_profile(as_caller(
            &admin_a,
            pb::GetProfileRequest {
                profile_id: "writer".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(own.profile.unwrap().cell_id, "a");

    for b in [caller("b", Role::Agent), caller("b", Role::Admin)] {
        let get = |id: &str| pb::GetProfileRequest {
            profile_id: id.into(),
            ..Default::default()
        };
        let hidden = svc
            .get_profile(as_caller(&b, get("writer")))
            .await
            .unwrap_err();
        let missing = svc
            .get_profile(as_caller(&b, get("nobody")))
            .await
            .unwrap_err();
        assert_eq!(hidden.code(), Code::NotFound);
        assert_eq!(shape(&hidden, "writer"), shape(&missing, "nobody"));
        let resolve = |id: &str| pb::ResolveProfileRequest {
            profile_id: id.into(),
            ..Default::default()
        };
        let hidden = svc
            .resolve_profile(as_caller(&b, resolve("writer")))
            .await
            .unwrap_err();
        let missing = svc
            .resolve_profile(as_caller(&b, resolve("nobody")))
            .await
            .unwrap_err();
        assert_eq!(shape(&hidden, "writer"), shape(&missing, "nobody"));
        let delete = |id: &str| pb::DeleteProfileRequest {
            profile_id: id.into(),
            ..Default::default()
        };
        let hidden = svc
            .delete_profile(as_caller(&b, delete("writer")))
            .await
            .unwrap_err();
        let missing = svc
            .delete_profile(as_caller(&b, delete("nobody")))
            .await
            .unwrap_err();
        assert_eq!(shape(&hidden, "writer"), shape(&missing, "nobody"));
        let deregister = |id: &str| pb::DeregisterToolsRequest {
            host_id: id.into(),
            ..Default::default()
        };
        let hidden = svc
            .deregister_tools(as_caller(&b, deregister("crm")))
            .await
            .unwrap_err();
        let missing = svc
            .deregister_tools(as_caller(&b, deregister("nohost")))
            .await
            .unwrap_err();
        assert_eq!(shape(&hidden, "crm"), shape(&missing, "nohost"));

        let listed = svc
            .list_profiles(as_caller(&b, pb::ListProfilesRequest::default()))
            .await
            .unwrap()
            .into_inner();
        assert!(listed.profiles.is_empty(), "{:?}", listed.profiles);
        let hosts = svc
            .list_tool_hosts(as_caller(&b, pb::ListToolHostsRequest::default()))
            .await
            .unwrap()
            .into_inner();
        assert!(hosts.hosts.is_empty(), "{:?}", hosts.hosts);
        let tools = svc
            .list_tools(as_caller(
                &b,
                pb::ListToolsRequest {
                    include_unusable: true,
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(
            tools
                .tools
                .iter()
                .all(|t| !format!("{t:?}").contains("crm"))
        );
        let platform = svc
            .get_platform_policy(as_caller(&b, pb::GetPlatformPolicyRequest::default()))
            .await
            .map(|r| format!("{:?}", r.into_inner()));
        assert!(
            !format!("{platform:?}").contains("dice.roll"),
            "{platform:?}"
        );

        let named = svc
            .get_profile(as_caller(
                &b,
                pb::GetProfileRequest {
                    profile_id: "writer".into(),
                    cell_id: "a".into(),
                },
            ))
            .await
            .unwrap_err();
        assert_eq!(named.code(), Code::PermissionDenied);
    }

    // Cell A still has its profile: B's admin deleted nothing.
    svc.get_profile(as_caller(
        &admin_a,
        pb::GetProfileRequest {
            profile_id: "writer".into(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn with_auth_off_the_request_names_the_cell() {
    let c = start().await;
    let svc = CatalogGrpc::new(c.catalog().clone());
    let doc = json!({"id": "writer", "tools": {"allow": ["builtin:workspace.*"]}});
    svc.put_profile(Request::new(pb::PutProfileRequest {
        cell_id: "a".into(),
        profile_json: doc.to_string(),
        ..Default::default()
    }))
    .await
    .unwrap();
    let got = svc
        .get_profile(Request::new(pb::GetProfileRequest {
            profile_id: "writer".into(),
            cell_id: "a".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.profile.unwrap().cell_id, "a");
    c.shutdown().await.unwrap();
}
