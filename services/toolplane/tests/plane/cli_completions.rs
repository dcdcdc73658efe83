//! `toolplane completions <shell>`: a script the shell accepts, naming every command a user types,
//! down to the flags of a nested subcommand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_support;

use std::process::Command;

use cli_support::*;

#[test]
fn the_bash_script_parses_and_completes_nested_commands_and_their_flags() {
    let dir = tempfile::tempdir().unwrap();
    let ran = run_in(dir.path(), &["completions", "bash"]).ok();
    let script = &ran.stdout;
    for word in [
        "approvals",
        "approve",
        "completions",
        "token",
        "revoke",
        "--remember",
    ] {
        assert!(script.contains(word), "`{word}` is not completed");
    }
    let path = dir.path().join("toolplane.bash");
    std::fs::write(&path, script).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(
        checked.status.success(),
        "bash refuses the script: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // Sourced, it registers the completion function for `toolplane`.
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p toolplane",
            path.display()
        ))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sourced.stdout).contains("toolplane"),
        "{sourced:?}"
    );
}

#[test]
fn every_shell_clap_knows_gets_a_script_and_an_unknown_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let ran = run_in(dir.path(), &["completions", shell]).ok();
        assert!(ran.stdout.contains("approve"), "{shell}");
    }
    let refused = run_in(dir.path(), &["completions", "tcsh"]);
    assert_eq!(refused.code, Some(2), "a usage error");
    assert!(refused.stderr.contains("tcsh"), "{}", refused.stderr);
}
