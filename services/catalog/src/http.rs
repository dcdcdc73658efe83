//! The HTTP reading surface: `GET /tools` (JSON listings with JSON Schemas),
//! `GET /tools/descriptions` (plain text), `GET /tools/omitted` (what a profile names but would
//! not see), `GET /sources` (each source's state), `GET /healthz` and `GET /metrics` (Prometheus
//! text).
//!
//! Same filters and cursor as gRPC `ListTools`, as query parameters. A plain listing is written
//! straight from the JSON prepared at assembly. Read-only: nothing here changes state.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use http::{HeaderValue, StatusCode, header};
use toolplane_auth::Caller;
use toolplane_core::catalog::ToolSource;
use toolplane_core::category::Category;
use toolplane_telemetry::metrics::Registry;

use crate::cell::{ActorId, CellId, parse_segment};
use crate::error::CatalogError;
use crate::query::{self, ListFilter, PageToken};
use crate::state::Catalog;
use crate::tools::{ListRequest, Measure, Row};

/// `GET /tools` pages: everything up to 10,000 listings by default.
const DEFAULT_PAGE: usize = 10_000;
const MAX_PAGE: usize = 10_000;
/// Largest `GET /tools` body, in bytes.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Most query parameters, and the longest query string, accepted.
const MAX_PARAMS: usize = 1100;
const MAX_QUERY_STRING: usize = 64 * 1024;

/// The response header carrying the next page's token.
pub const NEXT_PAGE_HEADER: &str = "x-next-page-token";

/// The HTTP routes over a catalog; `/metrics` also renders `registry` (the metrics the server
/// itself keeps, such as `toolplane_handler_panics_total`).
pub fn router(catalog: Arc<Catalog>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/tools", get(tools))
        .route("/tools/descriptions", get(descriptions))
        .route("/tools/omitted", get(omitted))
        .route("/sources", get(sources))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn(trace))
        .layer(Extension(registry))
        .with_state(catalog)
}

