//! Listings over real sockets: the builtin tools through gRPC and HTTP, filters, pages, plain-text
//! descriptions, health and reflection, and an unreachable mcp-proxy that breaks nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::Value;
use toolplane_catalog::CatalogConfig;
use toolplane_proto::v1 as pb;

#[tokio::test]
async fn builtin_tools_are_listed_over_grpc_and_http() {
    let c = start().await;
    let mut client = catalog_client(&c).await;
    let (tools, first) = list_all(&mut client, pb::ListToolsRequest::default()).await;
    let ids = ids(&tools);
    assert_eq!(ids.len(), 21, "{ids:?}");
    assert_eq!(ids[0], "builtin:workspace.list_files");
    assert!(ids.contains(&"builtin:task.return".to_owned()));
    // Every listing carries a usable object schema and a category; the source states come along.
    for t in &tools {
        let d = t.descriptor.as_ref().unwrap();
        let schema: Value = serde_json::from_str(&d.input_schema_json).unwrap();
        assert_eq!(schema["type"], "object", "{}", d.id);
        assert!(t.usable);
        assert_ne!(t.category, pb::ToolCategory::Unspecified as i32);
        assert!(!d.description.is_empty());
    }
    let write = tools
        .iter()
        .find(|t| t.descriptor.as_ref().unwrap().id == "builtin:workspace.write_file")
        .unwrap();
    assert!(write.progress_aware);
    assert_eq!(write.category, pb::ToolCategory::Action as i32);
    let sources: Vec<i32> = first.sources.iter().map(|s| s.source).collect();
    assert_eq!(
        sources,
        [
            pb::ToolSource::Builtin as i32,
            pb::ToolSource::Mcp as i32,
            pb::ToolSource::External as i32,
            pb::ToolSource::Adapter as i32,
            pb::ToolSource::Agent as i32
        ]
    );
    let mcp = &first.sources[1];
    assert!(!mcp.available);
    assert_eq!(mcp.diagnostics[0].code, "catalog.mcp_not_configured");

    // The same tools over HTTP, with JSON Schemas as JSON.
    let (status, headers, body) = http_get(&c, "/tools").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let listed: Vec<Value> = serde_json::from_str(&body).unwrap();
    let http_ids: Vec<&str> = listed.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(http_ids, ids);
    let read = &listed[2];
    assert_eq!(read["id"], "builtin:workspace.read_file");
    assert_eq!(read["inputSchema"]["required"][0], "path");
    assert_eq!(read["category"], "exploration");
    assert_eq!(read["source"], "builtin");
    assert_eq!(read["usable"], true);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn filters_and_pages() {
    let c = start().await;
    let mut client = catalog_client(&c).await;

    // Pages of 4 walk all 21 tools exactly once.
    let (paged, _) = list_all(
        &mut client,
        pb::ListToolsRequest {
            page_size: 4,
            ..Default::default()
        },
    )
    .await;
    let (all, _) = list_all(&mut client, pb::ListToolsRequest::default()).await;
    assert_eq!(ids(&paged), ids(&all));

    let exploration = |q: &str| pb::ListToolsRequest {
        categories: vec![pb::ToolCategory::Exploration as i32],
        query: q.into(),
        ..Default::default()
    };
    let (tools, _) = list_all(&mut client, exploration("")).await;
    assert!(ids(&tools).contains(&"builtin:chat.search".to_owned()));
    assert!(!ids(&tools).contains(&"builtin:workspace.write_file".to_owned()));
    let (tools, _) = list_all(&mut client, exploration("SKILL")).await;
    assert_eq!(
        ids(&tools),
        [
            "builtin:skill.list",
            "builtin:skill.search",
            "builtin:skill.read"
        ]
    );
    let (none, _) = list_all(
        &mut client,
        pb::ListToolsRequest {
            sources: vec![pb::ToolSource::External as i32],
            ..Default::default()
        },
    )
    .await;
    assert!(none.is_empty());

    // HTTP: the same filters as query parameters, pages through a header.
    let (_, headers, body) = http_get(&c, "/tools?category=exploration&query=skill&limit=2").await;
    let page: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(page.len(), 2);
    let token = headers["x-next-page-token"].to_str().unwrap().to_owned();
    let (_, headers, body) = http_get(
        &c,
        &format!("/tools?category=exploration&query=skill&limit=2&page_token={token}"),
    )
    .await;
    let rest: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["id"], "builtin:skill.read");
    assert!(headers.get("x-next-page-token").is_none());

    // Bad input is a coded error on both surfaces.
    let err = client
        .list_tools(pb::ListToolsRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().starts_with("request.invalid_page_token: "),
        "{}",
        err.message()
    );
    let (status, _, body) = http_get(&c, "/tools?source=plugins").await;
    assert_eq!(status, 400);
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["code"], "catalog.invalid_request");
    let (status, _, _) = http_get(&c, "/tools?cell=Not%20A%20Cell").await;
    assert_eq!(status, 400);
    // A page token that is not ASCII is refused like any other, and the catalog keeps serving.
    for token in ["a%C3%A9b", "%F0%9F%98%80%F0%9F%98%80"] {
        let (status, _, body) = http_get(&c, &format!("/tools?page_token={token}")).await;
        assert_eq!(status, 400, "{token}: {body}");
        let err: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(err["code"], "request.invalid_page_token");
    }
    let (status, _, _) = http_get(&c, "/tools").await;
    assert_eq!(status, 200);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn descriptions_are_plain_text_for_prompts() {
    let c = start().await;
    let mut client = catalog_client(&c).await;
    let d = client
        .describe_tools(pb::DescribeToolsRequest {
            tool_ids: vec![
                "builtin:dice.roll".into(),
                "builtin:workspace.read_file".into(),
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(d.tools.len(), 2);
    assert_eq!(d.tools[0].title, "Roll dice");
    assert!(
        d.text
            .starts_with("builtin:dice.roll — Roll dice\nRoll dice in common notation")
    );
    assert!(
        d.text
            .contains("- notation (string, required): Dice notation")
    );
    assert!(
        d.text
            .contains("builtin:workspace.read_file — Read a workspace file\n")
    );
    assert!(
        d.text
            .contains("- start_line (integer, at least 1): First line to read")
    );

    let (status, headers, text) = http_get(
        &c,
        "/tools/descriptions?tool_id=builtin:dice.roll,builtin:workspace.read_file",
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(text, d.text);

    // Without ids: every usable tool.
    let all = client
        .describe_tools(pb::DescribeToolsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.tools.len(), 21);

    let err = client
        .describe_tools(pb::DescribeToolsRequest {
            tool_ids: vec!["ext/nobody:nothing".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().starts_with("catalog.tool_not_found: "));
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_mcp_proxy_breaks_nothing_else() {
    let mut config = CatalogConfig::ephemeral();
    config.mcp_proxy_url = Some(format!("http://{}", dead_addr()));
    config.mcp_timeout_ms = 500;
    let c = start_with(config).await;
    let mut client = catalog_client(&c).await;
    let (tools, first) = list_all(&mut client, pb::ListToolsRequest::default()).await;
    assert_eq!(tools.len(), 21, "builtins are listed");
    let mcp = first
        .sources
        .iter()
        .find(|s| s.source == pb::ToolSource::Mcp as i32)
        .unwrap();
    assert!(!mcp.available);
    assert_eq!(mcp.diagnostics[0].code, "catalog.mcp_unavailable");
    assert!(
        mcp.diagnostics[0]
            .message
            .contains("mcp-proxy at http://127.0.0.1:"),
        "{:?}",
        mcp.diagnostics
    );

    let refreshed = client
        .refresh_sources(pb::RefreshSourcesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(!refreshed.sources[1].available);

    let (status, _, body) = http_get(&c, "/sources").await;
    assert_eq!(status, 200);
    let sources: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(sources[1]["source"], "mcp");
    assert_eq!(sources[1]["available"], false);
    assert_eq!(sources[0]["toolCount"], 21);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn health_and_reflection_answer() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    let c = start().await;
    let channel = tonic::transport::Channel::from_shared(c.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    for service in [
        "",
        "toolplane.v1.CatalogService",
        "toolplane.v1.ProfileService",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service}");
    }

    use tokio_stream::StreamExt;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(Ok(answer)) = answers.next().await else {
        panic!("no reflection answer")
    };
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"toolplane.v1.CatalogService".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"toolplane.v1.ProfileService".to_owned()),
        "{names:?}"
    );

    let (status, _, body) = http_get(&c, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, headers, metrics) = http_get(&c, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert!(
        metrics.contains(
            "toolplane_catalog_tools{cell=\"default\",source=\"builtin\",usable=\"true\"} 21\n"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolplane_catalog_source_available{cell=\"default\",source=\"mcp\"} 0\n"),
        "{metrics}"
    );
    assert!(metrics.contains("toolplane_catalog_cells 1\n"), "{metrics}");
    // The counter every service's server keeps, on the catalog's hand-written page too.
    assert!(
        metrics.contains("# TYPE toolplane_handler_panics_total counter\n"),
        "{metrics}"
    );
    c.shutdown().await.unwrap();
}
