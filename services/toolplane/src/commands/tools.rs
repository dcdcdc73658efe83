//! `toolplane tools ls|describe`: the catalog's listings, as a table, as the text a model reads,
//! or as JSON. `tools ls --json` prints one JSON array whose objects carry at least `id`,
//! `source`, `category`, `usable` and `reason` (null for usable tools); scripts rely on that shape.

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;

use crate::cli::{ToolsCommand, ToolsDescribeArgs, ToolsLsArgs};
use crate::client::{Conn, Endpoints, MAX_MESSAGE_BYTES};
use crate::convert::{
    category_name, diagnostic_json, listing_json, parse_source, source_name, unusable_reason,
};
use crate::error::CliError;
use crate::output::{Out, line, table, warn};

/// Most pages one listing follows (1,000 tools a page).
const MAX_PAGES: usize = 1_000;

pub async fn run(command: ToolsCommand, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let conn = eps.connect("catalog", &eps.catalog).await?;
    match command {
        ToolsCommand::Ls(args) => ls(&conn, eps, args, out).await,
        ToolsCommand::Describe(args) => describe(&conn, eps, args, out).await,
    }
}

fn client(conn: &Conn) -> CatalogServiceClient<crate::client::AuthChannel> {
    CatalogServiceClient::new(conn.channel.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

async fn ls(conn: &Conn, eps: &Endpoints, args: ToolsLsArgs, out: Out) -> Result<(), CliError> {
    let mut sources = Vec::new();
    for s in &args.source {
        let source = parse_source(s.trim()).ok_or_else(|| {
            CliError::InvalidInput(format!(
                "--source `{s}` is not builtin, mcp, external, adapter, agent or run"
            ))
        })?;
        sources.push(source as i32);
    }
    let mut catalog = client(conn);
    let mut tools = Vec::new();
    let mut omitted = Vec::new();
    let mut states = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = catalog
            .list_tools(pb::ListToolsRequest {
                cell_id: eps.cell.clone(),
                sources: sources.clone(),
                include_unusable: args.all,
                profile_id: args.profile.clone().unwrap_or_default(),
                query: args.query.clone().unwrap_or_default(),
                page_size: 1000,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        tools.extend(page.tools);
        omitted.extend(page.omitted);
        states = page.sources;
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }

    if out.json {
        return out.json(&Value::Array(tools.iter().map(listing_json).collect()));
    }
    let rows: Vec<Vec<String>> = tools
        .iter()
        .map(|l| {
            let usable = match unusable_reason(l) {
                None if l.usable => "yes".to_owned(),
                None => "no".to_owned(),
                Some(d) => format!("no: {}", d.code),
            };
            vec![
                l.descriptor
                    .as_ref()
                    .map(|d| d.id.clone())
                    .unwrap_or_default(),
                source_name(l.source).to_owned(),
                category_name(l.category).to_owned(),
                usable,
            ]
        })
        .collect();
    line(&table(&["ID", "SOURCE", "CATEGORY", "USABLE"], &rows))?;
    let hidden = if args.all {
        String::new()
    } else {
        " (usable only; --all lists the others with the reason)".to_owned()
    };
    line(&format!("{} tools{hidden}", tools.len()))?;
    for o in &omitted {
        let d = o.diagnostic.clone().unwrap_or_default();
        line(
            format!(
                "omitted {} ({}): {} {}",
                o.tool_id, o.selector, d.code, d.message
            )
            .trim_end(),
        )?;
    }
    for s in states.iter().filter(|s| !s.available) {
        for d in &s.diagnostics {
            warn(&format!(
                "{} source unavailable: {}: {}",
                source_name(s.source),
                d.code,
                d.message
            ));
        }
    }
    Ok(())
}

async fn describe(
    conn: &Conn,
    eps: &Endpoints,
    args: ToolsDescribeArgs,
    out: Out,
) -> Result<(), CliError> {
    if args.tool_ids.is_empty() && args.profile.is_none() {
        return Err(CliError::InvalidInput(
            "name tool ids to describe, or a --profile whose tools to describe".into(),
        ));
    }
    let mut catalog = client(conn);
    let described = catalog
        .describe_tools(pb::DescribeToolsRequest {
            cell_id: eps.cell.clone(),
            tool_ids: args.tool_ids.clone(),
            profile_id: args.profile.clone().unwrap_or_default(),
            ..Default::default()
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    let mut listings = Vec::new();
    for id in &args.tool_ids {
        let tool = catalog
            .get_tool(pb::GetToolRequest {
                cell_id: eps.cell.clone(),
                tool_id: id.clone(),
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner()
            .tool
            .unwrap_or_default();
        listings.push(tool);
    }

    if out.json {
        let items: Vec<Value> = described
            .tools
            .iter()
            .map(|t| {
                let mut v = match listings
                    .iter()
                    .find(|l| l.descriptor.as_ref().is_some_and(|d| d.id == t.tool_id))
                {
                    Some(l) => listing_json(l),
                    None => json!({"id": t.tool_id, "title": t.title}),
                };
                if let Some(o) = v.as_object_mut() {
                    o.insert("text".into(), json!(t.text));
                }
                v
            })
            .collect();
        return out.json(&Value::Array(items));
    }
    if args.tool_ids.is_empty() {
        return line(described.text.trim_end());
    }
    let mut blocks = Vec::new();
    for t in &described.tools {
        let header = if t.title.is_empty() || t.title == t.tool_id {
            t.tool_id.clone()
        } else {
            format!("{} — {}", t.tool_id, t.title)
        };
        let mut block = vec![header];
        if let Some(l) = listings
            .iter()
            .find(|l| l.descriptor.as_ref().is_some_and(|d| d.id == t.tool_id))
        {
            let usable = match unusable_reason(l) {
                None if l.usable => "usable".to_owned(),
                None => "not usable".to_owned(),
                Some(d) => format!("not usable: {} {}", d.code, d.message)
                    .trim_end()
                    .to_owned(),
            };
            let mut facts = format!(
                "source {} · category {} · {usable}",
                source_name(l.source),
                category_name(l.category)
            );
            if let Some(m) = &l.mcp {
                facts.push_str(&format!(
                    " · server {} ({})",
                    m.server_display_name,
                    crate::convert::permission_name(m.permission)
                ));
            }
            block.push(facts);
            for d in l.diagnostics.iter().skip(usize::from(!l.usable)) {
                block.push(format!("note: {}: {}", d.code, d.message));
            }
        }
        block.push(t.text.trim_end().to_owned());
        blocks.push(block.join("\n"));
    }
    line(&blocks.join("\n\n"))
}

/// Diagnostics as JSON, for commands that print warnings in `--json` mode.
pub fn warnings_json(warnings: &[pb::Diagnostic]) -> Value {
    Value::Array(warnings.iter().map(diagnostic_json).collect())
}
