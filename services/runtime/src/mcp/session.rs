//! One MCP session: one host-driven invocation with its frozen snapshot. `initialize` opens it (in
//! the run `?run=` names, or in a run the session creates) for the profile `?profile=` names, as
//! the caller of the HTTP request (its cell from its credential); `tools/list` lists the current
//! turn's tools under their aliases; `tools/call` hands the call to the host-driven pipeline as a
//! one-call turn, exactly as `ExecuteToolCalls` does, cancelled by the client's
//! `notifications/cancelled` (`tools::call_cancel`); `resources/read` reads the stored objects of
//! the session's run. Dropping the session (the client's `DELETE`, the session's idle timeout,
//! the server stopping) closes the invocation and finishes a run the session created.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use toolplane_auth::Caller;
use toolplane_core::snapshot::ExitPolicy;
use toolplane_core::turn::ToolChoice;
use toolplane_model::ProviderFormat;
use tracing::Instrument;

use super::project;
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::lifecycle::NewRun;
use crate::pipeline::HostCalls;
use crate::state::{CancelFlag, Driver, Invocation, Run, turn_id};
use crate::tools::call_cancel;

/// The newest protocol revision with sessions. The plane serves MCP with sessions (a session is
/// an invocation); the stateless revisions after it have none (docs/mcp-server.md).
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The provider format the face speaks to the pipeline: a tool call becomes an OpenAI chat
/// assistant turn with one call, decoded through the turn's aliases like any host's.
const FORMAT: ProviderFormat = ProviderFormat::OpenAiChat;

/// The invocation a session is bound to once `initialize` opened it.
struct Bound {
    inv: Arc<Invocation>,
    /// The session created the run, so ending the session finishes it.
    owns_run: bool,
    /// The caller's cell (`None` with authentication off: the run's own).
    cell: Option<String>,
    /// Calls of one session run one at a time, in the order they arrive: each is a turn.
    turns: tokio::sync::Mutex<u64>,
    session_id: String,
}

/// The MCP server handler of one session.
pub struct McpSession {
    rt: Arc<Runtime>,
    bound: OnceLock<Bound>,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("invocation", &self.bound.get().map(|b| b.inv.id.clone()))
            .finish()
    }
}

impl McpSession {
    pub fn new(rt: Arc<Runtime>) -> Self {
        McpSession {
            rt,
            bound: OnceLock::new(),
        }
    }

    /// How many tools the session's current turn advertises.
    async fn advertised(&self) -> Result<usize, McpError> {
        Ok(self.bound()?.inv.inner.lock().await.turn.tools().len())
    }

    fn bound(&self) -> Result<&Bound, McpError> {
        self.bound
            .get()
            .ok_or_else(|| McpError::invalid_request("the session is not initialised", None))
    }

    /// Opens the session's invocation from the `initialize` request's URL and credential.
    async fn open(&self, parts: &http::request::Parts, session_id: String) -> Result<(), McpError> {
        let query = Query::parse(parts.uri.query().unwrap_or(""));
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(|| Caller::auth_off(""));
        let (run, owns_run) = self.run(&query, &caller).await.map_err(mcp_error)?;
        let opened = self
            .rt
            .open_invocation(
                &run,
                &query.profile,
                ExitPolicy::Root,
                FORMAT,
                ToolChoice::Auto,
                Driver::Host,
            )
            .await
            .map_err(mcp_error)?;
        tracing::info!(
            mcp.session.id = %session_id,
            run = %run.id,
            invocation = %opened.invocation.id,
            "MCP session opened an invocation"
        );
        let _ = self.bound.set(Bound {
            inv: opened.invocation,
            owns_run,
            cell: caller.visible_cell().map(str::to_owned),
            turns: tokio::sync::Mutex::new(0),
            session_id,
        });
        Ok(())
    }

