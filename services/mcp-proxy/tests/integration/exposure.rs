//! The mcp-proxy binary bound beyond loopback without `--auth` exits at once with one clear line
//! and status 2, before it serves anything; with `[auth] enabled = true` in its configuration
//! file it starts instead (docs/auth.md). The checks are shared by every service binary
//! (`toolplane_testkit::binary`).

use toolplane_testkit::binary;

const BIN: &str = env!("CARGO_BIN_EXE_toolplane-mcp-proxy");

#[test]
fn beyond_loopback_without_auth_the_mcp_proxy_exits_with_auth_required() {
    binary::assert_beyond_loopback_without_auth_it_exits(
        BIN,
        "mcp-proxy",
        "TOOLPLANE_MCP_PROXY_CONFIG",
    );
}

#[test]
fn auth_enabled_in_the_config_file_lets_the_mcp_proxy_serve_beyond_loopback() {
    binary::assert_auth_in_the_config_file_lets_it_serve_beyond_loopback(
        BIN,
        "TOOLPLANE_MCP_PROXY_CONFIG",
    );
}
