//! The workspace binary bound beyond loopback without `--auth` exits at once with one clear line
//! and status 2, before it serves anything; with `[auth] enabled = true` in its configuration
//! file it starts instead (docs/auth.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary with none of the authentication variables a developer's shell might carry.
fn command(data: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolplane-workspace"));
    command
        .args(["--listen", "0.0.0.0:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::null());
    for var in [
        "TOOLPLANE_AUTH",
        "TOOLPLANE_INSECURE_NO_AUTH_ON_NETWORK",
        "TOOLPLANE_AUTH_TOKENS",
        "TOOLPLANE_AUTH_JWKS",
        "TOOLPLANE_AUTH_ISSUER",
        "TOOLPLANE_AUTH_AUDIENCE",
        "TOOLPLANE_AUTH_SERVICE_TOKEN_FILE",
        "TOOLPLANE_WORKSPACE_CONFIG",
    ] {
        command.env_remove(var);
    }
    command
}

#[test]
fn beyond_loopback_without_auth_the_workspace_exits_with_auth_required() {
    let dir = tempfile::tempdir().unwrap();
    let output = command(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "toolplane-workspace: auth.required: the workspace refuses to serve on 0.0.0.0:0"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("--insecure-no-auth-on-network"), "{stderr}");
    assert!(!dir.path().join("admin.token").exists());
}

/// Kills the process when dropped, so a failed assertion leaves nothing running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn auth_enabled_in_the_config_file_lets_the_workspace_serve_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("workspace.toml");
    std::fs::write(&config, "[auth]\nenabled = true\n").unwrap();
    let mut running = Running(
        command(&data)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // With authentication on, the first start writes the first admin token: proof that the
    // file's `[auth]` switched it on.
    let token = data.join("admin.token");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !token.exists() {
        if let Some(status) = running.0.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(running.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            panic!("the workspace exited with {status}: {stderr}");
        }
        assert!(Instant::now() < deadline, "no admin token after 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(running.0.try_wait().unwrap().is_none(), "it keeps serving");
}
