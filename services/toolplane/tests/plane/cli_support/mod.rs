//! Shared set-up of the CLI's end-to-end tests: the real `toolplane` binary run as a user would —
//! `toolplane up` as a child process on free loopback ports with its own data directory, and
//! every other command as its own process pointed at it — plus the checks a user makes of the
//! output (one clear error line, no panic trace).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use toolplane_testkit::mcp_fixture::free_port;

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toolplane"))
}

/// A `toolplane` command with an environment that cannot leak into the test: no plane addresses,
/// no model endpoint, no log filter from the caller.
pub fn command(cwd: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(cwd).stdin(Stdio::null());
    for var in [
        "TOOLPLANE_RUNTIME_URL",
        "TOOLPLANE_CATALOG_URL",
        "TOOLPLANE_WORKSPACE_URL",
        "TOOLPLANE_MCP_PROXY_URL",
        "TOOLPLANE_CELL",
        "TOOLPLANE_DATA_DIR",
        "TOOLPLANE_HOST",
        "TOOLPLANE_PROFILES_DIR",
        "TOOLPLANE_TOKEN",
        "TOOLPLANE_AUTH",
        "TOOLPLANE_INSECURE_NO_AUTH_ON_NETWORK",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "RUST_LOG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        c.env_remove(var);
    }
    c
}

/// The ports of one plane.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub runtime: u16,
    pub catalog: u16,
    pub catalog_http: u16,
    pub workspace: u16,
    pub mcp_proxy: u16,
    pub metrics: [u16; 3],
}

impl Ports {
    pub fn free() -> Ports {
        Ports {
            runtime: free_port().unwrap(),
            catalog: free_port().unwrap(),
            catalog_http: free_port().unwrap(),
            workspace: free_port().unwrap(),
            mcp_proxy: free_port().unwrap(),
            metrics: [
                free_port().unwrap(),
                free_port().unwrap(),
                free_port().unwrap(),
            ],
        }
    }

    /// `toolplane up`'s port flags.
    pub fn up_args(&self) -> Vec<String> {
        [
            ("--runtime-port", self.runtime),
            ("--catalog-port", self.catalog),
            ("--catalog-http-port", self.catalog_http),
            ("--workspace-port", self.workspace),
            ("--mcp-proxy-port", self.mcp_proxy),
            ("--runtime-http-port", self.metrics[0]),
            ("--workspace-http-port", self.metrics[1]),
            ("--mcp-proxy-http-port", self.metrics[2]),
        ]
        .iter()
        .flat_map(|(flag, port)| [(*flag).to_owned(), port.to_string()])
        .collect()
    }

    /// The client commands' address flags.
    pub fn client_args(&self) -> Vec<String> {
        [
            ("--runtime", self.runtime),
            ("--catalog", self.catalog),
            ("--workspace", self.workspace),
            ("--mcp-proxy", self.mcp_proxy),
        ]
        .iter()
        .flat_map(|(flag, port)| [(*flag).to_owned(), format!("127.0.0.1:{port}")])
        .collect()
    }
}

/// A finished command as the user saw it.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    fn from(o: Output) -> Ran {
        Ran {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Succeeded; shows both streams otherwise.
    pub fn ok(self) -> Ran {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }

    /// Failed with `code` and exactly one stderr line `toolplane: <error code>: …`, no panic trace.
    pub fn one_line_error(&self, exit: i32, error_code: &str) -> &str {
        assert_eq!(
            self.code,
            Some(exit),
            "exit status\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(lines.len(), 1, "one error line expected:\n{}", self.stderr);
        assert!(
            lines[0].starts_with(&format!("toolplane: {error_code}")),
            "error line: {}",
            lines[0]
        );
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "{}",
            self.stderr
        );
        lines[0]
    }
}

/// Runs `toolplane args…` in `cwd` to the end (at most 120 s).
pub fn run_in(cwd: &Path, args: &[&str]) -> Ran {
    run_in_with(cwd, args, &[])
}

