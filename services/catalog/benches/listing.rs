//! Listing benchmarks, each against a bare handler returning the same bytes, measured in the same
//! run over real loopback sockets:
//! - gRPC `ListTools` of 5,000 tools (five pages of 1,000) vs a bare tonic `CatalogService`
//!   handler returning the same five responses;
//! - `GET /tools` of the same 5,000 tools (one response) vs a bare axum handler returning the same
//!   bytes.
//!
//! Each must cost at most 3× its baseline. Run with
//! `cargo bench -p toolplane-catalog --bench listing`; the ratio table prints at the end.
//! Benchmark ids carry no `/`: criterion stores `a/b` as `a_b`, and the ratio report reads the
//! directory by id.

// A benchmark's set-up either works or the benchmark is meaningless: failing loudly is right here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use criterion::Criterion;
use serde_json::json;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use toolplane_bench::{Ratio, report};
use toolplane_catalog::CatalogConfig;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::catalog_service_server::{CatalogService, CatalogServiceServer};

const HOSTS: usize = 5;
const TOOLS_PER_HOST: usize = 1000;

/// Five hosts of 1,000 tools each, with descriptions and schemas of a realistic size.
fn registration(host: usize) -> pb::RegisterToolsRequest {
    let tools = (0..TOOLS_PER_HOST)
        .map(|t| {
            let schema = json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Most results to return."},
                "include_archived": {"type": "boolean", "description": "Also search archived records."}
            }, "required": ["query"], "additionalProperties": false});
            pb::ToolRegistration {
                descriptor: Some(pb::ToolDescriptor {
                    id: format!("ext/host-{host}:tool_{t}.search"),
                    title: Some(format!("Search records {t}")),
                    description: format!("Search the records of collection {t} of host {host} and return the best matches with their ids and a short excerpt."),
                    input_schema_json: schema.to_string(),
                    output_schema_json: None,
                    annotations: Some(pb::ToolAnnotations { read_only_hint: Some(true), ..Default::default() }),
                }),
                category: 0,
                progress_aware: false,
            }
        })
        .collect();
    pb::RegisterToolsRequest {
        host_id: format!("host-{host}"),
        endpoint: Some(pb::ExecutorEndpoint {
            url: format!("http://127.0.0.1:{}", 7000 + host),
            ..Default::default()
        }),
        tools,
        ..Default::default()
    }
}

fn request(token: &str) -> pb::ListToolsRequest {
    pb::ListToolsRequest {
        sources: vec![pb::ToolSource::External as i32],
        page_size: 1000,
        page_token: token.to_owned(),
        ..Default::default()
    }
}

/// Pages through all 5,000 listings; returns the responses.
async fn list_all(client: &mut CatalogServiceClient<Channel>) -> Vec<pb::ListToolsResponse> {
    let mut pages = Vec::with_capacity(HOSTS);
    let mut token = String::new();
    loop {
        let page = client
            .list_tools(request(&token))
            .await
            .unwrap()
            .into_inner();
        token = page.next_page_token.clone();
        pages.push(page);
        if token.is_empty() {
            return pages;
        }
    }
}

/// The bare tonic baseline: answers `ListTools` with prepared responses, keyed by page token.
#[derive(Debug, Clone)]
struct Bare {
    pages: Arc<HashMap<String, pb::ListToolsResponse>>,
}

