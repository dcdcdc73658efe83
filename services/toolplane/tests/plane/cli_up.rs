//! `toolplane up` as a user runs it: the demo end to end (its scripted agent calling the bundled
//! MCP server through the mcp-proxy, the timeline printed as it happens, `--once` exiting with the
//! run's status), serving until Ctrl-C and stopping cleanly, and a port in use refused with one
//! clear line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_support;

use cli_support::*;

fn tool_line<'a>(stdout: &'a str, alias: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.contains(" tool ") && l.contains(alias))
        .unwrap_or_else(|| panic!("no tool line for {alias} in:\n{stdout}"))
}

#[test]
fn up_demo_once_runs_the_scripted_agent_shows_its_timeline_and_exits_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let (ports, ran) = run_up_in(dir.path(), &["--demo", "--once"]);
    let ran = ran.ok();
    let out = &ran.stdout;

    assert!(
        out.contains(&format!("runtime     http://127.0.0.1:{}", ports.runtime)),
        "the endpoints are printed:\n{out}"
    );
    assert!(
        out.contains(&format!("mcp-proxy   http://127.0.0.1:{}", ports.mcp_proxy)),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "console     http://127.0.0.1:{}/console",
            ports.metrics[0]
        )),
        "the console's address is printed:\n{out}"
    );
    // Every step of the agent, in order, each with its alias, outcome and duration.
    let aliases = [
        "workspace_list_files",
        "workspace_write_file",
        "workspace_apply_patch",
        "workspace_search_files",
        "mcp__demo__word_count",
        "workspace_commit",
        "workspace_finish",
    ];
    let mut last = 0;
    for alias in aliases {
        let l = tool_line(out, alias);
        assert!(
            l.contains(" ok ") && l.contains(" ms") && l.contains("known"),
            "{l}"
        );
        let at = out.find(l).unwrap();
        assert!(at > last, "{alias} out of order:\n{out}");
        last = at;
    }
    assert!(out.contains("run       completed"), "{out}");
    // The answer as committed, patched by the agent.
    assert!(
        out.contains("This note was written by a scripted demo agent"),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with("stopped"),
        "it stops after the run with --once:\n{out}"
    );
    // A clean run and stop warn about nothing (the demo's MCP server, closed by the stop, is not
    // reported as lost).
    assert!(!ran.stderr.contains("WARN"), "{}", ran.stderr);
    // The data directory defaults to ./.toolplane and holds each service's storage.
    for service in ["runtime", "catalog", "workspace", "mcp-proxy"] {
        assert!(
            dir.path().join(".toolplane").join(service).is_dir(),
            "{service} storage"
        );
    }

    // A second demo on the same data directory re-uses the registration and runs again.
    let (_, again) = run_up_in(dir.path(), &["--demo", "--once"]);
    let again = again.ok();
    assert_eq!(
        again.stdout.matches("run       completed").count(),
        1,
        "{}",
        again.stdout
    );
    assert!(tool_line(&again.stdout, "mcp__demo__word_count").contains(" ok "));
    assert!(!again.stderr.contains("WARN"), "{}", again.stderr);
}

#[test]
fn up_serves_until_ctrl_c_and_then_stops_cleanly() {
    let up = Up::start(&[]);
    let tools = up.cli(&["tools", "ls", "--json"]).ok().json();
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == "builtin:workspace.read_file"),
        "{tools}"
    );
    // Every service answers on its own port.
    for port in [
        up.ports.runtime,
        up.ports.catalog,
        up.ports.catalog_http,
        up.ports.workspace,
        up.ports.mcp_proxy,
    ] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
            "port {port}"
        );
    }
    let ports = up.ports;
    let (status, stdout, stderr) = up.interrupt();
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("stopping…") && stdout.trim_end().ends_with("stopped"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The ports are free again.
    for port in [
        ports.runtime,
        ports.catalog,
        ports.workspace,
        ports.mcp_proxy,
    ] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} still taken"
        );
    }
}

#[test]
fn a_ctrl_c_the_moment_up_prints_its_banner_still_stops_cleanly() {
    // The signal handlers are installed before the banner: a Ctrl-C right after it is a clean
    // stop, never the process killed by the signal's default action. The signal is sent within
    // microseconds of reading the banner, several times, since that window is short.
    use std::io::{BufRead, BufReader, Read};
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = command(dir.path())
            .arg("up")
            .args(["--runtime-port", "0", "--catalog-port", "0"])
            .args(["--catalog-http-port", "0", "--workspace-port", "0"])
            .args(["--mcp-proxy-port", "0", "--runtime-http-port", "0"])
            .args(["--workspace-http-port", "0", "--mcp-proxy-http-port", "0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // stderr is drained all along, so logging never blocks the child; it is shown on failure.
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "`toolplane up` ended before its banner:\n{seen}"
            );
            seen.push_str(&line);
            if line.starts_with("toolplane is up") {
                break;
            }
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`toolplane up` did not stop within 30 s of Ctrl-C:\n{seen}");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        stdout.read_to_string(&mut seen).unwrap();
        let stderr = stderr.join().unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "{status:?}\nstdout:\n{seen}\nstderr:\n{stderr}"
        );
        assert!(seen.trim_end().ends_with("stopped"), "{seen}");
    }
}

#[test]
fn a_port_in_use_is_one_clear_line_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut ports = Ports::free();
    ports.workspace = port;
    let mut args = vec!["up".to_owned()];
    args.extend(ports.up_args());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = run_in(dir.path(), &refs);
    let line = ran.one_line_error(1, "plane.bind_failed");
    assert!(
        line.contains(&format!("127.0.0.1:{port}")) && line.contains("workspace"),
        "{line}"
    );
    assert!(
        ran.stdout.is_empty(),
        "nothing claims to be up: {}",
        ran.stdout
    );

    // `--once` without `--demo` is a usage error.
    let usage = run_in(dir.path(), &["up", "--once"]);
    assert_eq!(usage.code, Some(2), "{}", usage.stderr);
}

/// The HTTP status of an MCP `initialize` posted to `/mcp` on `port` with `host` as `Host`.
fn mcp_initialize_status(port: u16, host: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"host-check","version":"1"}}}"#;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "POST /mcp?profile=nobody HTTP/1.1\r\nHost: {host}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    // `HTTP/1.1 403`
    String::from_utf8_lossy(&head[9..12]).parse().unwrap()
}

#[test]
fn up_mcp_allowed_hosts_lets_the_mcp_face_answer_those_hosts_only() {
    let up = Up::start(&["--mcp-allowed-hosts", "tools.example.com, 10.0.0.5:7411"]);
    let port = up.ports.metrics[0];
    assert_ne!(mcp_initialize_status(port, "tools.example.com"), 403);
    assert_ne!(mcp_initialize_status(port, "10.0.0.5:7411"), 403);
    assert_ne!(mcp_initialize_status(port, "localhost"), 403);
    assert_eq!(mcp_initialize_status(port, "evil.example.com"), 403);
    assert_eq!(mcp_initialize_status(port, "10.0.0.5:80"), 403);
    up.interrupt();

    // Without the flag only the loopback names are answered.
    let up = Up::start(&[]);
    let port = up.ports.metrics[0];
    assert_eq!(mcp_initialize_status(port, "tools.example.com"), 403);
    assert_ne!(mcp_initialize_status(port, "localhost"), 403);
    up.interrupt();
}