    /// The run `?run=` names (visible to the caller), or a new host-driven run of the caller's
    /// cell for `?profile=`.
    async fn run(&self, q: &Query, caller: &Caller) -> Result<(Arc<Run>, bool), RuntimeError> {
        if !q.run.is_empty() {
            return Ok((self.rt.run_in(&q.run, caller.visible_cell())?, false));
        }
        if q.profile.is_empty() {
            return Err(RuntimeError::invalid(
                "name a profile in the URL: /mcp?profile=<profile id>",
            ));
        }
        let cell = caller
            .scope("")
            .map_err(|e| RuntimeError::invalid(e.to_string()))?;
        let run = self
            .rt
            .create_run(NewRun {
                cell_id: cell,
                actor_id: caller.principal.clone(),
                profile_id: q.profile.clone(),
                driver: Some(Driver::Host),
                labels: [("createdBy".to_owned(), "mcp".to_owned())].into(),
                ..NewRun::default()
            })
            .await?;
        Ok((run, true))
    }

    /// One `tools/call` as a one-call host-driven turn.
    async fn call(&self, request: CallToolRequestParams) -> Result<CallToolResponse, McpError> {
        let b = self.bound()?;
        let mut turns = b.turns.lock().await;
        let (turn, known) = {
            let inner = b.inv.inner.lock().await;
            let known = inner
                .turn
                .tools()
                .iter()
                .any(|t| t.alias.as_str() == request.name);
            (turn_id(&b.inv.id, inner.round), known)
        };
        if !known {
            // Not the pipeline's: a name the session never offered is the client's mistake, not
            // the model's contract violation that would fail the invocation.
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`: this session does not offer it",
                    request.name
                ),
                None,
            ));
        }
        *turns += 1;
        let arguments = Value::Object(request.arguments.unwrap_or_default()).to_string();
        let calls = json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("mcp-{}", *turns),
            "type": "function",
            "function": {"name": request.name, "arguments": arguments},
        }]});
        let host = HostCalls {
            turn: &turn,
            format: FORMAT,
            calls: &calls,
            epoch: None,
            model_response: None,
            next_choice: None,
            cell: b.cell.as_deref(),
        };
        let done = self
            .rt
            .execute_host_calls(&b.inv, host)
            .await
            .map_err(mcp_error)?;
        let outcome = done.outcome;
        match (outcome.results.first(), outcome.details.first()) {
            (Some(result), Some(detail)) => Ok(CallToolResponse::Complete(project::call_result(
                &b.inv.run.id,
                &b.inv.id,
                result,
                detail,
            ))),
            _ => Err(McpError::internal_error(
                "the call produced no result",
                None,
            )),
        }
    }

    /// `resources/read` of a `toolplane://runs/<run>/objects/<path>` URI of the session's run.
    async fn read(&self, uri: &str) -> Result<ReadResourceResult, McpError> {
        let b = self.bound()?;
        let not_found = || McpError::resource_not_found(format!("no resource `{uri}`"), None);
        let (run, path) = project::parse_object_uri(uri).ok_or_else(not_found)?;
        if run != b.inv.run.id {
            return Err(not_found());
        }
        let record = b.inv.run.snapshot();
        let bytes = self
            .rt
            .ports
            .workspace
            .get_object(&crate::lifecycle::runs::scope_of(&record), path)
            .await
            .map_err(|e| mcp_error(e.into_error("reading a stored object")))?
            .ok_or_else(not_found)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            text, uri,
        )]))
    }

    fn session_id(&self) -> &str {
        self.bound.get().map_or("", |b| b.session_id.as_str())
    }
}

/// The span of one request of the face, with the OpenTelemetry MCP attributes.
fn span(method: &'static str, session: &str, tool: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "mcp.server",
        otel.name = method,
        otel.kind = "server",
        mcp.method.name = method,
        mcp.session.id = session,
        mcp.protocol.version = PROTOCOL.as_str(),
        gen_ai.tool.name = tool.unwrap_or(""),
        gen_ai.operation.name = if tool.is_some() { "execute_tool" } else { "" },
        network.transport = "tcp",
    )
}

fn mcp_error(e: RuntimeError) -> McpError {
    let data = Some(json!({"code": e.code().as_str()}));
    let message = format!("{}: {}", e.code().as_str(), e.0.message);
    match e.code().class() {
        toolplane_core::error::ErrorClass::System => McpError::internal_error(message, data),
        _ => McpError::invalid_params(message, data),
    }
}

