//! Fixture MCP servers for tests and benchmarks, and where to find the public ones.
//!
//! [`FixtureServer`] is an MCP server written for toolplane's tests, served over stdio by the
//! `toolplane-mcp-fixture` binary. It does what public servers cannot be asked to do: answer
//! slowly and notice `notifications/cancelled`, crash mid-call, send megabytes, send bytes that are
//! not JSON, list thousands of tools over many pages, and list tools with hostile names and
//! schemas. It is configured through environment variables (see [`env`]), so a registration's
//! `env` map selects its behaviour.
//!
//! The locators ([`fixture_binary`], [`server_everything_entry`], [`mcp_server_time_command`],
//! [`python_mcp_proxy_command`]) find the programs tests run; each honours an environment variable
//! and otherwise a known in-repository install location, and fails with a message that says how
//! to install what is missing. Nothing here is ever skipped silently.
//!
//! This module is test plumbing only; it must never become part of a production build.

use std::borrow::Cow;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

/// Environment variables that configure the fixture server and locate the test programs.
pub mod env {
    /// Path of the `toolplane-mcp-fixture` binary (default: built on demand with cargo).
    pub const FIXTURE_BIN: &str = "TOOLPLANE_MCP_FIXTURE";
    /// Path of `@modelcontextprotocol/server-everything`'s entry script (`dist/index.js`).
    pub const SERVER_EVERYTHING: &str = "TOOLPLANE_SERVER_EVERYTHING";
    /// Command (a path) that runs `mcp-server-time` from PyPI.
    pub const MCP_SERVER_TIME: &str = "TOOLPLANE_MCP_SERVER_TIME";
    /// Command (a path) that runs the Python `mcp-proxy` bridge from PyPI.
    pub const PYTHON_MCP_PROXY: &str = "TOOLPLANE_PYTHON_MCP_PROXY";

    /// Fixture: number of generated tools `tool_00000`… listed after the fixed ones.
    pub const TOOL_COUNT: &str = "FIXTURE_TOOL_COUNT";
    /// Fixture: tools per `tools/list` page (default 100).
    pub const PAGE_SIZE: &str = "FIXTURE_PAGE_SIZE";
    /// Fixture: bytes of description on every generated tool (default 16).
    pub const DESCRIPTION_BYTES: &str = "FIXTURE_DESCRIPTION_BYTES";
    /// Fixture: `1` adds tools with hostile names and schemas.
    pub const HOSTILE: &str = "FIXTURE_HOSTILE";
    /// Fixture: file to which `started <pid>` is appended at start.
    pub const START_LOG: &str = "FIXTURE_START_LOG";
    /// Fixture: file to which `cancelled <tool>` is appended when a call is cancelled.
    pub const CANCEL_LOG: &str = "FIXTURE_CANCEL_LOG";
    /// Fixture: file to which `called <tool> <arguments as JSON>` is appended when a call
    /// arrives, before it is answered.
    pub const CALL_LOG: &str = "FIXTURE_CALL_LOG";
    /// Fixture: `1` makes the process exit right after the handshake's first `tools/list`.
    pub const EXIT_AFTER_LIST: &str = "FIXTURE_EXIT_AFTER_LIST";
}

/// Why a test program could not be found or started.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// A program the tests need is not installed where it was looked for.
    #[error("testkit.fixture_missing: {0}")]
    Missing(String),
    /// Building or starting a program failed.
    #[error("testkit.fixture_failed: {0}")]
    Failed(String),
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// The `toolplane-mcp-fixture` binary: `$TOOLPLANE_MCP_FIXTURE`, or built once per process with
/// `cargo build -p toolplane-testkit --features mcp-fixture --bin toolplane-mcp-fixture` (a no-op
/// when it is up to date).
pub fn fixture_binary() -> Result<PathBuf, FixtureError> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    if let Some(path) = std::env::var_os(env::FIXTURE_BIN) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(FixtureError::Missing(format!(
                "{} points at {}, which is not a file",
                env::FIXTURE_BIN,
                path.display()
            )))
        };
    }
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let status = Command::new(cargo)
                .current_dir(repo_root())
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "toolplane-testkit",
                    "--features",
                    "mcp-fixture",
                    "--bin",
                    "toolplane-mcp-fixture",
                ])
                .stdin(Stdio::null())
                .status()
                .map_err(|e| format!("cannot run cargo to build the fixture server: {e}"))?;
            if !status.success() {
                return Err(format!("building the fixture server failed: {status}"));
            }
            let path = target_dir().join("debug").join("toolplane-mcp-fixture");
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!("the fixture server is not at {}", path.display()))
            }
        })
        .clone()
        .map_err(FixtureError::Failed)
}

