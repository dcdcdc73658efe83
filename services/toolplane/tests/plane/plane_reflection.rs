//! Every service of the plane answers gRPC reflection for exactly the services it serves (plus
//! health), so `buf curl` and `grpcurl` work against any port without a local copy of the protos
//! and never offer a method that port does not answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use tokio_stream::StreamExt;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

async fn ask(url: &str, request: MessageRequest) -> Result<MessageResponse, tonic::Status> {
    let mut client = ServerReflectionClient::new(common::channel(url).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut answers = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    Ok(answers.next().await.unwrap()?.message_response.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_port_lists_its_own_services_and_describes_them() {
    let h = common::harness().await;
    let ports = [
        (h.plane.runtime_url(), vec!["toolplane.v1.RuntimeService"]),
        (
            h.plane.catalog_url(),
            vec![
                "toolplane.v1.CatalogService",
                "toolplane.v1.ProfileService",
                "toolplane.v1.TokenService",
                "toolplane.v1.AdminAuditService",
            ],
        ),
        (
            h.plane.workspace_url(),
            vec![
                "toolplane.v1.ToolExecutor",
                "toolplane.v1.WorkspaceService",
                "toolplane.v1.AdminAuditService",
            ],
        ),
        (
            h.plane.mcp_proxy_url(),
            vec![
                "toolplane.v1.McpProxyService",
                "toolplane.v1.ToolExecutor",
                "toolplane.v1.AdminAuditService",
            ],
        ),
    ];
    for (url, own) in ports {
        let MessageResponse::ListServicesResponse(list) =
            ask(&url, MessageRequest::ListServices(String::new()))
                .await
                .unwrap()
        else {
            panic!("{url}: not a service list")
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        let mut expected: Vec<String> = own.iter().map(|s| (*s).to_owned()).collect();
        expected.push("grpc.health.v1.Health".to_owned());
        expected.sort();
        assert_eq!(names, expected, "{url}");

        // The descriptor of each listed service, with the files it imports, is served — health's
        // too, so a reflection client can call `Check` without the .proto.
        for service in own.iter().copied().chain(["grpc.health.v1.Health"]) {
            let MessageResponse::FileDescriptorResponse(files) = ask(
                &url,
                MessageRequest::FileContainingSymbol(service.to_owned()),
            )
            .await
            .unwrap() else {
                panic!("{url}: no descriptor for {service}")
            };
            assert!(!files.file_descriptor_proto.is_empty(), "{url} {service}");
        }
        // A symbol nobody defines is NOT_FOUND, not a hang.
        let status = ask(
            &url,
            MessageRequest::FileContainingSymbol("toolplane.v1.NoSuchService".to_owned()),
        )
        .await
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::NotFound, "{url}");
    }
    h.plane.shutdown().await;
}
