//! What the proxy allows a stdio server process and how it keeps it contained: the command and
//! environment allow-lists, resource limits, and killing a server's whole process group.
//!
//! Every stdio server runs as the leader of its own process group, so the group holds everything
//! it started (a `npx` wrapper, a language server, `sleep 1000 &`). The group is killed when the
//! server is unregistered, when it exits on its own (a crash leaves no orphans) and when the proxy
//! shuts down. If the proxy itself dies without a chance to clean up (SIGKILL, OOM), a small
//! guard process, started once per proxy process, kills every group still registered with it:
//! its stdin is a pipe from the proxy, and the end of that pipe is the proxy's death. (The
//! kernel's parent-death signal would need `unsafe` code between fork and exec, which the
//! workspace forbids; the guard also reaches grandchildren, which that signal never does.)
//!
//! This module decides nothing about registrations beyond the allow-lists; it never talks MCP.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};
use toolplane_core::envallow::EnvAllowList;

use crate::error::{MCP_COMMAND_NOT_ALLOWED, MCP_ENV_NOT_ALLOWED, ProxyError};
use crate::registration::{TransportSpec, shown};

/// The proxy's rules for stdio processes and for the environment registrations may name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessSettings {
    /// Commands a stdio registration may run when authentication is on, compared with the
    /// registration's `command` exactly as written (list absolute paths). Empty by default: with
    /// authentication on, no stdio server can be registered until an operator lists one.
    pub allowed_commands: Vec<String>,
    /// Variables of the proxy's environment that `inherit_env` and `header_env` may name (exact
    /// names or one-`*` patterns). Empty by default: no variable of the proxy may be named.
    pub env_allow: EnvAllowList,
    /// Resource limits of every stdio server process (each `0`: not limited).
    pub rlimits: ChildLimits,
}

/// Resource limits of a stdio server, set through `/bin/sh`'s `ulimit` before its program starts
/// (see [`ChildLimits::launcher`]); everything it starts inherits them. `0` leaves a limit as the
/// proxy's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChildLimits {
    /// Address space, in bytes (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// CPU time, in seconds (`RLIMIT_CPU`): the process gets SIGXCPU, then SIGKILL.
    pub cpu_seconds: u64,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    pub open_files: u64,
}

