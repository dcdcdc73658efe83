//! `toolplane-mcp-fixture`: the fixture MCP server of `toolplane_testkit::mcp_fixture`, over stdio.
//! Configured through `FIXTURE_*` environment variables; for tests and benchmarks only.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match toolplane_testkit::mcp_fixture::serve_stdio().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
