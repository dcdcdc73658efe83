//! The workspace binary reads its TLS flags (docs/auth.md, "mTLS between services"): certificate
//! files it cannot read stop it at start with `tls.files` naming the file, and half a pair with
//! `tls.invalid_request`, before it serves anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

fn start(tls: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_toolplane-workspace"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(tls)
        .env_remove("TOOLPLANE_WORKSPACE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn unreadable_or_half_given_certificates_stop_the_workspace() {
    let (status, stderr) = start(&[
        "--tls-cert",
        "/nonexistent/tls.crt",
        "--tls-key",
        "/nonexistent/tls.key",
    ]);
    assert_ne!(status, Some(0));
    assert!(
        stderr.contains("tls.files: /nonexistent/tls.crt"),
        "{stderr}"
    );
    let (status, stderr) = start(&["--tls-cert", "/nonexistent/tls.crt"]);
    assert_ne!(status, Some(0));
    assert!(stderr.contains("tls.invalid_request"), "{stderr}");
}