impl ProcessSettings {
    /// Refuses a stdio registration by a caller authenticated as `is_admin` (or not) when
    /// authentication is on: only admins, and only commands on [`Self::allowed_commands`].
    pub fn check_stdio(&self, transport: &TransportSpec, is_admin: bool) -> Result<(), ProxyError> {
        let TransportSpec::Stdio { command, .. } = transport else {
            return Ok(());
        };
        if !is_admin {
            return Err(ProxyError::new(
                MCP_COMMAND_NOT_ALLOWED,
                "only an admin may register a stdio server",
            ));
        }
        if !self.allowed_commands.iter().any(|c| c == command) {
            return Err(ProxyError::new(
                MCP_COMMAND_NOT_ALLOWED,
                format!(
                    "command `{}` is not on the proxy's allowed_commands list",
                    shown(command)
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a transport naming a variable of the proxy's environment that is not on
    /// [`Self::env_allow`].
    pub fn check_env(&self, transport: &TransportSpec) -> Result<(), ProxyError> {
        let (names, field): (Vec<&String>, &str) = match transport {
            TransportSpec::Stdio { inherit_env, .. } => {
                (inherit_env.iter().collect(), "inherit_env")
            }
            TransportSpec::StreamableHttp { header_env, .. } => {
                (header_env.values().collect(), "header_env")
            }
        };
        match names.into_iter().find(|n| !self.env_allow.allows(n)) {
            Some(name) => Err(ProxyError::new(
                MCP_ENV_NOT_ALLOWED,
                format!(
                    "{field} names `{}`, which is not on the proxy's env_allow list",
                    shown(name)
                ),
            )),
            None => Ok(()),
        }
    }
}

impl ChildLimits {
    /// The shell line that sets these limits and then runs its arguments (`sh -c <line> sh
    /// <command> <args>…`), or `None` when nothing is limited. The limits are set in the process
    /// itself before the server's program starts, so nothing it starts escapes them; `exec`
    /// keeps the pid, so the server still leads its process group.
    pub fn launcher(&self) -> Option<String> {
        let mut line = String::new();
        for (flag, value) in [
            ("-v", self.memory_bytes.div_ceil(1024)),
            ("-t", self.cpu_seconds),
            ("-n", self.open_files),
        ] {
            if value > 0 {
                line.push_str(&format!("ulimit {flag} {value} && "));
            }
        }
        (!line.is_empty()).then(|| line + "exec \"$@\"")
    }
}

fn to_pid(pid: u32) -> std::io::Result<Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other(format!("pid {pid} out of range")))
}

/// Sends SIGKILL to every process of the group `pgid`; a group already gone is not an error.
pub fn kill_group(pgid: u32) {
    let Ok(pid) = to_pid(pgid) else { return };
    match rustix::process::kill_process_group(pid, Signal::KILL) {
        Ok(()) => {}
        Err(rustix::io::Errno::SRCH) => {}
        Err(e) => tracing::warn!(pgid, error = %e, "killing an mcp server's process group failed"),
    }
}

/// The guard: a `/bin/sh` reading `+<pgid>` and `-<pgid>` lines; at the end of its input (the
/// proxy's exit, however it happened) it kills every group it still holds.
const GUARD_SCRIPT: &str = r#"trap '' INT HUP
g=' '
while IFS= read -r l; do
  case "$l" in
    +*) g="$g${l#+} " ;;
    -*) n=' '; for p in $g; do [ "$p" = "${l#-}" ] || n="$n$p "; done; g=$n ;;
  esac
done
for p in $g; do kill -KILL "-$p" 2>/dev/null; done
"#;

#[derive(Debug)]
struct Guard {
    stdin: ChildStdin,
    // Kept so the guard's handle lives as long as the proxy process.
    _child: Child,
}

static GUARD: OnceLock<Mutex<Option<Guard>>> = OnceLock::new();

fn start_guard() -> Option<Guard> {
    let started = Command::new("/bin/sh")
        .args(["-c", GUARD_SCRIPT])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    match started {
        Ok(mut child) => {
            let stdin = child.stdin.take()?;
            Some(Guard {
                stdin,
                _child: child,
            })
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the process-group guard (/bin/sh); stdio servers may outlive a killed proxy");
            None
        }
    }
}

fn tell_guard(line: &str) {
    let slot = GUARD.get_or_init(|| Mutex::new(start_guard()));
    let mut guard = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(g) = guard.as_mut()
        && let Err(e) = g.stdin.write_all(line.as_bytes())
    {
        tracing::warn!(error = %e, "the process-group guard is gone; stdio servers may outlive a killed proxy");
        *guard = None;
    }
}

/// Hands the group `pgid` to the guard, which kills it if the proxy dies first.
pub fn guard_group(pgid: u32) {
    tell_guard(&format!("+{pgid}\n"));
}

/// Takes the group `pgid` back from the guard once it has been killed.
pub fn release_group(pgid: u32) {
    tell_guard(&format!("-{pgid}\n"));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeMap;

    use super::*;

    fn stdio(command: &str, inherit: &[&str]) -> TransportSpec {
        TransportSpec::Stdio {
            command: command.into(),
            args: vec![],
            env: BTreeMap::from([("ANY_NAME".to_owned(), "inline values are fine".to_owned())]),
            inherit_env: inherit.iter().map(|s| s.to_string()).collect(),
            cwd: None,
        }
    }

    #[test]
    fn stdio_commands_need_an_admin_and_the_allow_list() {
        let settings = ProcessSettings {
            allowed_commands: vec!["/usr/bin/node".into()],
            ..Default::default()
        };
        settings
            .check_stdio(&stdio("/usr/bin/node", &[]), true)
            .unwrap();
        for (command, admin) in [("/usr/bin/node", false), ("node", true), ("/bin/sh", true)] {
            let e = settings
                .check_stdio(&stdio(command, &[]), admin)
                .unwrap_err();
            assert_eq!(e.code, MCP_COMMAND_NOT_ALLOWED, "{command} {admin}");
            assert_eq!(e.to_status().code(), tonic::Code::PermissionDenied);
        }
        let http = TransportSpec::StreamableHttp {
            url: "http://x".into(),
            headers: BTreeMap::new(),
            header_env: BTreeMap::new(),
        };
        ProcessSettings::default()
            .check_stdio(&http, false)
            .unwrap();
    }

    #[test]
    fn limits_become_a_ulimit_launcher() {
        assert_eq!(ChildLimits::default().launcher(), None);
        let limits = ChildLimits {
            memory_bytes: 1_000_000,
            cpu_seconds: 0,
            open_files: 64,
        };
        assert_eq!(
            limits.launcher().unwrap(),
            "ulimit -v 977 && ulimit -n 64 && exec \"$@\""
        );
    }

    #[test]
    fn named_variables_must_be_on_the_env_allow_list() {
        let settings = ProcessSettings {
            env_allow: EnvAllowList::new(["DOCS_TOKEN", "*_API_KEY"]),
            ..Default::default()
        };
        settings
            .check_env(&stdio("x", &["DOCS_TOKEN", "OPENAI_API_KEY"]))
            .unwrap();
        let e = settings
            .check_env(&stdio("x", &["DOCS_TOKEN", "AWS_SECRET_ACCESS_KEY"]))
            .unwrap_err();
        assert_eq!(e.code, MCP_ENV_NOT_ALLOWED);
        assert_eq!(e.to_status().code(), tonic::Code::InvalidArgument);
        assert!(e.message.contains("AWS_SECRET_ACCESS_KEY"), "{e}");
        let http = |var: &str| TransportSpec::StreamableHttp {
            url: "http://x".into(),
            headers: BTreeMap::new(),
            header_env: BTreeMap::from([("authorization".to_owned(), var.to_owned())]),
        };
        settings.check_env(&http("DOCS_TOKEN")).unwrap();
        assert_eq!(
            settings.check_env(&http("HOME")).unwrap_err().code,
            MCP_ENV_NOT_ALLOWED
        );
    }
}
