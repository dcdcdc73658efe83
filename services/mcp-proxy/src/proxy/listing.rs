//! The listings: registrations and cached tools of a cell, filtered and paged, answered from
//! memory only; page tokens are opaque and checked.

use super::*;

impl McpProxy {
    /// Registrations of a cell, ordered by display name, a page at a time.
    pub fn list_servers(
        &self,
        cell_id: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<ServerView>, String), ProxyError> {
        let cell = cell_or_default(cell_id)?;
        let size = page_len(page_size);
        let after = decode_token("mcp.servers", page_token)?;
        let servers = self.servers_of(&cell);
        let start = match &after {
            Some((name, _)) => servers
                .iter()
                .position(|s| s.registration().display_name.as_str() > name.as_str())
                .unwrap_or(servers.len()),
            None => 0,
        };
        let page: Vec<ServerView> = servers
            .iter()
            .skip(start)
            .take(size)
            .map(|s| self.view(s))
            .collect();
        let next = if start + page.len() < servers.len() {
            page.last()
                .map(|v| encode_token("mcp.servers", &v.reg.display_name, 0))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok((page, next))
    }

    /// Cached tools of a cell from memory only, ordered by server display name, then the
    /// server's listing order. Unusable tools (and permissions stored for tools not in the cache)
    /// only when asked for.
    pub fn list_cached_tools(
        &self,
        cell_id: &str,
        server_ids: &[String],
        include_unusable: bool,
        query: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<ToolView>, String), ProxyError> {
        let cell = cell_or_default(cell_id)?;
        let filter: Vec<String> = server_ids
            .iter()
            .map(|s| parse_server_id(s))
            .collect::<Result<_, _>>()?;
        if query.len() > 1024 {
            return Err(ProxyError::new(
                MCP_INVALID_REQUEST,
                "query over 1024 bytes",
            ));
        }
        let size = page_len(page_size);
        let resume = decode_token("mcp.tools", page_token)?;
        let query = query.to_lowercase();
        let mut out = Vec::new();
        for server in self.servers_of(&cell) {
            let reg = server.registration();
            if !filter.is_empty() && !filter.contains(&reg.server_id) {
                continue;
            }
            let skip = match &resume {
                Some((name, _)) if reg.display_name.as_str() < name.as_str() => continue,
                Some((name, index)) if *name == reg.display_name => *index,
                _ => 0,
            };
            let catalog = server.cached();
            let mut entries: Vec<ToolView> = catalog
                .iter()
                .flat_map(|c| c.entries())
                .map(|entry| ToolView {
                    usability: usability(&reg, entry),
                    reg: Arc::clone(&reg),
                    native: entry.tool.name.clone(),
                    tool: Some(entry.tool.clone()),
                    catalog_version: catalog.as_ref().map_or(0, |c| c.version()),
                })
                .collect();
            for (name, permission) in &reg.tool_permissions {
                if catalog.as_ref().is_none_or(|c| c.get(name).is_none()) {
                    entries.push(ToolView {
                        usability: Usability {
                            permission: *permission,
                            omit: Some(toolplane_core::catalog::OmitReason::NotCached),
                            notes: vec![Note::new(
                                crate::error::MCP_NO_CACHE.code,
                                format!(
                                    "permission {permission:?} is stored for `{}`, but it is not in the cached tool list",
                                    shown(name)
                                )
                                .to_lowercase(),
                                format!("mcp/{}:{name}", reg.server_id),
                            )],
                        },
                        reg: Arc::clone(&reg),
                        native: name.clone(),
                        tool: None,
                        catalog_version: 0,
                    });
                }
            }
            for (index, entry) in entries.into_iter().enumerate().skip(skip) {
                if !include_unusable && !entry.usable() {
                    continue;
                }
                if !query.is_empty() && !matches_query(&entry, &query) {
                    continue;
                }
                if out.len() == size {
                    return Ok((out, encode_token("mcp.tools", &reg.display_name, index)));
                }
                out.push(entry);
            }
        }
        Ok((out, String::new()))
    }
}

fn matches_query(entry: &ToolView, query: &str) -> bool {
    let hit = |s: &str| s.to_lowercase().contains(query);
    hit(&entry.native)
        || entry.tool.as_ref().is_some_and(|t| {
            t.title.as_deref().is_some_and(hit) || t.description.as_deref().is_some_and(hit)
        })
}

fn page_len(page_size: u32) -> usize {
    match page_size {
        0 => 100,
        n => usize::try_from(n.min(1000)).unwrap_or(1000),
    }
}

/// Page tokens: hex of `<display name>\n<index>`, opaque to callers.
/// The opaque token (`toolplane_proto::page_token`) of a page resuming at `index` of the
/// registration named `name`, in `listing` (`mcp.servers` or `mcp.tools`).
fn encode_token(listing: &str, name: &str, index: usize) -> String {
    toolplane_proto::page_token::encode(listing, &format!("{name}\n{index}"))
}

fn decode_token(listing: &'static str, token: &str) -> Result<Option<(String, usize)>, ProxyError> {
    let bad = |e: toolplane_proto::page_token::InvalidPageToken| {
        ProxyError::new(REQUEST_INVALID_PAGE_TOKEN, e.to_string())
    };
    let Some(cursor) = toolplane_proto::page_token::decode(listing, token).map_err(bad)? else {
        return Ok(None);
    };
    let invalid = || bad(toolplane_proto::page_token::InvalidPageToken { listing });
    let (name, index) = cursor.rsplit_once('\n').ok_or_else(invalid)?;
    Ok(Some((
        name.to_owned(),
        index.parse().map_err(|_| invalid())?,
    )))
}