#[tonic::async_trait]
impl CatalogService for Bare {
    async fn list_tools(
        &self,
        r: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let token = r.into_inner().page_token;
        self.pages
            .get(&token)
            .cloned()
            .map(Response::new)
            .ok_or_else(|| Status::not_found("page"))
    }
    async fn get_tool(
        &self,
        _: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::GetToolResponse>, Status> {
        Err(Status::unimplemented("bench baseline"))
    }
    async fn describe_tools(
        &self,
        _: Request<pb::DescribeToolsRequest>,
    ) -> Result<Response<pb::DescribeToolsResponse>, Status> {
        Err(Status::unimplemented("bench baseline"))
    }
    async fn register_tools(
        &self,
        _: Request<pb::RegisterToolsRequest>,
    ) -> Result<Response<pb::RegisterToolsResponse>, Status> {
        Err(Status::unimplemented("bench baseline"))
    }
    async fn deregister_tools(
        &self,
        _: Request<pb::DeregisterToolsRequest>,
    ) -> Result<Response<pb::DeregisterToolsResponse>, Status> {
        Err(Status::unimplemented("bench baseline"))
    }
    async fn list_tool_hosts(
        &self,
        _: Request<pb::ListToolHostsRequest>,
    ) -> Result<Response<pb::ListToolHostsResponse>, Status> {
        Err(Status::unimplemented("bench baseline"))
    }
    async fn refresh_sources(
        &self,
        _: Request<pb::RefreshSourcesRequest>,
    ) -> Result<Response<pb::RefreshSourcesResponse>, Status> {
        Err(Status::unimplemented("bench baseline"))
    }
}

async fn connect(url: String) -> CatalogServiceClient<Channel> {
    let channel = Channel::from_shared(url)
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    CatalogServiceClient::new(channel).max_decoding_message_size(64 << 20)
}

async fn get(client: &reqwest::Client, url: &str) -> Bytes {
    let r = client.get(url).send().await.unwrap();
    assert!(r.status().is_success());
    r.bytes().await.unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // The catalog with 5,000 external tools.
    let catalog = rt
        .block_on(toolplane_catalog::start(CatalogConfig::ephemeral()))
        .unwrap();
    let mut client = rt.block_on(connect(catalog.grpc_url()));
    for host in 0..HOSTS {
        rt.block_on(client.register_tools(registration(host)))
            .unwrap();
    }
    let pages = rt.block_on(list_all(&mut client));
    let total: usize = pages.iter().map(|p| p.tools.len()).sum();
    assert_eq!(
        total,
        HOSTS * TOOLS_PER_HOST,
        "ListTools returns all 5,000 tools"
    );

    // The bare tonic handler returning the same responses.
    let mut keyed = HashMap::new();
    let mut token = String::new();
    for page in &pages {
        keyed.insert(token.clone(), page.clone());
        token = page.next_page_token.clone();
    }
    let bare = Bare {
        pages: Arc::new(keyed),
    };
    let bare_server = rt
        .block_on(toolplane_testkit::spawn_routes(
            tonic::service::Routes::new(CatalogServiceServer::new(bare)),
        ))
        .unwrap();
    let mut bare_client = rt.block_on(connect(bare_server.url()));
    assert_eq!(
        rt.block_on(list_all(&mut bare_client)),
        pages,
        "the baseline returns the same responses"
    );

    // HTTP: the catalog's GET /tools and a bare axum handler returning the same bytes.
    let http = reqwest::Client::new();
    let tools_url = format!("{}/tools?source=external", catalog.http_url());
    let body = rt.block_on(get(&http, &tools_url));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        listed.len(),
        HOSTS * TOOLS_PER_HOST,
        "GET /tools returns all 5,000 tools"
    );
    let same = body.clone();
    let app = axum::Router::new().route(
        "/tools",
        axum::routing::get(move || {
            let body = same.clone();
            async move { ([(http::header::CONTENT_TYPE, "application/json")], body) }
        }),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let bare_http_url = format!(
        "http://{}/tools?source=external",
        listener.local_addr().unwrap()
    );
    rt.spawn(async move { axum::serve(listener, app).await });
    assert_eq!(
        rt.block_on(get(&http, &bare_http_url)),
        body,
        "the baseline returns the same bytes"
    );

    let mut c = Criterion::default()
        .output_directory(&toolplane_bench::criterion_dir())
        .sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(6))
        .configure_from_args();
    c.bench_function("catalog_baseline_tonic_list_tools_5000", |b| {
        b.iter(|| black_box(rt.block_on(list_all(&mut bare_client))))
    });
    c.bench_function("catalog_list_tools_5000", |b| {
        b.iter(|| black_box(rt.block_on(list_all(&mut client))))
    });
    c.bench_function("catalog_baseline_axum_get_tools_5000", |b| {
        b.iter(|| black_box(rt.block_on(get(&http, &bare_http_url))))
    });
    c.bench_function("catalog_get_tools_5000", |b| {
        b.iter(|| black_box(rt.block_on(get(&http, &tools_url))))
    });
    c.final_summary();

    let ok = report(&[
        Ratio {
            subject: "catalog_list_tools_5000",
            baseline: "catalog_baseline_tonic_list_tools_5000",
            target: 3.0,
        },
        Ratio {
            subject: "catalog_get_tools_5000",
            baseline: "catalog_baseline_axum_get_tools_5000",
            target: 3.0,
        },
    ]);
    rt.block_on(catalog.shutdown()).unwrap();
    if !ok {
        std::process::exit(1);
    }
}
