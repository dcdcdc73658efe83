//! The command line: every subcommand, flag and environment variable of `toolplane`, and the
//! dispatch to the module that carries it out. Parsing only; it never talks to a service itself.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::client::Endpoints;
use crate::error::CliError;
use crate::output::Out;

/// toolplane: the tool plane for LLM agents.
///
/// `toolplane up` runs the four services (runtime, catalog, workspace, mcp-proxy) in one process;
/// the other commands drive a running plane.
#[derive(Debug, Parser)]
#[command(
    name = "toolplane",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the plane is, and how to answer.
#[derive(Debug, Args)]
pub struct Global {
    /// Runtime address.
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_RUNTIME_URL",
        help_heading = "Plane (client commands)",
        default_value = "http://127.0.0.1:7410",
        value_name = "URL"
    )]
    pub runtime: String,
    /// Catalog gRPC address.
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_CATALOG_URL",
        help_heading = "Plane (client commands)",
        default_value = "http://127.0.0.1:7420",
        value_name = "URL"
    )]
    pub catalog: String,
    /// Workspace service address.
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_WORKSPACE_URL",
        help_heading = "Plane (client commands)",
        default_value = "http://127.0.0.1:7430",
        value_name = "URL"
    )]
    pub workspace: String,
    /// mcp-proxy address.
    #[arg(
        long = "mcp-proxy",
        global = true,
        env = "TOOLPLANE_MCP_PROXY_URL",
        help_heading = "Plane (client commands)",
        default_value = "http://127.0.0.1:7440",
        value_name = "URL"
    )]
    pub mcp_proxy: String,
    /// Cell (tenant); empty selects the default cell.
    #[arg(
        long,
        global = true,
        env = "TOOLPLANE_CELL",
        help_heading = "Plane (client commands)",
        default_value = "",
        hide_default_value = true
    )]
    pub cell: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl Global {
    pub fn endpoints(&self) -> Endpoints {
        Endpoints {
            runtime: self.runtime.clone(),
            catalog: self.catalog.clone(),
            workspace: self.workspace.clone(),
            mcp_proxy: self.mcp_proxy.clone(),
            cell: self.cell.clone(),
            credential: crate::client::Credential::from_environment(),
        }
    }

    pub fn out(&self) -> Out {
        Out { json: self.json }
    }
}

/// Every subcommand enum is `defer`red: a subcommand's arguments are built only when it runs (or
/// its help is asked for), so a command does not pay for building the whole tree.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Start all four services in one process, on loopback, with storage under a data directory.
    Up(UpArgs),
    /// List and describe the tools of the catalog.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Put, get and list agent profiles.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Register and administer MCP servers in the mcp-proxy.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Start, follow, inspect and cancel runs.
    #[command(subcommand)]
    Run(RunCommand),
    /// Create, list and revoke bearer tokens (admins; the cell is `--cell`).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Read the admin audit: who changed tokens, registrations, policies, profiles and skills.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Calls held for approval and `ask_user` questions of the cell.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Approve a held call.
    Approve(ApproveArgs),
    /// Deny a held call (or a question); the reason reaches the model.
    Deny(DenyArgs),
    /// Answer an `ask_user` question; the answer is the tool's result.
    Answer(AnswerArgs),
    /// A run's journal as a readable timeline: every tool call with its alias, duration, outcome,
    /// error code and audit paths.
    Events(EventsArgs),
    /// Print a shell completion script (`source <(toolplane completions bash)`).
    Completions(CompletionsArgs),
    /// The demo's bundled MCP server over stdio (started by `up --demo` through the mcp-proxy).
    #[command(hide = true)]
    DemoMcpServer,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum ApprovalsCommand {
    /// List approvals and questions, newest first.
    Ls(ApprovalsLsArgs),
}

