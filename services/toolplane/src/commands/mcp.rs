//! `toolplane mcp add|ls|refresh|pause|resume|permit|rm`: MCP server registrations through the
//! mcp-proxy, named by display name. After every change the catalog is asked to pull its sources
//! so `tools ls` shows the change at once. `mcp add` leaves the server active and discovered, and
//! its tools off unless `--allow` says otherwise — and says so, since an added server whose tools
//! are all off is the most common surprise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;

use crate::cli::{McpAddArgs, McpCommand, McpPermitArgs, Permission};
use crate::client::{Conn, Endpoints, MAX_MESSAGE_BYTES};
use crate::commands::tools::warnings_json;
use crate::convert::{
    cached_tool_json, connection_name, permission_name, server_json, server_state_name,
};
use crate::error::CliError;
use crate::output::{Out, line, progress, table, warn};

type Proxy = McpProxyServiceClient<crate::client::AuthChannel>;

pub async fn run(command: McpCommand, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    // Check the arguments before connecting: a malformed `add` is the user's to fix.
    let add = match &command {
        McpCommand::Add(args) => Some(transport(args)?),
        _ => None,
    };
    let command = match command {
        McpCommand::Serve(args) => return crate::commands::mcp_serve::run(args, eps).await,
        other => other,
    };
    let conn = eps.connect("mcp-proxy", &eps.mcp_proxy).await?;
    let mut proxy: Proxy = McpProxyServiceClient::new(conn.channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    match command {
        McpCommand::Add(args) => {
            let Some(transport) = add else { return Ok(()) };
            add_server(&conn, &mut proxy, eps, args, transport, out).await
        }
        McpCommand::Ls { name: None } => list_servers(&conn, &mut proxy, eps, out).await,
        McpCommand::Ls { name: Some(name) } => {
            let server = find(&conn, &mut proxy, eps, &name).await?;
            let tools = cached_tools(&conn, &mut proxy, eps, &server.server_id).await?;
            if out.json {
                return out.json(&json!({"server": server_json(&server), "tools": tools.iter().map(cached_tool_json).collect::<Vec<_>>()}));
            }
            line(&describe_server(&server))?;
            let rows: Vec<Vec<String>> = tools
                .iter()
                .map(|t| {
                    let status = t.status.clone().unwrap_or_default();
                    let usable = if t.usable {
                        "yes".to_owned()
                    } else {
                        t.diagnostics
                            .first()
                            .map(|d| format!("no: {}", d.code))
                            .unwrap_or_else(|| "no".into())
                    };
                    vec![
                        status.native_name,
                        permission_name(status.permission).to_owned(),
                        usable,
                        t.descriptor
                            .as_ref()
                            .map(|d| d.id.clone())
                            .unwrap_or_default(),
                    ]
                })
                .collect();
            line(&table(&["TOOL", "PERMISSION", "USABLE", "ID"], &rows))
        }
        McpCommand::Refresh { name } => {
            let server = find(&conn, &mut proxy, eps, &name).await?;
            progress(&format!("refreshing `{name}`…"));
            let r = proxy
                .refresh_server(pb::RefreshServerRequest {
                    cell_id: eps.cell.clone(),
                    server_id: server.server_id.clone(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            refresh_catalog(eps).await;
            let server = r.server.clone().unwrap_or_default();
            if out.json {
                out.json(&json!({"server": server_json(&server), "addedToolIds": r.added_tool_ids, "removedToolIds": r.removed_tool_ids, "warnings": warnings_json(&r.warnings)}))?;
            } else {
                print_warnings(&r.warnings);
                line(&format!(
                    "refreshed `{name}`: {} tools ({} added, {} removed), {}",
                    server.cached_tool_count,
                    r.added_tool_ids.len(),
                    r.removed_tool_ids.len(),
                    connection_name(server.connection)
                ))?;
            }
            connection_result(&server, &r.warnings)
        }
        McpCommand::Pause { name } => {
            set_state(
                &conn,
                &mut proxy,
                eps,
                &name,
                pb::McpServerState::Paused,
                out,
            )
            .await
        }
        McpCommand::Resume { name } => {
            set_state(
                &conn,
                &mut proxy,
                eps,
                &name,
                pb::McpServerState::Active,
                out,
            )
            .await
        }
        McpCommand::Permit(args) => permit(&conn, &mut proxy, eps, args, out).await,
        McpCommand::Rm { name } => {
            let server = find(&conn, &mut proxy, eps, &name).await?;
            let r = proxy
                .deregister_server(pb::DeregisterServerRequest {
                    cell_id: eps.cell.clone(),
                    server_id: server.server_id.clone(),
                })
                .await
                .map_err(|s| conn.err(s))?
                .into_inner();
            refresh_catalog(eps).await;
            if out.json {
                return out.json(&json!({"serverId": server.server_id, "displayName": server.display_name, "removedToolIds": r.removed_tool_ids}));
            }
            line(&format!(
                "removed MCP server `{name}` and its {} tools",
                r.removed_tool_ids.len()
            ))
        }
        // Answered above, without the mcp-proxy.
        McpCommand::Serve(_) => Ok(()),
    }
}

fn pairs(values: &[String], flag: &str) -> Result<HashMap<String, String>, CliError> {
    let mut map = HashMap::new();
    for v in values {
        let Some((k, val)) = v.split_once('=') else {
            return Err(CliError::InvalidInput(format!(
                "{flag} `{v}` is not NAME=VALUE"
            )));
        };
        if k.is_empty() {
            return Err(CliError::InvalidInput(format!(
                "{flag} `{v}` has an empty name"
            )));
        }
        map.insert(k.to_owned(), val.to_owned());
    }
    Ok(map)
}

/// A command given as a relative path (`./server`, `bin/server`) means the user's directory, not
/// the mcp-proxy's: make it absolute. Bare names (`npx`) are looked up on PATH by the proxy.
fn absolute_command(command: &str, cwd: &Path) -> String {
    let path = Path::new(command);
    if path.is_relative() && command.contains('/') {
        cwd.join(path).to_string_lossy().into_owned()
    } else {
        command.to_owned()
    }
}

fn current_dir() -> Result<PathBuf, CliError> {
    std::env::current_dir()
        .map_err(|e| CliError::Io(format!("cannot read the current directory: {e}")))
}

/// The registration's transport from `--stdio -- COMMAND…` or `--url`.
fn transport(args: &McpAddArgs) -> Result<pb::McpTransport, CliError> {
    let kind = match (&args.url, args.stdio) {
        (Some(url), false) => {
            if !args.command.is_empty() {
                return Err(CliError::InvalidInput(
                    "--url takes no command after `--`".into(),
                ));
            }
            if !args.env.is_empty() || !args.inherit_env.is_empty() || args.cwd.is_some() {
                return Err(CliError::InvalidInput(
                    "--env, --inherit-env and --cwd are for --stdio servers".into(),
                ));
            }
            pb::mcp_transport::Kind::StreamableHttp(pb::McpStreamableHttpTransport {
                url: url.clone(),
                headers: pairs(&args.header, "--header")?,
                header_env: pairs(&args.header_env, "--header-env")?,
            })
        }
        (None, true) => {
            let Some((command, rest)) = args.command.split_first() else {
                return Err(CliError::InvalidInput(format!(
                    "--stdio needs the server's command after `--`: toolplane mcp add {} --stdio -- COMMAND [ARGS…]",
                    args.name
                )));
            };
            if !args.header.is_empty() || !args.header_env.is_empty() {
                return Err(CliError::InvalidInput(
                    "--header and --header-env are for --url servers".into(),
                ));
            }
            let cwd = match &args.cwd {
                Some(dir) if dir.is_absolute() => dir.clone(),
                Some(dir) => current_dir()?.join(dir),
                None => current_dir()?,
            };
            pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                command: absolute_command(command, &cwd),
                args: rest.to_vec(),
                env: pairs(&args.env, "--env")?,
                inherit_env: args.inherit_env.clone(),
                cwd: cwd.to_string_lossy().into_owned(),
            })
        }
        _ => {
            return Err(CliError::InvalidInput(format!(
                "say how to reach the server: toolplane mcp add {} --stdio -- COMMAND [ARGS…], or --url URL",
                args.name
            )));
        }
    };
    Ok(pb::McpTransport { kind: Some(kind) })
}

async fn add_server(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
    args: McpAddArgs,
    transport: pb::McpTransport,
    out: Out,
) -> Result<(), CliError> {
    let name = args.name.clone();
    progress(&format!(
        "registering `{name}`, connecting and listing its tools…"
    ));
    let r = proxy
        .upsert_server(pb::UpsertServerRequest {
            cell_id: eps.cell.clone(),
            server_id: None,
            display_name: name.clone(),
            transport: Some(transport),
            initial_state: if args.paused {
                pb::McpServerState::Paused
            } else {
                pb::McpServerState::Active
            } as i32,
            limits: None,
            default_permission: if args.allow {
                pb::McpToolPermission::Allow
            } else {
                pb::McpToolPermission::Off
            } as i32,
            tool_permissions: args
                .allow_tool
                .iter()
                .map(|t| (t.clone(), pb::McpToolPermission::Allow as i32))
                .collect(),
            skip_refresh: false,
            expected_generation: None,
            request_id: String::new(),
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    let server = r.server.clone().unwrap_or_default();
    let tools = cached_tools(conn, proxy, eps, &server.server_id).await?;
    refresh_catalog(eps).await;

    let names: Vec<String> = tools
        .iter()
        .filter_map(|t| t.status.as_ref().map(|s| s.native_name.clone()))
        .collect();
    let allowed: Vec<&str> = tools
        .iter()
        .filter_map(|t| t.status.as_ref())
        .filter(|s| s.permission != pb::McpToolPermission::Off as i32)
        .map(|s| s.native_name.as_str())
        .collect();
    let permission_note = if names.is_empty() {
        if args.allow {
            "permission: allow for every tool it lists".to_owned()
        } else {
            "permission: off for every tool it lists, unless allowed with `toolplane mcp permit`"
                .to_owned()
        }
    } else if allowed.len() == names.len() {
        format!(
            "permission: allow for all {} tools; they are usable now",
            names.len()
        )
    } else if allowed.is_empty() {
        format!(
            "permission: off for every tool, so none is usable yet; allow them with `toolplane mcp permit {name} --all` (or add with --allow)"
        )
    } else {
        format!(
            "permission: allow for {}; off for the others ({})",
            allowed.join(", "),
            names.len() - allowed.len()
        )
    };
    if out.json {
        out.json(&json!({
            "server": server_json(&server),
            "created": r.created,
            "tools": tools.iter().map(cached_tool_json).collect::<Vec<_>>(),
            "warnings": warnings_json(&r.warnings),
        }))?;
    } else {
        // A failed connection is the command's error line; do not say it twice.
        let failed = server.connection == pb::McpConnectionStatus::Failed as i32;
        print_warnings(
            &r.warnings
                .iter()
                .filter(|w| !(failed && w.code == "mcp.connection_failed"))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let discovered = if names.is_empty() {
            String::new()
        } else {
            format!(": {}", names.join(", "))
        };
        line(&format!(
            "added MCP server `{name}` (mcp/{}): {}, {}, {} tools discovered{discovered}",
            server.server_id,
            server_state_name(server.state),
            connection_name(server.connection),
            server.cached_tool_count
        ))?;
        line(&permission_note)?;
        if args.paused {
            line(&format!(
                "it is paused: `toolplane mcp resume {name}` connects it and lists its tools"
            ))?;
        }
    }
    if args.paused {
        Ok(())
    } else {
        connection_result(&server, &r.warnings)
    }
}

/// A server that could not be connected or listed is a failure of the command (the registration
/// is kept, and the message says how to retry).
fn connection_result(server: &pb::McpServer, warnings: &[pb::Diagnostic]) -> Result<(), CliError> {
    let connected = server.connection == pb::McpConnectionStatus::Connected as i32;
    let failed = server.connection == pb::McpConnectionStatus::Failed as i32;
    if connected || (!failed && server.last_error.is_empty()) {
        return Ok(());
    }
    let code = warnings
        .iter()
        .map(|w| w.code.as_str())
        .find(|c| c.starts_with("mcp."))
        .unwrap_or("mcp.connection_failed");
    let reason = if server.last_error.is_empty() {
        "it could not be reached".to_owned()
    } else {
        server.last_error.clone()
    };
    Err(CliError::Rpc {
        code: tonic::Code::Unavailable,
        message: format!(
            "{code}: MCP server `{}` is registered but not connected: {reason}; fix it and run `toolplane mcp refresh {}`",
            server.display_name, server.display_name
        ),
    })
}

fn print_warnings(warnings: &[pb::Diagnostic]) {
    for w in warnings {
        warn(&format!("{}: {}", w.code, w.message));
    }
}

fn describe_server(s: &pb::McpServer) -> String {
    let mut text = format!(
        "`{}` (mcp/{}): {}, {}, {} tools, default permission {}",
        s.display_name,
        s.server_id,
        server_state_name(s.state),
        connection_name(s.connection),
        s.cached_tool_count,
        permission_name(s.default_permission)
    );
    if !s.last_error.is_empty() {
        text.push_str(&format!("; last error: {}", s.last_error));
    }
    text
}

async fn all_servers(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
) -> Result<Vec<pb::McpServer>, CliError> {
    let mut servers = Vec::new();
    let mut page_token = String::new();
    for _ in 0..1000 {
        let page = proxy
            .list_servers(pb::ListServersRequest {
                cell_id: eps.cell.clone(),
                page_size: 1000,
                page_token: page_token.clone(),
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        servers.extend(page.servers);
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }
    Ok(servers)
}

/// The registration named `name` (display name, or id).
pub async fn find(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
    name: &str,
) -> Result<pb::McpServer, CliError> {
    let servers = all_servers(conn, proxy, eps).await?;
    let id = name.strip_prefix("mcp/").unwrap_or(name);
    servers
        .into_iter()
        .find(|s| s.display_name == name || s.server_id == id)
        .ok_or_else(|| {
            CliError::NotFound(format!(
                "no MCP server named `{name}` (see `toolplane mcp ls`)"
            ))
        })
}

async fn cached_tools(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
    server_id: &str,
) -> Result<Vec<pb::McpCachedTool>, CliError> {
    let mut tools = Vec::new();
    let mut page_token = String::new();
    for _ in 0..1000 {
        let page = proxy
            .list_cached_tools(pb::ListCachedToolsRequest {
                cell_id: eps.cell.clone(),
                server_ids: vec![server_id.to_owned()],
                include_unusable: true,
                query: String::new(),
                page_size: 1000,
                page_token: page_token.clone(),
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        tools.extend(page.tools.into_iter().filter(|t| t.descriptor.is_some()));
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }
    Ok(tools)
}

async fn list_servers(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
    out: Out,
) -> Result<(), CliError> {
    let servers = all_servers(conn, proxy, eps).await?;
    if out.json {
        return out.json(&Value::Array(servers.iter().map(server_json).collect()));
    }
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            let transport = match s.transport.as_ref().and_then(|t| t.kind.as_ref()) {
                Some(pb::mcp_transport::Kind::Stdio(x)) => format!(
                    "stdio {}",
                    std::iter::once(x.command.as_str())
                        .chain(x.args.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                Some(pb::mcp_transport::Kind::StreamableHttp(x)) => x.url.clone(),
                None => String::new(),
            };
            vec![
                s.display_name.clone(),
                server_state_name(s.state).to_owned(),
                connection_name(s.connection).to_owned(),
                s.cached_tool_count.to_string(),
                s.server_id.clone(),
                if s.last_error.is_empty() {
                    transport
                } else {
                    format!("error: {}", s.last_error)
                },
            ]
        })
        .collect();
    line(&table(
        &["NAME", "STATE", "CONNECTION", "TOOLS", "ID", "TRANSPORT"],
        &rows,
    ))
}

async fn set_state(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
    name: &str,
    state: pb::McpServerState,
    out: Out,
) -> Result<(), CliError> {
    let server = find(conn, proxy, eps, name).await?;
    if state == pb::McpServerState::Active {
        progress(&format!("resuming `{name}`…"));
    }
    let server = proxy
        .set_server_state(pb::SetServerStateRequest {
            cell_id: eps.cell.clone(),
            server_id: server.server_id.clone(),
            state: state as i32,
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner()
        .server
        .unwrap_or_default();
    // Resuming reconnects in the background; listing the tools again now means the command
    // reports a server that is really back, or why it is not.
    let (server, warnings) = if state == pb::McpServerState::Active {
        let r = proxy
            .refresh_server(pb::RefreshServerRequest {
                cell_id: eps.cell.clone(),
                server_id: server.server_id.clone(),
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        (r.server.unwrap_or(server), r.warnings)
    } else {
        (server, Vec::new())
    };
    refresh_catalog(eps).await;
    if out.json {
        out.json(&server_json(&server))?;
    } else if state == pb::McpServerState::Paused {
        line(&format!(
            "paused `{name}`: its tools are unusable and calls to them are refused"
        ))?;
    } else {
        line(&format!("resumed {}", describe_server(&server)))?;
    }
    connection_result(&server, &warnings)
}

async fn permit(
    conn: &Conn,
    proxy: &mut Proxy,
    eps: &Endpoints,
    args: McpPermitArgs,
    out: Out,
) -> Result<(), CliError> {
    if args.tools.is_empty() && !args.all {
        return Err(CliError::InvalidInput(format!(
            "name the tools, or --all: toolplane mcp permit {} --all",
            args.name
        )));
    }
    let server = find(conn, proxy, eps, &args.name).await?;
    let tools = if args.all {
        cached_tools(conn, proxy, eps, &server.server_id)
            .await?
            .into_iter()
            .filter_map(|t| t.status.map(|s| s.native_name))
            .collect()
    } else {
        args.tools.clone()
    };
    if tools.is_empty() {
        return Err(CliError::InvalidInput(format!(
            "`{}` has no discovered tools yet; run `toolplane mcp refresh {}` first",
            args.name, args.name
        )));
    }
    let permission = match args.permission {
        Permission::Allow => pb::McpToolPermission::Allow,
        Permission::Ask => pb::McpToolPermission::Ask,
        Permission::Off => pb::McpToolPermission::Off,
    };
    let mut results = Vec::new();
    for tool in &tools {
        let r = proxy
            .set_tool_permission(pb::SetToolPermissionRequest {
                cell_id: eps.cell.clone(),
                server_id: server.server_id.clone(),
                native_name: tool.clone(),
                permission: permission as i32,
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        results.push((tool.clone(), r.tool));
    }
    refresh_catalog(eps).await;
    if out.json {
        return out.json(&Value::Array(
            results
                .iter()
                .map(|(name, t)| match t {
                    Some(t) => cached_tool_json(t),
                    None => json!({"nativeName": name, "permission": permission_name(permission as i32), "usable": false, "cached": false}),
                })
                .collect(),
        ));
    }
    let label = permission_name(permission as i32);
    for (name, t) in &results {
        match t {
            Some(t) => line(&format!(
                "{name}: {label}{}",
                if t.usable { ", usable" } else { ", not usable" }
            ))?,
            None => line(&format!(
                "{name}: {label} (stored; the server has not listed this tool yet)"
            ))?,
        }
    }
    Ok(())
}

/// Asks the catalog to pull its sources now, so listings show an MCP change at once. Best effort:
/// the catalog pulls on its own every few seconds anyway.
pub async fn refresh_catalog(eps: &Endpoints) {
    let result = async {
        let conn = eps.connect("catalog", &eps.catalog).await?;
        CatalogServiceClient::new(conn.channel.clone())
            .refresh_sources(pb::RefreshSourcesRequest {
                cell_id: eps.cell.clone(),
            })
            .await
            .map_err(|s| conn.err(s))?;
        Ok::<(), CliError>(())
    }
    .await;
    if let Err(e) = result {
        warn(&format!(
            "the catalog will show the change at its next refresh: {}",
            e.one_line()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_commands_are_made_absolute() {
        let cwd = Path::new("/home/u/project");
        assert_eq!(
            absolute_command("./server", cwd),
            "/home/u/project/./server"
        );
        assert_eq!(
            absolute_command("bin/server", cwd),
            "/home/u/project/bin/server"
        );
        assert_eq!(absolute_command("npx", cwd), "npx");
        assert_eq!(absolute_command("/usr/bin/node", cwd), "/usr/bin/node");
    }
}
