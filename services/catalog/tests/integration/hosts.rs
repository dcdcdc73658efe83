//! External tool hosts over real sockets: a real `ToolExecutor` host registers its tools and
//! they are listed; forged providers, duplicates and stale generations are refused; a
//! registration replaces the whole tool set; registrations survive a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::Value;
use toolplane_catalog::records::{Endpoint, RegisteredTool};
use toolplane_catalog::{AdapterTools, CatalogConfig, StoreConfig};
use toolplane_core::descriptor::ToolDescriptor;
use toolplane_core::id::ToolId;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::tool_executor_client::ToolExecutorClient;

#[tokio::test]
async fn a_registered_host_is_listed_and_reachable_at_its_endpoint() {
    let host = spawn_host().await;
    let c = start().await;
    let mut client = catalog_client(&c).await;
    let mut req = register(
        "crm",
        &host.url(),
        &["ext/crm:lookup_customer", "ext/crm:update_note"],
    );
    req.tools[0].category = pb::ToolCategory::Exploration as i32;
    req.tools[1].progress_aware = true;
    let answer = client.register_tools(req).await.unwrap().into_inner();
    let registered = answer.host.unwrap();
    assert_eq!(registered.generation, 1);
    assert_eq!(
        registered.tool_ids,
        ["ext/crm:lookup_customer", "ext/crm:update_note"]
    );
    // Header names are shown, their values never.
    let endpoint = registered.endpoint.unwrap();
    assert_eq!(endpoint.headers["authorization"], "");

    let (tools, _) = list_all(
        &mut client,
        pb::ListToolsRequest {
            sources: vec![pb::ToolSource::External as i32],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        ids(&tools),
        ["ext/crm:lookup_customer", "ext/crm:update_note"]
    );
    let lookup = &tools[0];
    assert_eq!(
        lookup.category,
        pb::ToolCategory::Exploration as i32,
        "declared category"
    );
    assert_eq!(
        tools[1].category,
        pb::ToolCategory::Action as i32,
        "the fallback's last level"
    );
    assert!(tools[1].progress_aware);
    let external = lookup.external.as_ref().unwrap();
    assert_eq!(external.host_id, "crm");
    assert_eq!(external.host_display_name, "crm host");
    assert_eq!(external.endpoint_url, host.url());
    assert!(
        external.endpoint.is_none(),
        "listings carry no header values"
    );

    let (_, _, body) = http_get(&c, "/tools?source=external").await;
    let listed: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(listed[0]["external"]["endpointUrl"], host.url());
    assert_eq!(
        listed[0]["inputSchema"]["properties"]["query"]["type"],
        "string"
    );
    assert!(!body.contains("Bearer secret"));

    // The endpoint the catalog keeps is a real executor: the runtime would call it like this.
    let hosts = client
        .list_tool_hosts(pb::ListToolHostsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let url = hosts.hosts[0].endpoint.as_ref().unwrap().url.clone();
    let mut executor = ToolExecutorClient::connect(url).await.unwrap();
    let result = executor
        .execute(pb::ExecuteRequest {
            invocation: Some(pb::ToolInvocation {
                call_id: "call_1".into(),
                tool_id: "ext/crm:lookup_customer".into(),
                arguments_json: r#"{"query":"ada"}"#.into(),
                provider_metadata_json: None,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(result.content, r#"echo: {"query":"ada"}"#);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn forged_and_malformed_registrations_are_refused() {
    let c = start().await;
    let mut client = catalog_client(&c).await;
    let uuid = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";
    let forged = [
        "builtin:workspace.write_file".to_owned(),
        format!("mcp/{uuid}:search"),
        "agent/default:run".to_owned(),
    ];
    for id in &forged {
        let err = client
            .register_tools(register("crm", "http://127.0.0.1:7001", &[id]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{id}");
        assert!(
            err.message().starts_with("tool.reserved_provider: "),
            "{}",
            err.message()
        );
    }
    let cases: Vec<(pb::RegisterToolsRequest, &str)> = vec![
        (
            register("crm", "http://127.0.0.1:7001", &["ext/erp:x"]),
            "tool.invalid_id",
        ),
        (
            register("crm", "http://127.0.0.1:7001", &["ext/crm:x", "ext/crm:x"]),
            "tool.duplicate_id",
        ),
        (
            register("crm", "127.0.0.1:7001", &["ext/crm:x"]),
            "catalog.invalid_registration",
        ),
        (
            register("Bad Host", "http://h", &[]),
            "catalog.invalid_request",
        ),
        (
            {
                let mut r = register("crm", "http://h", &["ext/crm:x"]);
                r.tools[0].descriptor.as_mut().unwrap().input_schema_json =
                    r#"{"type":"string"}"#.into();
                r
            },
            "tool.invalid_schema",
        ),
        (
            {
                let mut r = register("crm", "http://h", &["ext/crm:x"]);
                r.tools[0].descriptor.as_mut().unwrap().description = " ".into();
                r
            },
            "tool.invalid_descriptor",
        ),
    ];
    for (req, code) in cases {
        let err = client.register_tools(req).await.unwrap_err();
        assert!(
            err.message().starts_with(&format!("{code}: ")),
            "{code}: {}",
            err.message()
        );
    }
    let too_many: Vec<String> = (0..1001).map(|i| format!("ext/crm:t{i}")).collect();
    let refs: Vec<&str> = too_many.iter().map(String::as_str).collect();
    let err = client
        .register_tools(register("crm", "http://h", &refs))
        .await
        .unwrap_err();
    assert!(err.message().starts_with("catalog.invalid_registration: "));
    // Nothing was stored by any refused registration.
    let hosts = client
        .list_tool_hosts(pb::ListToolHostsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(hosts.hosts.is_empty());
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_registration_replaces_the_whole_set_under_its_generation() {
    let c = start().await;
    let mut client = catalog_client(&c).await;
    let url = "http://127.0.0.1:7001";
    client
        .register_tools(register("crm", url, &["ext/crm:a", "ext/crm:b"]))
        .await
        .unwrap();

    let mut create_again = register("crm", url, &["ext/crm:c"]);
    create_again.expected_generation = Some(0);
    let err = client.register_tools(create_again).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert!(err.message().starts_with("catalog.generation_conflict: "));

    let mut replace = register("crm", url, &["ext/crm:c"]);
    replace.expected_generation = Some(1);
    let host = client
        .register_tools(replace)
        .await
        .unwrap()
        .into_inner()
        .host
        .unwrap();
    assert_eq!(host.generation, 2);
    let (tools, _) = list_all(
        &mut client,
        pb::ListToolsRequest {
            provider: "ext/crm".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        ids(&tools),
        ["ext/crm:c"],
        "the old tools left with the old registration"
    );

    let mut stale = pb::DeregisterToolsRequest {
        host_id: "crm".into(),
        expected_generation: Some(1),
        ..Default::default()
    };
    assert_eq!(
        client
            .deregister_tools(stale.clone())
            .await
            .unwrap_err()
            .code(),
        tonic::Code::Aborted
    );
    stale.expected_generation = Some(2);
    let removed = client
        .deregister_tools(stale.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(removed.removed_tool_ids, ["ext/crm:c"]);
    let err = client.deregister_tools(stale).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().starts_with("catalog.host_not_found: "));
    let (tools, _) = list_all(&mut client, pb::ListToolsRequest::default()).await;
    assert_eq!(tools.len(), 21);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn duplicate_ids_across_sources_name_both_sources() {
    let c = start().await;
    let mut client = catalog_client(&c).await;
    let id = ToolId::parse("ext/kb:search").unwrap();
    let descriptor = ToolDescriptor::new(
        id,
        "Search the knowledge base.",
        serde_json::json!({"type": "object"}),
    )
    .unwrap();
    c.catalog()
        .install_adapter(
            &toolplane_catalog::cell::CellId::default_cell(),
            AdapterTools {
                adapter: "kb".into(),
                display_name: "Knowledge base".into(),
                endpoint: Endpoint {
                    url: "http://127.0.0.1:7002".into(),
                    headers: Default::default(),
                    timeout_ms: 0,
                    max_concurrent_calls: 0,
                },
                tools: vec![RegisteredTool {
                    descriptor,
                    category: None,
                    progress_aware: false,
                }],
            },
        )
        .await
        .unwrap();
    let (tools, _) = list_all(
        &mut client,
        pb::ListToolsRequest {
            sources: vec![pb::ToolSource::Adapter as i32],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&tools), ["ext/kb:search"]);
    assert_eq!(tools[0].source, pb::ToolSource::Adapter as i32);

    let err = client
        .register_tools(register("kb", "http://127.0.0.1:7003", &["ext/kb:search"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().starts_with("tool.duplicate_id: "),
        "{}",
        err.message()
    );
    assert!(err.message().contains("adapter `kb`"), "{}", err.message());
    assert!(
        err.message().contains("external host `kb`"),
        "{}",
        err.message()
    );
    // Other tools of the same provider do not collide.
    client
        .register_tools(register("kb", "http://127.0.0.1:7003", &["ext/kb:ingest"]))
        .await
        .unwrap();
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn registrations_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || CatalogConfig {
        store: StoreConfig::Fs {
            root: dir.path().to_owned(),
        },
        ..CatalogConfig::ephemeral()
    };
    let c = start_with(config()).await;
    let mut client = catalog_client(&c).await;
    let mut req = register("crm", "http://127.0.0.1:7001", &["ext/crm:lookup"]);
    req.tools[0].descriptor.as_mut().unwrap().annotations = Some(pb::ToolAnnotations {
        read_only_hint: Some(false),
        ..Default::default()
    });
    req.tools[0].category = pb::ToolCategory::Exploration as i32;
    let answer = client.register_tools(req).await.unwrap().into_inner();
    assert_eq!(
        answer.warnings[0].code,
        "catalog.category_disagrees_with_hint"
    );
    c.shutdown().await.unwrap();

    let c = start_with(config()).await;
    let mut client = catalog_client(&c).await;
    let (tools, _) = list_all(
        &mut client,
        pb::ListToolsRequest {
            sources: vec![pb::ToolSource::External as i32],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(ids(&tools), ["ext/crm:lookup"]);
    assert_eq!(tools[0].category, pb::ToolCategory::Exploration as i32);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn another_replica_sees_a_registration_after_a_refresh() {
    // Two catalogs over one store directory: the second sees the first's write at its next
    // refresh (here: on demand).
    let dir = tempfile::tempdir().unwrap();
    let config = || CatalogConfig {
        store: StoreConfig::Fs {
            root: dir.path().to_owned(),
        },
        ..CatalogConfig::ephemeral()
    };
    let a = start_with(config()).await;
    let b = start_with(config()).await;
    let mut ca = catalog_client(&a).await;
    let mut cb = catalog_client(&b).await;
    ca.register_tools(register(
        "crm",
        "http://127.0.0.1:7001",
        &["ext/crm:lookup"],
    ))
    .await
    .unwrap();
    let refreshed = cb
        .refresh_sources(pb::RefreshSourcesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let external = &refreshed.sources[2];
    assert_eq!(external.source, pb::ToolSource::External as i32);
    assert_eq!(external.tool_count, 1);
    let (tools, _) = list_all(&mut cb, pb::ListToolsRequest::default()).await;
    assert!(ids(&tools).contains(&"ext/crm:lookup".to_owned()));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