#[derive(Debug, Args)]
pub struct ApprovalsLsArgs {
    /// Only this run's.
    #[arg(long)]
    pub run: Option<String>,
    /// Only in this state: pending, approved, denied or expired (default: pending; `all` for all).
    #[arg(long, default_value = "pending")]
    pub state: String,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Approval id (`apr-…`).
    pub id: String,
    /// Also approve later calls of the same tool in this run without asking.
    #[arg(long)]
    pub remember: bool,
    /// Why, for the journal.
    #[arg(long, default_value = "")]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct DenyArgs {
    /// Approval id (`apr-…`).
    pub id: String,
    /// Why; the model reads it.
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// Approval id of the question (`apr-…`).
    pub id: String,
    /// The answer, as the model will read it.
    pub text: String,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Directory of the plane's storage.
    #[arg(long, env = "TOOLPLANE_DATA_DIR", default_value = ".toolplane")]
    pub data_dir: PathBuf,
    /// Address every service binds. Anything but loopback lets whoever reaches it start processes
    /// through stdio MCP registrations.
    #[arg(long, env = "TOOLPLANE_HOST", default_value = "127.0.0.1")]
    pub host: IpAddr,
    #[arg(long, env = "TOOLPLANE_RUNTIME_PORT", default_value_t = 7410)]
    pub runtime_port: u16,
    #[arg(long, env = "TOOLPLANE_CATALOG_PORT", default_value_t = 7420)]
    pub catalog_port: u16,
    /// Port of the catalog's HTTP API (`GET /tools`).
    #[arg(long, env = "TOOLPLANE_CATALOG_HTTP_PORT", default_value_t = 7421)]
    pub catalog_http_port: u16,
    #[arg(long, env = "TOOLPLANE_WORKSPACE_PORT", default_value_t = 7430)]
    pub workspace_port: u16,
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_PORT", default_value_t = 7440)]
    pub mcp_proxy_port: u16,
    /// Port of the runtime's `/metrics`.
    #[arg(long, env = "TOOLPLANE_RUNTIME_HTTP_PORT", default_value_t = 7411)]
    pub runtime_http_port: u16,
    /// Port of the workspace service's `/metrics`.
    #[arg(long, env = "TOOLPLANE_WORKSPACE_HTTP_PORT", default_value_t = 7431)]
    pub workspace_http_port: u16,
    /// Port of the mcp-proxy's `/metrics`.
    #[arg(long, env = "TOOLPLANE_MCP_PROXY_HTTP_PORT", default_value_t = 7441)]
    pub mcp_proxy_http_port: u16,
    /// Directory of profile JSON files loaded at start (default: ./profiles when it exists).
    #[arg(long, env = "TOOLPLANE_PROFILES_DIR")]
    pub profiles_dir: Option<PathBuf>,
    /// Environment variables registrations may name (`inherit_env`, `header_env`, a model's
    /// `api_key_env`): names or one-`*` patterns, comma-separated; added to the defaults
    /// `*_API_KEY,*_MCP_TOKEN`.
    #[arg(long, env = "TOOLPLANE_ENV_ALLOW", value_name = "NAME,...")]
    pub env_allow: Option<String>,
    /// `Host` values the MCP face at `/mcp` answers besides the loopback names (comma-separated,
    /// `name` or `name:port`, or `*` for any), as the runtime's `mcp_allowed_hosts`.
    #[arg(long, env = "TOOLPLANE_MCP_ALLOWED_HOSTS", value_name = "HOST,...")]
    pub mcp_allowed_hosts: Option<String>,
    /// Also run a built-in scripted agent against the plane and show its timeline.
    #[arg(long)]
    pub demo: bool,
    /// With --demo: stop after the demo run and exit with its status (0 when it completed).
    #[arg(long, requires = "demo")]
    pub once: bool,
    #[command(flatten)]
    pub auth: toolplane_serve::auth::AuthArgs,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum ToolsCommand {
    /// List tools: usable ones, or all with --all (each with the reason it cannot be used).
    Ls(ToolsLsArgs),
    /// Describe tools as a model reads them: description and arguments.
    Describe(ToolsDescribeArgs),
}

#[derive(Debug, Args)]
pub struct ToolsLsArgs {
    /// Also list unusable tools, with the reason.
    #[arg(long)]
    pub all: bool,
    /// Only tools of these sources (builtin, mcp, external, adapter, agent, run).
    #[arg(long, value_delimiter = ',')]
    pub source: Vec<String>,
    /// What this profile would see, with the policy decision of each tool.
    #[arg(long)]
    pub profile: Option<String>,
    /// Case-insensitive substring of id, title or description.
    #[arg(long)]
    pub query: Option<String>,
}

#[derive(Debug, Args)]
pub struct ToolsDescribeArgs {
    /// Tool ids, e.g. `builtin:workspace.read_file`.
    pub tool_ids: Vec<String>,
    /// Describe this profile's tools (with its description overrides).
    #[arg(long)]
    pub profile: Option<String>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum TokenCommand {
    /// Create a token of `--cell` (empty: the caller's cell); prints its secret, the only time.
    Create {
        /// `reader`, `agent` or `admin`.
        #[arg(long)]
        role: String,
        /// Who or what holds the token.
        #[arg(long, default_value = "")]
        name: String,
        /// Lifetime: a number with `s`, `m`, `h` or `d` (e.g. `30d`); none for no expiry.
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
    },
    /// List tokens (never their secrets).
    Ls,
    /// Revoke a token by its id (`tok_…`).
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum AuditCommand {
    /// Every administrative change of `--cell` (admins), from the catalog, the mcp-proxy and the
    /// workspace, oldest first.
    Admin {
        /// Only changes at or after this time (Unix milliseconds).
        #[arg(long, default_value_t = 0)]
        since: u64,
        /// Only changes of this kind: `token`, `registration`, `policy`, `profile` or `skill`.
        #[arg(long, default_value = "")]
        kind: String,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum ProfileCommand {
    /// Create or replace a profile from a JSON file (`-` reads stdin); its `id` names it.
    Put(ProfilePutArgs),
    /// Print a profile's JSON document.
    Get { id: String },
    /// List profiles.
    Ls,
    /// Delete a profile.
    Rm { id: String },
}

#[derive(Debug, Args)]
pub struct ProfilePutArgs {
    /// The profile's JSON file, or `-` for stdin.
    pub file: PathBuf,
    /// Only check it: report errors and warnings, store nothing.
    #[arg(long)]
    pub check: bool,
    /// Write only if the stored version is this one (0: it must not exist yet).
    #[arg(long)]
    pub expected_version: Option<u64>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum McpCommand {
    /// Register an MCP server: `mcp add NAME --stdio -- COMMAND [ARGS…]` or `mcp add NAME --url URL`.
    Add(McpAddArgs),
    /// List MCP servers, or one server's tools with their permissions.
    Ls {
        /// Show this server's tools.
        name: Option<String>,
    },
    /// Reconnect if needed and list a server's tools again.
    Refresh { name: String },
    /// Pause a server: its tools become unusable and calls are refused.
    Pause { name: String },
    /// Resume a paused server.
    Resume { name: String },
    /// Set the permission of a server's tools (allow by default).
    Permit(McpPermitArgs),
    /// Remove a server registration and its tools.
    Rm { name: String },
    /// Serve a running plane's tools to a stdio MCP client (one session = one invocation).
    Serve(McpServeArgs),
}

#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// Speak MCP over stdin / stdout (the one transport of `mcp serve`).
    #[arg(long)]
    pub stdio: bool,
    /// The profile whose tools the session offers.
    #[arg(long)]
    pub profile: String,
    /// An existing run to open the invocation in (default: a new run of the session).
    #[arg(long)]
    pub run: Option<String>,
    /// The plane's MCP endpoint (`/mcp` on the runtime's HTTP port).
    #[arg(
        long,
        env = "TOOLPLANE_MCP_URL",
        default_value = "http://127.0.0.1:7411/mcp"
    )]
    pub url: String,
}

#[derive(Debug, Args)]
pub struct McpAddArgs {
    /// Display name; profiles select its tools as `mcp:<name>/<tool>`.
    pub name: String,
    /// A local server speaking MCP over stdin/stdout: the command follows `--`.
    #[arg(long, conflicts_with = "url")]
    pub stdio: bool,
    /// A remote server over streamable HTTP.
    #[arg(long)]
    pub url: Option<String>,
    /// Environment variable for a stdio server (`NAME=value`; no secrets: listings show them).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Pass this variable of the mcp-proxy's own environment to a stdio server (for secrets).
    #[arg(long = "inherit-env", value_name = "NAME")]
    pub inherit_env: Vec<String>,
    /// Working directory of a stdio server (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// HTTP header for a streamable HTTP server (`Name=value`).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub header: Vec<String>,
    /// HTTP header whose value the mcp-proxy reads from its environment (`Name=VARIABLE`).
    #[arg(long = "header-env", value_name = "NAME=VARIABLE")]
    pub header_env: Vec<String>,
    /// Register it paused.
    #[arg(long)]
    pub paused: bool,
    /// Allow every tool of the server (without it, permissions stay off).
    #[arg(long)]
    pub allow: bool,
    /// Allow this tool (repeatable).
    #[arg(long = "allow-tool", value_name = "TOOL")]
    pub allow_tool: Vec<String>,
    /// The stdio server's command and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Permission {
    Allow,
    Ask,
    Off,
}

#[derive(Debug, Args)]
pub struct McpPermitArgs {
    /// Server display name (or id).
    pub name: String,
    /// Tools (native names); or --all.
    pub tools: Vec<String>,
    /// Every tool the server has now.
    #[arg(long, conflicts_with = "tools")]
    pub all: bool,
    /// The permission to set.
    #[arg(long = "set", value_enum, default_value = "allow")]
    pub permission: Permission,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum RunCommand {
    /// Start a runtime-driven run and follow its timeline until it ends (or --detach).
    Start(RunStartArgs),
    /// Follow a run's timeline until it ends; exits 0 when it completed.
    Watch(RunWatchArgs),
    /// Show a run.
    Get { run_id: String },
    /// Cancel a run.
    Cancel {
        run_id: String,
        /// Why, for the journal.
        #[arg(long, default_value = "cancelled from the toolplane cli")]
        reason: String,
    },
    /// List runs, newest first.
    Ls {
        /// Most runs to show.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Print a file or audit object of a run: a path `toolplane events` shows (`tool-results/…`),
    /// or a workspace file such as `output/main.md`.
    Cat { run_id: String, path: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp …).
    Openai,
    /// OpenAI Responses.
    OpenaiResponses,
    Anthropic,
    Gemini,
}

#[derive(Debug, Args)]
pub struct RunStartArgs {
    /// The user message that starts the run.
    pub message: Option<String>,
    /// Agent profile.
    #[arg(long, default_value = "default")]
    pub profile: String,
    /// Replay this script instead of calling a model: `{"turns": [assistant messages…]}`.
    #[arg(long, conflicts_with_all = ["base_url", "model"])]
    pub script: Option<PathBuf>,
    /// Model endpoint base URL (e.g. https://api.openai.com/v1).
    #[arg(long, env = "OPENAI_BASE_URL")]
    pub base_url: Option<String>,
    /// Model name.
    #[arg(long, env = "OPENAI_MODEL")]
    pub model: Option<String>,
    /// Variable of the runtime's environment that holds the API key (default OPENAI_API_KEY when
    /// it is set here). The key itself never travels.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Wire format of the model endpoint.
    #[arg(long, value_enum, default_value = "openai")]
    pub provider: Provider,
    /// A background run (nobody waits; finish needs no commit).
    #[arg(long)]
    pub background: bool,
    /// The chat the run commits into.
    #[arg(long, default_value = "cli")]
    pub chat: String,
    /// Most model rounds.
    #[arg(long)]
    pub max_rounds: Option<u32>,
    /// Run id (default: generated).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Print the run id and return instead of following the run.
    #[arg(long)]
    pub detach: bool,
}

#[derive(Debug, Args)]
pub struct RunWatchArgs {
    pub run_id: String,
    /// Start at this journal sequence number.
    #[arg(long, default_value_t = 1)]
    pub from_seq: u64,
    /// Show every journal record.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    pub run_id: String,
    /// Keep following new events until the run ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Show every journal record, also those another line already covers.
    #[arg(long)]
    pub all: bool,
    /// Start at this journal sequence number.
    #[arg(long, default_value_t = 1)]
    pub from_seq: u64,
}

/// Carries out the parsed command; returns the exit status.
pub async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    let eps = cli.global.endpoints();
    let out = cli.global.out();
    match cli.command {
        Command::Up(args) => crate::up::up(args, out).await,
        Command::Tools(c) => crate::commands::tools::run(c, &eps, out).await.map(|()| 0),
        Command::Profile(c) => crate::commands::profile::run(c, &eps, out)
            .await
            .map(|()| 0),
        Command::Mcp(c) => crate::commands::mcp::run(c, &eps, out).await.map(|()| 0),
        Command::Run(c) => crate::commands::run::run(c, &eps, out).await,
        Command::Token(c) => crate::commands::token::run(c, &eps, out).await.map(|()| 0),
        Command::Audit(c) => crate::commands::audit::run(c, &eps, out).await.map(|()| 0),
        Command::Events(a) => crate::commands::run::events(a, &eps, out).await.map(|()| 0),
        Command::Approvals(ApprovalsCommand::Ls(a)) => crate::commands::approvals::ls(a, &eps, out)
            .await
            .map(|()| 0),
        Command::Approve(a) => crate::commands::approvals::approve(a, &eps, out)
            .await
            .map(|()| 0),
        Command::Deny(a) => crate::commands::approvals::deny(a, &eps, out)
            .await
            .map(|()| 0),
        Command::Answer(a) => crate::commands::approvals::answer(a, &eps, out)
            .await
            .map(|()| 0),
        Command::Completions(a) => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut command, "toolplane", &mut std::io::stdout());
            Ok(0)
        }
        Command::DemoMcpServer => crate::demo_mcp::serve_stdio()
            .await
            .map(|()| 0)
            .map_err(CliError::Io),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn mcp_add_takes_the_command_after_the_separator() {
        let cli = Cli::try_parse_from([
            "toolplane",
            "mcp",
            "add",
            "demo",
            "--stdio",
            "--allow",
            "--",
            "npx",
            "-y",
            "server",
            "--flag",
        ])
        .unwrap();
        let Command::Mcp(McpCommand::Add(a)) = cli.command else {
            panic!("not mcp add")
        };
        assert!(a.stdio && a.allow);
        assert_eq!(a.command, ["npx", "-y", "server", "--flag"]);
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from([
            "toolplane",
            "tools",
            "ls",
            "--json",
            "--catalog",
            "127.0.0.1:1",
        ])
        .unwrap();
        assert!(cli.global.json);
        assert_eq!(cli.global.catalog, "127.0.0.1:1");
    }
}
