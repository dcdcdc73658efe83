//! The `toolplane-mcp-proxy` binary as a separate process, and what `/proc` says about it and its
//! children (shared by the binary test and the benchmark's memory figures).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

/// A running proxy binary; killed and reaped on drop if it was not stopped.
pub struct ProxyProcess {
    pub child: Child,
    pub addr: String,
    pub stderr_path: std::path::PathBuf,
}

impl ProxyProcess {
    /// Starts the binary with `env` (nothing else of the test's environment but `PATH` and
    /// `HOME`), its stderr in `<log_dir>/proxy.stderr`.
    pub fn start(env: &[(&str, String)], log_dir: &Path) -> ProxyProcess {
        let stderr_path = log_dir.join("proxy.stderr");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolplane-mcp-proxy"));
        cmd.env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        for name in ["PATH", "HOME"] {
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        cmd.env("RUST_LOG", "warn");
        cmd.env("TOOLPLANE_MCP_PROXY_HTTP_LISTEN", "127.0.0.1:0");
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let child = cmd.spawn().unwrap();
        let addr = env
            .iter()
            .find(|(k, _)| *k == "TOOLPLANE_MCP_PROXY_LISTEN")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "127.0.0.1:7440".to_owned());
        ProxyProcess {
            child,
            addr,
            stderr_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// A channel to the proxy once it accepts connections (within 20 s).
    pub async fn connect(&mut self) -> Channel {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the proxy exited before serving ({status}); stderr:\n{}",
                    self.stderr()
                );
            }
            let channel = Channel::from_shared(format!("http://{}", self.addr))
                .unwrap()
                .tcp_nodelay(true)
                .connect()
                .await;
            match channel {
                Ok(c) => return c,
                Err(e) if started.elapsed() > Duration::from_secs(20) => {
                    panic!(
                        "the proxy did not serve on {} within 20 s: {e}; stderr:\n{}",
                        self.addr,
                        self.stderr()
                    )
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Sends SIGTERM and waits (up to `limit`) for the process to exit.
    pub fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM failed");
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "the proxy did not exit within {limit:?} of SIGTERM; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB; `None` once the process is
/// gone.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    })
}

/// The direct children of `pid`, from the parent field of every `/proc/<n>/stat`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|n| {
            std::fs::read_to_string(format!("/proc/{n}/stat"))
                .ok()
                // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// The stdio servers among the children of `pid`: every child but the proxy's process-group guard
/// (a `/bin/sh` that outlives nothing but the proxy).
pub fn servers_of(pid: u32) -> Vec<u32> {
    children_of(pid)
        .into_iter()
        .filter(|c| {
            let cmdline = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
            !cmdline.starts_with(b"/bin/sh\0")
        })
        .collect()
}

/// Whether `pid` names a live process (not gone, not a zombie).
pub fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let state = s.rsplit_once(')')?.1.split_whitespace().next()?.to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}
