//! `toolplane up --demo`: a scripted agent run against the plane that just started, through the
//! same public RPCs any host uses. It registers the bundled MCP server (this binary's hidden
//! `demo-mcp-server`, started by the mcp-proxy through the binary's own path, permission allow),
//! refreshes the catalog, puts the `demo` profile, starts a runtime-driven run whose scripted model
//! lists, writes, patches, searches, calls the MCP tool, commits and finishes, and prints the
//! timeline as it happens. It never reaches into a service's internals.

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::mcp_proxy_service_client::McpProxyServiceClient;
use toolplane_proto::v1::profile_service_client::ProfileServiceClient;
use toolplane_proto::v1::workspace_service_client::WorkspaceServiceClient;

use crate::client::{Endpoints, MAX_MESSAGE_BYTES};
use crate::commands::run::{follow, runtime_client};
use crate::error::CliError;
use crate::output::{Out, line};
use crate::timeline::Timeline;

/// Display name of the bundled MCP server; its tools' aliases are `mcp__demo__<tool>`.
pub const SERVER_NAME: &str = "demo";
/// The demo profile.
pub const PROFILE_ID: &str = "demo";
/// The chat the demo commits into.
pub const CHAT_ID: &str = "demo";
/// The file the demo agent writes and publishes.
const NOTE_PATH: &str = "output/main.md";

const NOTE: &str = "# toolplane demo\n\nThis note was written by a scripted agent, one tool call at a time.\nEvery call went through the plane: gated, executed, audited and journalled.\n";

fn demo_err(what: &str, e: CliError) -> CliError {
    CliError::Demo(format!("{what}: {}", e.one_line()))
}

/// The demo profile: the workspace tools and every tool of the bundled MCP server.
pub fn profile() -> Value {
    json!({
        "id": PROFILE_ID,
        "name": "Demo agent",
        "description": "The scripted agent of `toolplane up --demo`: writes a note, checks it with the demo MCP server and publishes it.",
        "tools": {
            "allow": ["builtin:workspace.*", format!("mcp:{SERVER_NAME}/*")],
            "maxCallsPerInvocation": 50,
            "maxRounds": 20
        }
    })
}

/// The scripted model's turns (OpenAI assistant messages; ids and `type` are filled in by the
/// runtime's scripted provider).
pub fn script() -> Value {
    let patched = NOTE.replace("a scripted agent", "a scripted demo agent");
    let call = |content: &str, name: &str, arguments: Value| json!({"content": content, "tool_calls": [{"function": {"name": name, "arguments": arguments}}]});
    json!({"turns": [
        call("First, what is in my workspace?", "workspace_list_files", json!({})),
        call("I will write the note.", "workspace_write_file", json!({"path": NOTE_PATH, "content": NOTE})),
        call("A small correction.", "workspace_apply_patch", json!({"path": NOTE_PATH, "old_string": "a scripted agent", "new_string": "a scripted demo agent"})),
        call("Is the note findable?", "workspace_search_files", json!({"query": "journalled"})),
        call("How long is it?", &format!("mcp__{SERVER_NAME}__word_count"), json!({"text": patched})),
        call("Publishing it.", "workspace_commit", json!({"path": NOTE_PATH})),
        call("Done.", "workspace_finish", json!({"summary": "Wrote, checked and published the demo note."})),
    ]})
}

