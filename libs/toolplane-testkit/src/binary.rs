//! A service binary started once as an operator would, for the checks every service's binary
//! shares: loopback on free ports, a fresh data directory, its configuration-file variable unset,
//! and the given flags; what it printed on stderr and how it exited.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Runs `bin` (a path from `env!("CARGO_BIN_EXE_…")`) with `flags` until it exits; its exit code
/// and stderr. `config_env` is the variable that would name its configuration file.
pub fn run_once(bin: &str, config_env: &str, flags: &[&str]) -> (Option<i32>, String) {
    let data_dir = fresh_dir();
    let output = Command::new(bin)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data_dir)
        .args(flags)
        .env_remove(config_env)
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&data_dir);
    match output {
        Ok(o) => (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => panic!("starting {bin}: {e}"),
    }
}

/// The binary's TLS flags are read before it serves anything (docs/auth.md, "mTLS between
/// services"): certificate files it cannot read stop it with `tls.files` naming the file, half a
/// pair with `tls.invalid_request`.
pub fn assert_unusable_tls_flags_stop_it(bin: &str, config_env: &str) {
    let (status, stderr) = run_once(
        bin,
        config_env,
        &[
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ],
    );
    assert_ne!(status, Some(0));
    assert!(
        stderr.contains("tls.files: /nonexistent/tls.crt"),
        "{stderr}"
    );
    let (status, stderr) = run_once(bin, config_env, &["--tls-cert", "/nonexistent/tls.crt"]);
    assert_ne!(status, Some(0));
    assert!(stderr.contains("tls.invalid_request"), "{stderr}");
}

/// The variables of authentication a developer's shell might carry, unset for the exposure checks.
const AUTH_VARS: [&str; 7] = [
    "TOOLPLANE_AUTH",
    "TOOLPLANE_INSECURE_NO_AUTH_ON_NETWORK",
    "TOOLPLANE_AUTH_TOKENS",
    "TOOLPLANE_AUTH_JWKS",
    "TOOLPLANE_AUTH_ISSUER",
    "TOOLPLANE_AUTH_AUDIENCE",
    "TOOLPLANE_AUTH_SERVICE_TOKEN_FILE",
];

/// `bin` asked to serve gRPC on every interface, its data in `data`, with none of the
/// authentication variables and no configuration-file variable.
fn beyond_loopback(bin: &str, config_env: &str, data: &Path) -> Command {
    let mut command = Command::new(bin);
    command
        .args(["--listen", "0.0.0.0:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data)
        .env_remove(config_env)
        .stdin(Stdio::null());
    for var in AUTH_VARS {
        command.env_remove(var);
    }
    command
}

/// Bound beyond loopback without `--auth`, the binary exits at once with status 2 and one clear
/// line naming `auth.required`, the address and the flag that overrides it, before it serves or
/// writes anything (docs/auth.md). `service` is how the line names it (`catalog`, `mcp-proxy` …).
pub fn assert_beyond_loopback_without_auth_it_exits(bin: &str, service: &str, config_env: &str) {
    let data = fresh_dir();
    let output = beyond_loopback(bin, config_env, &data).output();
    let exists = data.join("admin.token").exists();
    let _ = std::fs::remove_dir_all(&data);
    let output = output.unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let line =
        format!("toolplane-{service}: auth.required: the {service} refuses to serve on 0.0.0.0:0");
    assert!(stderr.contains(&line), "{stderr}");
    assert!(stderr.contains("--insecure-no-auth-on-network"), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).is_empty());
    assert!(!exists, "no admin token is written");
}

/// Kills the process when dropped, so a failed assertion leaves nothing running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With `[auth] enabled = true` in its configuration file, the binary serves beyond loopback: the
/// first start writes the first admin token (proof that the file switched authentication on) and
/// the process keeps running.
pub fn assert_auth_in_the_config_file_lets_it_serve_beyond_loopback(bin: &str, config_env: &str) {
    let dir = fresh_dir();
    let data = dir.join("data");
    let config = dir.join("service.toml");
    let checked = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&config, "[auth]\nenabled = true\n"))
        .map_err(|e| e.to_string())
        .and_then(|()| {
            beyond_loopback(bin, config_env, &data)
                .arg("--config")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("starting {bin}: {e}"))
        })
        .and_then(|child| wait_for_token(Running(child), &data.join("admin.token")));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = checked {
        panic!("{e}");
    }
}

fn wait_for_token(mut running: Running, token: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !token.exists() {
        if let Ok(Some(status)) = running.0.try_wait() {
            let mut stderr = String::new();
            if let Some(pipe) = running.0.stderr.as_mut() {
                let _ = std::io::Read::read_to_string(pipe, &mut stderr);
            }
            return Err(format!("it exited with {status}: {stderr}"));
        }
        if Instant::now() > deadline {
            return Err("no admin token after 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match running.0.try_wait() {
        Ok(None) => Ok(()),
        other => Err(format!("it stopped after writing the token: {other:?}")),
    }
}

fn fresh_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("toolplane-binary-{}-{nanos}", std::process::id()))
}
