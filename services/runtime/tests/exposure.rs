//! The runtime binary bound beyond loopback without `--auth` exits at once with one clear line
//! and a non-zero status, before it serves anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

#[test]
fn beyond_loopback_without_auth_the_runtime_exits_with_auth_required() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_toolplane-runtime"))
        .args(["--listen", "0.0.0.0:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("TOOLPLANE_AUTH")
        .env_remove("TOOLPLANE_INSECURE_NO_AUTH_ON_NETWORK")
        .env_remove("TOOLPLANE_RUNTIME_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "toolplane-runtime: auth.required: the runtime refuses to serve on 0.0.0.0:0"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("--insecure-no-auth-on-network"), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).is_empty());
}
