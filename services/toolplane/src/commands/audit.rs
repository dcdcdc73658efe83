//! `toolplane audit admin`: the admin audit of the plane — every token, registration, policy,
//! profile and skill change of the caller's cell — read from each service that keeps one
//! (catalog, mcp-proxy, workspace) through `AdminAuditService/ListAdminAudit`, and merged by
//! time (docs/auth.md, "Admin audit").

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::admin_audit_service_client::AdminAuditServiceClient;

use crate::cli::AuditCommand;
use crate::client::Endpoints;
use crate::error::CliError;
use crate::output::{Out, line, table};

/// Most records read from one service; a plane with more is read with `--since`.
const MAX_RECORDS_PER_SERVICE: usize = 10_000;
const PAGE: u32 = 500;

pub async fn run(command: AuditCommand, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let AuditCommand::Admin { since, kind } = command;
    let services: [(&'static str, &str); 3] = [
        ("catalog", eps.catalog.as_str()),
        ("mcp-proxy", eps.mcp_proxy.as_str()),
        ("workspace", eps.workspace.as_str()),
    ];
    let mut records = Vec::new();
    for (service, address) in services {
        records.extend(read(eps, service, address, since, &kind).await?);
    }
    records.sort_by(|a, b| {
        (a.at_unix_ms, &a.service, &a.record_id).cmp(&(b.at_unix_ms, &b.service, &b.record_id))
    });
    if out.json {
        return out.json(&Value::Array(records.iter().map(record_json).collect()));
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.at_unix_ms.to_string(),
                r.service.clone(),
                r.who.clone(),
                r.role.clone(),
                r.kind.clone(),
                r.rpc.clone(),
                r.object_id.clone(),
                r.summary.clone(),
            ]
        })
        .collect();
    line(&table(
        &[
            "AT (UNIX MS)",
            "SERVICE",
            "WHO",
            "ROLE",
            "KIND",
            "RPC",
            "OBJECT",
            "SUMMARY",
        ],
        &rows,
    ))
}

/// Every record of one service, page by page.
async fn read(
    eps: &Endpoints,
    service: &'static str,
    address: &str,
    since: u64,
    kind: &str,
) -> Result<Vec<pb::AdminAuditRecord>, CliError> {
    let conn = eps.connect(service, address).await?;
    let mut client = AdminAuditServiceClient::new(conn.channel.clone());
    let mut records = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_admin_audit(pb::ListAdminAuditRequest {
                cell_id: eps.cell.clone(),
                since_unix_ms: since,
                kind: kind.to_owned(),
                page_size: PAGE,
                page_token,
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        records.extend(page.records);
        if page.next_page_token.is_empty() || records.len() >= MAX_RECORDS_PER_SERVICE {
            return Ok(records);
        }
        page_token = page.next_page_token;
    }
}

fn record_json(r: &pb::AdminAuditRecord) -> Value {
    json!({
        "recordId": r.record_id,
        "atUnixMs": r.at_unix_ms,
        "service": r.service,
        "cellId": r.cell_id,
        "who": r.who,
        "principal": r.principal,
        "callerKind": r.caller_kind,
        "role": r.role,
        "kind": r.kind,
        "rpc": r.rpc,
        "objectId": r.object_id,
        "summary": r.summary,
    })
}