/// One server span per request, parented on the caller's W3C trace context when it sent one.
async fn trace(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!(
        "http_server",
        otel.name = %format!("{} {path}", request.method()),
        otel.kind = "server",
        http.request.method = %request.method(),
        url.path = %path,
        http.response.status_code = tracing::field::Empty,
    );
    // Fails only without an OpenTelemetry layer (plain logs): then there is no trace to join.
    let _ = span.set_parent(toolplane_telemetry::extract_context(request.headers()));
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// Errors as `{"code": …, "message": …}` with the matching HTTP status.
enum HttpError {
    Catalog(CatalogError),
    /// The request named another cell than the caller's (403).
    Auth(toolplane_auth::AuthError),
}

impl From<CatalogError> for HttpError {
    fn from(e: CatalogError) -> Self {
        HttpError::Catalog(e)
    }
}

/// The cell a request acts in: the caller's (see `crate::cells`), as the `cell` parameter names
/// it when authentication is off.
fn cell_param(caller: &Option<Extension<Caller>>, p: &Params) -> Result<CellId, HttpError> {
    let requested = p.one("cell").unwrap_or("");
    let cell = match caller {
        Some(Extension(caller)) => caller.scope(requested).map_err(HttpError::Auth)?,
        None => requested.to_owned(),
    };
    Ok(CellId::parse(&cell)?)
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let e = match self {
            HttpError::Catalog(e) => e,
            HttpError::Auth(e) => {
                let body = serde_json::json!({"code": e.code(), "message": e.to_string()});
                return (
                    StatusCode::FORBIDDEN,
                    [(header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response();
            }
        };
        let status = e.http_status();
        if status.is_server_error() {
            tracing::error!(code = e.code(), error = %e, "http request failed");
        }
        let body = serde_json::json!({"code": e.code(), "message": e.to_string()});
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// Decoded query parameters, in order.
#[derive(Debug, Default)]
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(raw: Option<String>) -> Result<Params, CatalogError> {
        let raw = raw.unwrap_or_default();
        if raw.len() > MAX_QUERY_STRING {
            return Err(CatalogError::invalid_request("query string too long"));
        }
        let mut out = Vec::new();
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            out.push((decode(k)?, decode(v)?));
            if out.len() > MAX_PARAMS {
                return Err(CatalogError::invalid_request("too many query parameters"));
            }
        }
        Ok(Params(out))
    }

    fn one(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeatable parameter; commas also separate values.
    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect()
    }

    fn flag(&self, name: &str) -> Result<bool, CatalogError> {
        match self.one(name) {
            None | Some("false" | "0") => Ok(false),
            Some("" | "true" | "1") => Ok(true),
            Some(other) => Err(CatalogError::invalid_request(format!(
                "{name}={} is not true or false",
                crate::cell::shown(other)
            ))),
        }
    }
}

/// Percent-decoding of one query component (`+` is a space).
fn decode(s: &str) -> Result<String, CatalogError> {
    let bad = || CatalogError::invalid_request("malformed percent-encoding in the query string");
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

fn parse_source(s: &str) -> Result<ToolSource, CatalogError> {
    match s {
        "agent" => Ok(ToolSource::SubAgent),
        "run" => Ok(ToolSource::RunSpec),
        _ => ToolSource::parse(s).ok_or_else(|| {
            CatalogError::invalid_request(format!(
                "source `{}` is not builtin, mcp, external, adapter, sub_agent or run_spec",
                crate::cell::shown(s)
            ))
        }),
    }
}

fn parse_category(s: &str) -> Result<Category, CatalogError> {
    Category::parse(s).ok_or_else(|| {
        CatalogError::invalid_request(format!(
            "category `{}` is not exploration or action",
            crate::cell::shown(s)
        ))
    })
}

struct Common {
    cell: CellId,
    filter: ListFilter,
    profile: Option<String>,
    actor: Option<ActorId>,
}

fn common(p: &Params, caller: &Option<Extension<Caller>>) -> Result<Common, HttpError> {
    let filter = ListFilter::new(
        p.all("source")
            .into_iter()
            .map(parse_source)
            .collect::<Result<_, _>>()?,
        p.all("category")
            .into_iter()
            .map(parse_category)
            .collect::<Result<_, _>>()?,
        p.flag("include_unusable")?,
        p.one("provider").unwrap_or(""),
        p.one("query").unwrap_or(""),
    )?;
    let profile = p
        .one("profile")
        .filter(|s| !s.is_empty())
        .map(|s| parse_segment("profile id", s))
        .transpose()?;
    let actor = ActorId::parse_optional(p.one("actor").unwrap_or(""))?;
    if actor.is_some() && profile.is_none() {
        return Err(CatalogError::invalid_request("actor needs profile").into());
    }
    Ok(Common {
        cell: cell_param(caller, p)?,
        filter,
        profile,
        actor,
    })
}

fn json_response(body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn tools(
    State(catalog): State<Arc<Catalog>>,
    caller: Option<Extension<Caller>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HttpError> {
    let p = Params::parse(raw)?;
    let c = common(&p, &caller)?;
    let size = match p.one("limit") {
        Some(s) => s
            .parse::<u32>()
            .map_err(|_| CatalogError::invalid_request("limit is not a number"))?,
        None => 0,
    };
    let page = catalog
        .list_tools(ListRequest {
            cell: c.cell,
            filter: c.filter,
            profile_id: c.profile,
            actor: c.actor,
            page_size: query::page_size(size, DEFAULT_PAGE, MAX_PAGE),
            token: PageToken::decode(p.one("page_token").unwrap_or(""))?,
            budget: MAX_BODY,
            measure: Measure::Json,
        })
        .await?;
    let mut body = Vec::with_capacity(
        page.rows
            .iter()
            .map(|r| match r {
                Row::Prepared(i) => page.assembled.tools[*i].json.len() + 1,
                Row::View(_) => 1024,
            })
            .sum::<usize>()
            + 2,
    );
    body.push(b'[');
    for (n, row) in page.rows.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        match row {
            Row::Prepared(i) => body.extend_from_slice(&page.assembled.tools[*i].json),
            Row::View(l) => {
                // A listing of JSON values always serialises.
                body.extend(serde_json::to_vec(l).unwrap_or_else(|_| b"{}".to_vec()));
            }
        }
    }
    body.push(b']');
    let mut response = json_response(body);
    if let Some(next) = page.next
        && let Ok(v) = HeaderValue::from_str(&next.encode())
    {
        response.headers_mut().insert(NEXT_PAGE_HEADER, v);
    }
    Ok(response)
}

async fn descriptions(
    State(catalog): State<Arc<Catalog>>,
    caller: Option<Extension<Caller>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HttpError> {
    let p = Params::parse(raw)?;
    let c = common(&p, &caller)?;
    let ids: Vec<String> = p.all("tool_id").into_iter().map(str::to_owned).collect();
    let d = catalog
        .describe_tools(
            &c.cell,
            &ids,
            c.profile.as_deref(),
            c.actor.as_ref(),
            &c.filter,
        )
        .await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        d.text,
    )
        .into_response())
}

async fn omitted(
    State(catalog): State<Arc<Catalog>>,
    caller: Option<Extension<Caller>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HttpError> {
    let p = Params::parse(raw)?;
    let c = common(&p, &caller)?;
    let Some(profile) = c.profile else {
        return Err(CatalogError::invalid_request("GET /tools/omitted needs profile").into());
    };
    let (_, view) = catalog
        .view_for_profile(&c.cell, &profile, c.actor.as_ref())
        .await?;
    let body = serde_json::to_vec(&view.omitted).unwrap_or_else(|_| b"[]".to_vec());
    Ok(json_response(body))
}

async fn sources(
    State(catalog): State<Arc<Catalog>>,
    caller: Option<Extension<Caller>>,
    RawQuery(raw): RawQuery,
) -> Result<Response, HttpError> {
    let p = Params::parse(raw)?;
    let cell = cell_param(&caller, &p)?;
    let c = catalog.cell(&cell).await?;
    let statuses = if p.flag("refresh")? {
        catalog.refresh(&c).await
    } else {
        c.statuses()
    };
    let body = serde_json::to_vec(&statuses).unwrap_or_else(|_| b"[]".to_vec());
    Ok(json_response(body))
}

/// Prometheus text: tools per cell, source and usability; whether each source could be read;
/// the cells in memory; then the server's own metrics.
async fn metrics(
    State(catalog): State<Arc<Catalog>>,
    Extension(registry): Extension<Arc<Registry>>,
) -> Response {
    use std::fmt::Write;
    let mut cells = catalog.known_cells();
    cells.sort_by(|a, b| a.id().cmp(b.id()));
    let mut out = String::new();
    out.push_str("# HELP toolplane_catalog_tools Tools in the catalog, by cell, source and usability.\n# TYPE toolplane_catalog_tools gauge\n");
    let statuses: Vec<_> = cells
        .iter()
        .map(|c| (c.id().clone(), c.statuses()))
        .collect();
    for (cell, list) in &statuses {
        for s in list {
            let source = s.source.as_str();
            let unusable = s.tool_count.saturating_sub(s.usable_tool_count);
            let _ = writeln!(
                out,
                "toolplane_catalog_tools{{cell=\"{cell}\",source=\"{source}\",usable=\"true\"}} {}",
                s.usable_tool_count
            );
            let _ = writeln!(
                out,
                "toolplane_catalog_tools{{cell=\"{cell}\",source=\"{source}\",usable=\"false\"}} {unusable}"
            );
        }
    }
    out.push_str("# HELP toolplane_catalog_source_available Whether a source could be read at its last refresh.\n# TYPE toolplane_catalog_source_available gauge\n");
    for (cell, list) in &statuses {
        for s in list {
            let _ = writeln!(
                out,
                "toolplane_catalog_source_available{{cell=\"{cell}\",source=\"{}\"}} {}",
                s.source.as_str(),
                u8::from(s.available)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP toolplane_catalog_cells Cells the catalog keeps in memory.\n# TYPE toolplane_catalog_cells gauge\ntoolplane_catalog_cells {}",
        cells.len()
    );
    out.push_str(&registry.render());
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_decode() {
        let p = Params::parse(Some(
            "source=mcp,external&source=builtin&query=read+a%20file&include_unusable".into(),
        ))
        .unwrap();
        assert_eq!(p.all("source"), ["mcp", "external", "builtin"]);
        assert_eq!(p.one("query"), Some("read a file"));
        assert!(p.flag("include_unusable").unwrap());
        assert!(!p.flag("missing").unwrap());
        for bad in ["a=%zz", "a=%4", "a=%ff"] {
            assert!(Params::parse(Some(bad.into())).is_err(), "{bad}");
        }
    }
}