/// Sets up the demo against the plane at `eps` and follows its run to the end.
pub async fn run(eps: &Endpoints, out: Out) -> Result<pb::Run, CliError> {
    let exe = std::env::current_exe().map_err(|e| {
        CliError::Demo(format!(
            "cannot find this program's own path to start the demo MCP server: {e}"
        ))
    })?;

    // The bundled MCP server, registered (or re-pointed at this binary) with its tools allowed.
    let mcp = eps
        .connect("mcp-proxy", &eps.mcp_proxy)
        .await
        .map_err(|e| demo_err("connecting to the mcp-proxy", e))?;
    let mut proxy = McpProxyServiceClient::new(mcp.channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    let existing = match crate::commands::mcp::find(&mcp, &mut proxy, eps, SERVER_NAME).await {
        Ok(s) => Some(s.server_id),
        Err(CliError::NotFound(_)) => None,
        Err(e) => return Err(demo_err("listing MCP servers", e)),
    };
    let registered = proxy
        .upsert_server(pb::UpsertServerRequest {
            cell_id: eps.cell.clone(),
            server_id: existing,
            display_name: SERVER_NAME.to_owned(),
            transport: Some(pb::McpTransport {
                kind: Some(pb::mcp_transport::Kind::Stdio(pb::McpStdioTransport {
                    command: exe.to_string_lossy().into_owned(),
                    args: vec!["demo-mcp-server".to_owned()],
                    ..Default::default()
                })),
            }),
            initial_state: pb::McpServerState::Active as i32,
            default_permission: pb::McpToolPermission::Allow as i32,
            tool_permissions: ["word_count", "title_case"]
                .iter()
                .map(|t| ((*t).to_owned(), pb::McpToolPermission::Allow as i32))
                .collect(),
            ..Default::default()
        })
        .await
        .map_err(|s| demo_err("registering the demo MCP server", mcp.err(s)))?
        .into_inner()
        .server
        .unwrap_or_default();
    if registered.connection != pb::McpConnectionStatus::Connected as i32
        || registered.cached_tool_count == 0
    {
        return Err(CliError::Demo(format!(
            "the demo MCP server (`{} demo-mcp-server`) did not start: {}",
            exe.display(),
            if registered.last_error.is_empty() {
                "no tools were listed"
            } else {
                &registered.last_error
            }
        )));
    }

    let catalog = eps
        .connect("catalog", &eps.catalog)
        .await
        .map_err(|e| demo_err("connecting to the catalog", e))?;
    CatalogServiceClient::new(catalog.channel.clone())
        .refresh_sources(pb::RefreshSourcesRequest {
            cell_id: eps.cell.clone(),
        })
        .await
        .map_err(|s| demo_err("refreshing the catalog", catalog.err(s)))?;
    ProfileServiceClient::new(catalog.channel.clone())
        .put_profile(pb::PutProfileRequest {
            cell_id: eps.cell.clone(),
            profile_id: PROFILE_ID.to_owned(),
            profile_json: profile().to_string(),
            expected_version: None,
            validate_only: false,
            request_id: String::new(),
        })
        .await
        .map_err(|s| demo_err("putting the demo profile", catalog.err(s)))?;

    let runtime = eps
        .connect("runtime", &eps.runtime)
        .await
        .map_err(|e| demo_err("connecting to the runtime", e))?;
    let mut rt = runtime_client(&runtime);
    let run = rt
        .start_run(pb::StartRunRequest {
            spec: Some(pb::RunSpec {
                cell_id: eps.cell.clone(),
                profile_id: PROFILE_ID.to_owned(),
                model: Some(pb::ModelEndpoint { kind: pb::ModelEndpointKind::Scripted as i32, script_json: Some(script().to_string()), ..Default::default() }),
                initial_user_message: "Write a short note about toolplane into output/main.md, check it, publish it and finish.".to_owned(),
                mode: pb::RunMode::Foreground as i32,
                chat: Some(pb::ChatBinding { chat_id: CHAT_ID.to_owned(), message_id: None }),
                labels: [("source".to_owned(), "toolplane-demo".to_owned())].into_iter().collect(),
                ..Default::default()
            }),
            request_id: String::new(),
        })
        .await
        .map_err(|s| demo_err("starting the demo run", runtime.err(s)))?
        .into_inner()
        .run
        .unwrap_or_default();

    if !out.json {
        line("")?;
        line(&format!(
            "demo: MCP server `{SERVER_NAME}` ({} tools, allowed), profile `{PROFILE_ID}`, scripted run {}:",
            registered.cached_tool_count, run.run_id
        ))?;
    }
    let mut timeline = Timeline::new(false, false);
    let run = follow(&runtime, &mut rt, &run.run_id, 1, &mut timeline, out).await?;

    if !out.json && run.status == pb::RunStatus::Completed as i32 {
        // The answer as committed: best effort, the run's outcome does not depend on showing it.
        if let Ok(ws) = eps.connect("workspace service", &eps.workspace).await {
            let note = WorkspaceServiceClient::new(ws.channel.clone())
                .get_object(pb::GetObjectRequest {
                    run_id: run.run_id.clone(),
                    path: NOTE_PATH.to_owned(),
                    cell_id: eps.cell.clone(),
                })
                .await;
            if let Ok(note) = note {
                line("")?;
                line(&format!("committed to chat `{CHAT_ID}` from {NOTE_PATH}:"))?;
                for l in String::from_utf8_lossy(&note.into_inner().content).lines() {
                    line(&format!("  │ {l}"))?;
                }
            }
        }
        line("")?;
        line(&format!(
            "demo run {} completed. Its timeline with audit paths: toolplane events {}",
            run.run_id, run.run_id
        ))?;
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_uses_the_aliases_the_demo_promises() {
        let names: Vec<String> = script()["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t["tool_calls"][0]["function"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            names,
            [
                "workspace_list_files",
                "workspace_write_file",
                "workspace_apply_patch",
                "workspace_search_files",
                "mcp__demo__word_count",
                "workspace_commit",
                "workspace_finish"
            ]
        );
    }

    #[test]
    fn the_patch_matches_the_note_exactly_once() {
        assert_eq!(NOTE.matches("a scripted agent").count(), 1);
    }
}