/// Runs `toolplane up <port flags> <extra…>` to its end on free ports, in `dir`. Free ports are
/// picked, released and then bound by the plane, so another test may take one in between: such a
/// start fails with `plane.bind_failed` before it serves anything, and is run again on new ports.
pub fn run_up_in(dir: &Path, extra: &[&str]) -> (Ports, Ran) {
    for _ in 0..4 {
        let ports = Ports::free();
        let mut args = vec!["up".to_owned()];
        args.extend(ports.up_args());
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = run_in(dir, &refs);
        if ran.code != Some(0) && ran.stderr.contains("plane.bind_failed") {
            continue;
        }
        return (ports, ran);
    }
    panic!("`toolplane up` found no free ports in four tries");
}

/// [`run_in`] with extra environment variables.
pub fn run_in_with(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let child = command(cwd)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(120))
}

fn wait_output(child: Child, limit: Duration) -> Ran {
    let pid = child.id();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Ran::from(out.unwrap()),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("toolplane did not finish within {limit:?}");
        }
    }
}

/// Sends SIGINT, as Ctrl-C does.
pub fn interrupt(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// `toolplane up` running as a child process on free ports, with its own data directory (also its
/// working directory). Killed on drop if a test fails before stopping it.
pub struct Up {
    pub child: Option<Child>,
    pub ports: Ports,
    pub dir: tempfile::TempDir,
    /// Every stdout line so far (read by a thread).
    lines: Receiver<String>,
    pub seen: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Up {
    /// Starts `toolplane up <extra…>` and waits until it prints that it is up.
    pub fn start(extra: &[&str]) -> Up {
        // Free ports are picked, released and then bound by the plane: another test may take one
        // in between. Such a start fails with `plane.bind_failed` and is retried on new ports.
        for _ in 0..4 {
            let mut up = Up::spawn(extra);
            if up
                .try_wait_for_line("toolplane is up", Duration::from_secs(60))
                .is_some()
            {
                return up;
            }
            let (_, stdout, stderr) = up.interrupt();
            assert!(
                stderr.contains("plane.bind_failed"),
                "`toolplane up` did not start:\nstdout:\n{stdout}\nstderr:\n{stderr}"
            );
        }
        panic!("`toolplane up` found no free ports in four tries");
    }

    fn spawn(extra: &[&str]) -> Up {
        let dir = tempfile::tempdir().unwrap();
        let ports = Ports::free();
        let mut child = command(dir.path())
            .arg("up")
            .args(ports.up_args())
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
            s
        });
        Up {
            child: Some(child),
            ports,
            dir,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Waits until a stdout line contains `text`; returns it.
    pub fn wait_for_line(&mut self, text: &str, limit: Duration) -> String {
        match self.try_wait_for_line(text, limit) {
            Some(l) => l,
            None => panic!(
                "`toolplane up` never printed `{text}`; stdout so far:\n{}",
                self.seen.join("\n")
            ),
        }
    }

    /// Waits until a stdout line contains `text`; `None` when the process ended or `limit` passed.
    pub fn try_wait_for_line(&mut self, text: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
            return Some(l.clone());
        }
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(text) {
                        return Some(l);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        None
    }

    /// Runs a client command against this plane (address flags first, so that a command after
    /// `--` stays last).
    pub fn cli(&self, args: &[&str]) -> Ran {
        self.cli_with(args, &[])
    }

    /// [`Up::cli`] with extra environment variables.
    pub fn cli_with(&self, args: &[&str], env: &[(&str, &str)]) -> Ran {
        let mut all = self.ports.client_args();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run_in_with(self.dir.path(), &refs, env)
    }

    /// Ctrl-C, then waits for the process to end; returns its status, all of stdout and stderr.
    pub fn interrupt(mut self) -> (ExitStatus, String, String) {
        let mut child = self.child.take().unwrap();
        interrupt(child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "`toolplane up` did not stop within 30 s of Ctrl-C"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        (status, self.seen.join("\n"), stderr)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes `text` to `name` in `dir`; returns the path as a string.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}
