//! A service binary started once as an operator would, for the checks every service's binary
//! shares: loopback on free ports, a fresh data directory, its configuration-file variable unset,
//! and the given flags; what it printed on stderr and how it exited.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

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

fn fresh_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("toolplane-binary-{}-{nanos}", std::process::id()))
}