fn locate(var: &str, default: PathBuf, install: &str) -> Result<PathBuf, FixtureError> {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    if path.is_file() {
        Ok(path)
    } else {
        Err(FixtureError::Missing(format!(
            "{} not found (set {var} or install it: {install})",
            path.display()
        )))
    }
}

/// The entry script of `@modelcontextprotocol/server-everything` (run it with `node`).
pub fn server_everything_entry() -> Result<PathBuf, FixtureError> {
    locate(
        env::SERVER_EVERYTHING,
        repo_root().join(
            "tests/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        ),
        "cd tests/mcp-servers && npm ci",
    )
}

/// The live-tools server (`tests/mcp-servers/live_tools_server.mjs`, run it with `node`): a server
/// on the official TypeScript SDK whose tool list changes while it runs (`add_tool`, with
/// `notifications/tools/list_changed`) and is read from `LIVE_TOOLS_FILE` at every start.
pub fn live_tools_server_script() -> Result<PathBuf, FixtureError> {
    let dir = repo_root().join("tests/mcp-servers");
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    if !sdk.is_file() {
        return Err(FixtureError::Missing(format!(
            "{} not found (install it: cd tests/mcp-servers && npm ci)",
            sdk.display()
        )));
    }
    Ok(dir.join("live_tools_server.mjs"))
}

/// The in-repository Python virtual environment holding the PyPI test servers.
pub fn mcp_venv() -> PathBuf {
    target_dir().join("mcp-venv")
}

/// The `mcp-server-time` command from PyPI.
pub fn mcp_server_time_command() -> Result<PathBuf, FixtureError> {
    locate(
        env::MCP_SERVER_TIME,
        mcp_venv().join("bin").join("mcp-server-time"),
        "python3 -m venv target/mcp-venv && target/mcp-venv/bin/pip install -r tests/mcp-servers/requirements.txt",
    )
}

/// The Python `mcp-proxy` bridge command from PyPI (its own environment: it needs mcp 1.x).
pub fn python_mcp_proxy_command() -> Result<PathBuf, FixtureError> {
    locate(
        env::PYTHON_MCP_PROXY,
        target_dir()
            .join("mcp-bridge-venv")
            .join("bin")
            .join("mcp-proxy"),
        "python3 -m venv target/mcp-bridge-venv && target/mcp-bridge-venv/bin/pip install -r tests/mcp-servers/requirements-bridge.txt",
    )
}

/// A child process serving MCP over streamable HTTP on a loopback port, killed and reaped on
/// drop.
#[derive(Debug)]
pub struct HttpServerProcess {
    child: std::process::Child,
    url: String,
}

impl HttpServerProcess {
    /// Starts `program args…` with `env`, then waits until `127.0.0.1:<port>` accepts
    /// connections; the server is reached at `http://127.0.0.1:<port><path>`.
    pub fn start(
        program: &Path,
        args: &[&str],
        env: &[(&str, String)],
        port: u16,
        path: &str,
    ) -> Result<HttpServerProcess, FixtureError> {
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                FixtureError::Failed(format!("cannot start {}: {e}", program.display()))
            })?;
        let mut server = HttpServerProcess {
            child,
            url: format!("http://127.0.0.1:{port}{path}"),
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(FixtureError::Failed(format!(
                    "{} exited before listening: {status}",
                    program.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(FixtureError::Failed(format!(
            "{} did not listen on port {port} within 10 s",
            program.display()
        )))
    }

    /// `server-everything` in streamable HTTP mode on a free loopback port.
    pub fn server_everything() -> Result<HttpServerProcess, FixtureError> {
        let entry = server_everything_entry()?;
        let port = free_port()?;
        HttpServerProcess::start(
            Path::new("node"),
            &[&entry.to_string_lossy(), "streamableHttp"],
            &[("PORT", port.to_string())],
            port,
            "/mcp",
        )
    }

    /// The server's MCP endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for HttpServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback TCP port (bound, read, released).
pub fn free_port() -> Result<u16, FixtureError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| FixtureError::Failed(format!("cannot find a free port: {e}")))
}

/// The fixture server's behaviour, read from the environment.
#[derive(Debug, Clone)]
pub struct FixtureConfig {
    pub tool_count: usize,
    pub page_size: usize,
    pub description_bytes: usize,
    pub hostile: bool,
    pub cancel_log: Option<PathBuf>,
    pub call_log: Option<PathBuf>,
    pub exit_after_list: bool,
}

impl FixtureConfig {
    /// Reads the `FIXTURE_*` variables.
    pub fn from_env() -> FixtureConfig {
        let num = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        FixtureConfig {
            tool_count: num(env::TOOL_COUNT, 0),
            page_size: num(env::PAGE_SIZE, 100).max(1),
            description_bytes: num(env::DESCRIPTION_BYTES, 16),
            hostile: std::env::var(env::HOSTILE).is_ok_and(|v| v == "1"),
            cancel_log: std::env::var_os(env::CANCEL_LOG).map(PathBuf::from),
            call_log: std::env::var_os(env::CALL_LOG).map(PathBuf::from),
            exit_after_list: std::env::var(env::EXIT_AFTER_LIST).is_ok_and(|v| v == "1"),
        }
    }
}

/// The fixture MCP server. Tools:
/// - `echo {text}`: returns `text` as text content.
/// - `structured {}`: structured content whose text block is the same JSON.
/// - `mixed {}`: text, an image, a resource link, an embedded resource, other structured data.
/// - `fail {}`: an `isError` result with text and structured content.
/// - `slow {ms}`: sleeps; when cancelled, appends `cancelled slow` to `FIXTURE_CANCEL_LOG`.
/// - `crash {}`: the process exits before answering.
/// - `huge {bytes}`: a text result of `bytes` bytes.
/// - `not_json {}`: writes a line that is not JSON instead of an answer.
/// - `bad_shape {}`: answers with a well-formed JSON-RPC response of the wrong shape.
/// - `stderr {text}`: writes `text` to stderr, then answers `ok`.
#[derive(Debug, Clone)]
pub struct FixtureServer {
    config: Arc<FixtureConfig>,
    tools: Arc<Vec<Tool>>,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn object_schema(properties: Value) -> Arc<JsonObject> {
    schema(json!({"type": "object", "properties": properties}))
}

impl FixtureServer {
    pub fn new(config: FixtureConfig) -> FixtureServer {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Echoes the text back.",
                object_schema(json!({"text": {"type": "string"}})),
            ),
            Tool::new(
                "structured",
                "Returns structured content.",
                object_schema(json!({})),
            ),
            Tool::new(
                "mixed",
                "Returns every kind of content.",
                object_schema(json!({})),
            ),
            Tool::new("fail", "Always fails.", object_schema(json!({}))),
            Tool::new(
                "slow",
                "Sleeps for `ms` milliseconds.",
                object_schema(json!({"ms": {"type": "integer"}})),
            ),
            Tool::new("crash", "Exits the process.", object_schema(json!({}))),
            Tool::new(
                "trace",
                "Answers with the W3C traceparent the request carried in `_meta`, or `none`.",
                object_schema(json!({})),
            ),
            Tool::new(
                "huge",
                "Returns `bytes` bytes of text.",
                object_schema(json!({"bytes": {"type": "integer"}})),
            ),
            Tool::new(
                "not_json",
                "Answers with bytes that are not JSON.",
                object_schema(json!({})),
            ),
            Tool::new(
                "bad_shape",
                "Answers with a malformed result.",
                object_schema(json!({})),
            ),
            Tool::new(
                "stderr",
                "Writes to stderr.",
                object_schema(json!({"text": {"type": "string"}})),
            ),
        ];
        if config.hostile {
            let long = "x".repeat(200);
            tools.extend([
                Tool::new("bad name", "A name with a space.", object_schema(json!({}))),
                Tool::new(long, "A 200-byte name.", object_schema(json!({}))),
                Tool::new(
                    "line\nbreak",
                    "A name with a newline.",
                    object_schema(json!({})),
                ),
                Tool::new("", "An empty name.", object_schema(json!({}))),
                Tool::new(
                    "array_schema",
                    "Takes an array.",
                    schema(json!({"type": "array"})),
                ),
                Tool::new(
                    "untyped_schema",
                    "Schema without a type.",
                    schema(json!({})),
                ),
                Tool::new("echo", "A duplicate of echo.", object_schema(json!({}))),
                Tool::new(
                    "ns:colon/ok",
                    "A name with `:` and `/`.",
                    object_schema(json!({})),
                ),
            ]);
        }
        let description = "d".repeat(config.description_bytes);
        for i in 0..config.tool_count {
            tools.push(Tool::new(
                format!("tool_{i:05}"),
                description.clone(),
                object_schema(json!({"n": {"type": "integer"}})),
            ));
        }
        FixtureServer {
            config: Arc::new(config),
            tools: Arc::new(tools),
        }
    }

    fn log_cancel(&self, tool: &str) {
        if let Some(path) = &self.config.cancel_log {
            append_line(path, &format!("cancelled {tool}"));
        }
    }

    fn log_call(&self, request: &CallToolRequestParams) {
        if let Some(path) = &self.config.call_log {
            let args = request.arguments.clone().unwrap_or_default();
            append_line(
                path,
                &format!("called {} {}", request.name, Value::Object(args)),
            );
        }
    }
}

fn append_line(path: &std::path::Path, line: &str) {
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn raw_stdout_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn arg_u64(request: &CallToolRequestParams, name: &str) -> u64 {
    request
        .arguments
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn arg_str(request: &CallToolRequestParams, name: &str) -> String {
    request
        .arguments
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl ServerHandler for FixtureServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolplane-mcp-fixture", "1.0.0"))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let start = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0);
        let end = (start + self.config.page_size).min(self.tools.len());
        let mut page = ListToolsResult::with_all_items(
            self.tools
                .get(start..end)
                .map(<[Tool]>::to_vec)
                .unwrap_or_default(),
        );
        if end < self.tools.len() {
            page.next_cursor = Some(end.to_string());
        }
        if self.config.exit_after_list {
            tokio::spawn(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                std::process::exit(4);
            });
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.log_call(&request);
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(vec![ContentBlock::text(arg_str(&request, "text"))]),
            "structured" => CallToolResult::structured(json!({"temperature": 21.5, "unit": "C"})),
            "mixed" => {
                let mut result = CallToolResult::success(vec![
                    ContentBlock::text("Here is the report."),
                    ContentBlock::image("aGVsbG8=", "image/png"),
                    ContentBlock::embedded_text("file:///report.txt", "report body"),
                ]);
                result.structured_content = Some(json!({"rows": 3, "ok": true}));
                result
            }
            "fail" => {
                let mut result =
                    CallToolResult::error(vec![ContentBlock::text("the widget is broken")]);
                result.structured_content = Some(json!({"reason": "broken", "retry": false}));
                result
            }
            "slow" => {
                let ms = arg_u64(&request, "ms");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    () = context.ct.cancelled() => {
                        self.log_cancel("slow");
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
                CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
            }
            "crash" => std::process::exit(3),
            "trace" => CallToolResult::success(vec![ContentBlock::text(
                request
                    .meta
                    .as_ref()
                    .and_then(|m| m.0.get_traceparent())
                    .or_else(|| context.meta.0.get_traceparent())
                    .unwrap_or("none")
                    .to_owned(),
            )]),
            "huge" => {
                let bytes = usize::try_from(arg_u64(&request, "bytes")).unwrap_or(0);
                CallToolResult::success(vec![ContentBlock::text("x".repeat(bytes))])
            }
            "not_json" => {
                raw_stdout_line("this is {not json");
                context.ct.cancelled().await;
                return Err(ErrorData::internal_error("cancelled", None));
            }
            "bad_shape" => {
                let id = serde_json::to_string(&context.id).unwrap_or_else(|_| "0".to_owned());
                raw_stdout_line(&format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":"not a list","isError":"no"}}}}"#
                ));
                context.ct.cancelled().await;
                return Err(ErrorData::internal_error("cancelled", None));
            }
            "stderr" => {
                eprintln!("{}", arg_str(&request, "text"));
                CallToolResult::success(vec![ContentBlock::text("ok")])
            }
            other => {
                if self.tools.iter().any(|t| t.name == other) {
                    CallToolResult::success(vec![ContentBlock::text(format!("called {other}"))])
                } else {
                    return Err(ErrorData::invalid_params(
                        Cow::Owned(format!("unknown tool {other}")),
                        None,
                    ));
                }
            }
        };
        Ok(result.into())
    }
}

/// Serves the fixture over stdin/stdout until the client closes stdin. Used by the
/// `toolplane-mcp-fixture` binary.
pub async fn serve_stdio() -> Result<(), FixtureError> {
    let config = FixtureConfig::from_env();
    if let Some(path) = std::env::var_os(env::START_LOG)
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(file, "started {}", std::process::id());
    }
    let server = FixtureServer::new(config)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| FixtureError::Failed(format!("handshake failed: {e}")))?;
    server
        .waiting()
        .await
        .map_err(|e| FixtureError::Failed(format!("server task failed: {e}")))?;
    Ok(())
}