fn session_header(parts: Option<&http::request::Parts>) -> String {
    parts
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

impl ServerHandler for McpSession {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .build();
        ServerConfig::new(caps)
            .with_server_info(
                Implementation::new("toolplane", env!("CARGO_PKG_VERSION")).with_title("toolplane"),
            )
            .with_protocol_version(PROTOCOL)
            .with_instructions(
                "The tools of one toolplane invocation: every call is gated, budgeted, governed, audited and journalled.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&PROTOCOL))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let parts = context.extensions.get::<http::request::Parts>();
        let session = session_header(parts);
        let span = span("initialize", &session, None);
        async {
            context.peer.set_peer_info(request.clone());
            let info = self.negotiate_initialize(&request)?;
            let parts = parts.ok_or_else(|| {
                McpError::invalid_request("the MCP face is served over HTTP only", None)
            })?;
            self.open(parts, session.clone()).await?;
            Ok(info)
        }
        .instrument(span)
        .await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let span = span("tools/list", self.session_id(), None);
        let _entered = span.enter();
        let b = self.bound()?;
        let inner = b.inv.inner.lock().await;
        let tools = inner
            .turn
            .tools()
            .iter()
            .filter_map(|t| inner.snapshot.binding(&t.tool_id))
            .map(project::tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// A call; when it grew the advertised set (a `tools.search` that found tools, advertised
    /// from the next turn on), the client is told with `notifications/tools/list_changed`.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let span = span("tools/call", self.session_id(), Some(&name));
        let before = self.advertised().await?;
        // The client's `notifications/cancelled` for this request (or the session ending) cancels
        // the call in the pipeline, which answers and journals it as cancelled; rmcp sends the
        // client no response for a cancelled request.
        let cancel = Arc::new(CancelFlag::default());
        let call = call_cancel::scope(Arc::clone(&cancel), self.call(request).instrument(span));
        tokio::pin!(call);
        let answer = tokio::select! {
            answer = &mut call => answer,
            () = context.ct.cancelled() => {
                cancel.cancel();
                call.await
            }
        };
        if self.advertised().await? > before
            && let Err(e) = context.peer.notify_tool_list_changed().await
        {
            tracing::debug!(error = %e, "telling an MCP client its tool list changed");
        }
        answer
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let span = span("resources/read", self.session_id(), None);
        self.read(&request.uri)
            .instrument(span)
            .await
            .map(ReadResourceResponse::Complete)
    }
}

impl Drop for McpSession {
    /// The session ended: its invocation closes, and a run it created finishes.
    fn drop(&mut self) {
        let Some(b) = self.bound.take() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let rt = Arc::clone(&self.rt);
        handle.spawn(async move {
            if let Err(e) = rt.close_invocation(&b.inv, "mcp session ended", None).await {
                tracing::warn!(invocation = %b.inv.id, error = %e, "closing an MCP session's invocation");
            }
            if b.owns_run
                && let Err(e) = rt.finish_run(&b.inv.run).await
            {
                tracing::warn!(run = %b.inv.run.id, error = %e, "finishing an MCP session's run");
            }
        });
    }
}

/// The URL's query: `profile` and `run`.
#[derive(Debug, Default, PartialEq)]
struct Query {
    profile: String,
    run: String,
}

impl Query {
    fn parse(query: &str) -> Query {
        let mut q = Query::default();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "profile" => q.profile = value,
                "run" => q.run = value,
                _ => {}
            }
        }
        q
    }
}

/// `%XX` and `+` decoded; a malformed escape is kept as written.
fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', h, l]) => hex(*h).zip(hex(*l)),
            _ => None,
        };
        if let Some((h, l)) = escaped {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_the_profile_and_the_run() {
        assert_eq!(
            Query::parse("profile=coder%2Dx&run=r1&other=1"),
            Query {
                profile: "coder-x".into(),
                run: "r1".into()
            }
        );
        assert_eq!(Query::parse(""), Query::default());
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("a%zz"), "a%zz");
    }
}
