//! Authentication as a user meets it: `toolplane up --auth` writes the first admin token to
//! `<data-dir>/admin.token` (mode 0600) and says so, the CLI on the same machine works with it,
//! a wrong `TOOLPLANE_TOKEN` or no credential at all is refused; and `toolplane up` bound beyond
//! loopback without `--auth` exits with one clear line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_support;

use std::os::unix::fs::PermissionsExt;

use cli_support::*;

#[test]
fn up_with_auth_writes_the_admin_token_and_the_cli_uses_it() {
    let mut up = Up::start(&["--auth"]);
    up.wait_for_line("admin token written to", std::time::Duration::from_secs(10));
    let token = up.dir.path().join(".toolplane/admin.token");
    let mode = std::fs::metadata(&token).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let secret = std::fs::read_to_string(&token).unwrap();
    assert!(secret.starts_with("tp_"));

    // The CLI finds the local admin token by itself, or takes it from TOOLPLANE_TOKEN.
    let tools = up.cli(&["tools", "ls", "--json"]).ok().json();
    assert!(tools.as_array().is_some_and(|t| !t.is_empty()), "{tools}");
    up.cli_with(&["tools", "ls"], &[("TOOLPLANE_TOKEN", secret.trim())])
        .ok();

    let wrong = format!("tp_{}", "0".repeat(64));
    let refused = up.cli_with(&["tools", "ls"], &[("TOOLPLANE_TOKEN", &wrong)]);
    refused.one_line_error(1, "auth.unauthenticated");
    // Without the file (and without TOOLPLANE_TOKEN) nothing is sent, and nothing is allowed.
    std::fs::rename(&token, up.dir.path().join("elsewhere")).unwrap();
    up.cli(&["tools", "ls"])
        .one_line_error(1, "auth.unauthenticated");
    let (status, _, stderr) = up.interrupt();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn up_beyond_loopback_without_auth_exits_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let ran = run_in(dir.path(), &["up", "--host", "0.0.0.0"]);
    let line = ran.one_line_error(2, "auth.required");
    assert!(
        line.contains("0.0.0.0") && line.contains("--auth"),
        "{line}"
    );
    assert!(line.contains("--insecure-no-auth-on-network"), "{line}");
    assert!(
        ran.stdout.is_empty(),
        "nothing claims to be up: {}",
        ran.stdout
    );
    assert!(!dir.path().join(".toolplane").exists());
}

#[test]
fn the_demo_completes_with_auth_on_so_services_reach_each_other() {
    // The demo's run goes through the runtime's calls to the catalog, the workspace and the
    // mcp-proxy, and the catalog's pull from the mcp-proxy: each needs the service credential.
    let dir = tempfile::tempdir().unwrap();
    let (_, ran) = run_up_in(dir.path(), &["--auth", "--demo", "--once"]);
    let ran = ran.ok();
    assert!(ran.stdout.contains("completed"), "{}", ran.stdout);
    assert!(dir.path().join(".toolplane/admin.token").is_file());
}

#[test]
fn a_token_made_with_the_cli_is_accepted_at_once_and_refused_once_revoked() {
    // Tokens made over the catalog's TokenService are the ones every service verifies: the
    // reader token works on the runtime's and the catalog's RPCs as soon as it is printed.
    let mut up = Up::start(&["--auth"]);
    up.wait_for_line("admin token written to", std::time::Duration::from_secs(10));
    let created = up
        .cli(&[
            "token",
            "create",
            "--role",
            "reader",
            "--name",
            "dashboards",
        ])
        .ok();
    let secret = created.stdout.trim().to_owned();
    assert!(secret.starts_with("tp_"), "{secret}");
    let reader = [("TOOLPLANE_TOKEN", secret.as_str())];

    up.cli_with(&["tools", "ls"], &reader).ok();
    up.cli_with(&["run", "ls"], &reader).ok();
    // A reader may look, not administer.
    up.cli_with(&["token", "create", "--role", "admin"], &reader)
        .one_line_error(1, "auth.permission_denied");

    let tokens = up.cli(&["token", "ls", "--json"]).ok().json();
    let id = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "dashboards")
        .and_then(|t| t["tokenId"].as_str())
        .unwrap()
        .to_owned();
    up.cli(&["token", "revoke", &id]).ok();
    up.cli_with(&["tools", "ls"], &reader)
        .one_line_error(1, "auth.unauthenticated");
    let (status, _, stderr) = up.interrupt();
    assert_eq!(status.code(), Some(0), "{stderr}");
}
