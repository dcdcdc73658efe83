//! The plane as an MCP server, used by MCP clients the project did not write: the official Python
//! SDK (PyPI `mcp`, in `target/mcp-venv`) against `toolplane up`'s `/mcp` and through `toolplane
//! mcp serve --stdio`, and the official TypeScript SDK (npm `@modelcontextprotocol/sdk`, in
//! `tests/mcp-servers/node_modules`) against `/mcp`. Each session lists and calls a builtin and a tool of a public MCP server
//! registered in the plane (`server-everything`), does not see a denied tool and gets an error
//! calling it by name, runs a tool out of its budget, and reads an externalised large result back
//! through `resources/read`; the calls are in the run's journal under their aliases with their
//! audit objects, and ending the session ends the invocation and the run it created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_support;

use std::io::Write;
use std::process::{Command, Stdio};

use cli_support::*;
use serde_json::{Value, json};
use toolplane_testkit::mcp_fixture::{mcp_venv, repo_root, server_everything_entry};

const PROFILE: &str = r#"{
  "id": "mcp-face",
  "tools": {
    "allow": ["builtin:dice.roll", "builtin:workspace.*", "mcp:everything/echo"],
    "deny": ["builtin:workspace.write_file"],
    "overrides": {"builtin:dice.roll": {"maxCalls": 2}},
    "mcpResultInlineCharLimit": 1000
  }
}"#;

/// `toolplane up` with the test profile and `server-everything` registered, its `echo` allowed.
fn plane() -> Up {
    let profiles = tempfile::tempdir().unwrap();
    write(profiles.path(), "mcp-face.json", PROFILE);
    let up = Up::start(&["--profiles-dir", &profiles.path().to_string_lossy()]);
    let everything = server_everything_entry().unwrap();
    up.cli(&[
        "mcp",
        "add",
        "everything",
        "--stdio",
        "--",
        "node",
        &everything.to_string_lossy(),
        "stdio",
    ])
    .ok();
    up.cli(&["mcp", "permit", "everything", "echo"]).ok();
    up
}

/// What the client does: the calls, in order.
fn plan() -> Value {
    json!({"calls": [
        {"name": "dice_roll", "arguments": {"notation": "2d6"}},
        {"name": "mcp__everything__echo", "arguments": {"message": "hello from MCP"}},
        {"name": "workspace_write_file", "arguments": {"path": "a.md", "content": "x"}},
        {"name": "dice_roll", "arguments": {"notation": "d6"}},
        {"name": "dice_roll", "arguments": {"notation": "d6"}},
        {"name": "mcp__everything__echo", "arguments": {"message": "long ".repeat(600)}},
    ], "read_links": true})
}

/// Runs the Python SDK client with `args`; its JSON report.
fn python_client(args: &[&str]) -> Value {
    let python = mcp_venv().join("bin/python");
    let script = repo_root().join("tests/mcp-clients/python_client.py");
    client(Command::new(python).arg(script).args(args))
}

/// Runs the TypeScript SDK client with `args`; its JSON report.
fn typescript_client(args: &[&str]) -> Value {
    let script = repo_root().join("tests/mcp-servers/mcp_face_client.mjs");
    client(Command::new("node").arg(script).args(args))
}

/// Runs a client command with the test's plan on stdin; its JSON report.
fn client(command: &mut Command) -> Value {
    client_with(command, &plan())
}

/// Runs a client command with `plan` on stdin; its JSON report.
fn client_with(command: &mut Command, plan: &Value) -> Value {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plan.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Checks what a user of the client sees; returns the run the session made.
fn check_report(report: &Value) -> String {
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
    let tools = report["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"dice_roll"), "{names:?}");
    assert!(names.contains(&"mcp__everything__echo"), "{names:?}");
    assert!(names.contains(&"workspace_read_file"), "{names:?}");
    assert!(!names.contains(&"workspace_write_file"), "{names:?}");
    let dice = tools.iter().find(|t| t["name"] == "dice_roll").unwrap();
    assert_eq!(dice["title"], "Roll dice");
    assert_eq!(dice["inputSchema"]["required"], json!(["notation"]));

    let calls = report["calls"].as_array().unwrap();
    let roll = &calls[0];
    assert_eq!(roll["isError"], false, "{roll}");
    assert_eq!(roll["structuredContent"]["notation"], "2d6");
    assert!(roll["texts"][0].as_str().unwrap().starts_with("2d6: ["));
    let echo = &calls[1];
    assert_eq!(echo["isError"], false, "{echo}");
    assert_eq!(echo["texts"][0], "Echo: hello from MCP");
    let denied = &calls[2];
    assert_eq!(denied["error"]["code"], -32602, "{denied}");
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .contains("workspace_write_file")
    );
    assert_eq!(calls[3]["isError"], false, "{}", calls[3]);
    let over = &calls[4];
    assert_eq!(over["isError"], true, "{over}");
    assert_eq!(
        over["_meta"]["dev.toolplane/errorCode"],
        "agent.tool_budget_exhausted"
    );
    assert_eq!(over["_meta"]["dev.toolplane/outcome"], "not_sent");
    let large = &calls[5];
    assert_eq!(large["isError"], false, "{large}");
    assert!(
        large["texts"][0]
            .as_str()
            .unwrap()
            .contains("characters long")
    );
    let links = large["links"].as_array().unwrap();
    assert_eq!(links.len(), 1, "{large}");
    let whole = large["linkTexts"][0].as_str().unwrap();
    assert!(whole.contains("Echo: long long"), "{whole}");
    assert!(whole.len() > 3000, "{}", whole.len());
    roll["_meta"]["dev.toolplane/runId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The run's journal shows the calls under their aliases with their audit objects, and the
/// session's end closed the invocation and completed the run.
fn check_journal(up: &Up, run: &str, report: &Value) {
    let mut events = Value::Null;
    for _ in 0..100 {
        events = up.cli(&["--json", "events", run, "--all"]).ok().json();
        if events.to_string().contains("run_completed") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let text = events.to_string();
    assert!(text.contains("agent_invocation_closed"), "{text}");
    assert!(text.contains("run_completed"), "{text}");
    for alias in ["dice_roll", "mcp__everything__echo"] {
        assert!(
            text.contains(&format!("\"alias\":\"{alias}\"")),
            "{alias}: {text}"
        );
    }
    let echo = &report["calls"][1]["_meta"];
    let args = echo["dev.toolplane/argsPath"].as_str().unwrap();
    assert!(text.contains(args), "{args}");
    let stored = up.cli(&["run", "cat", run, args]).ok();
    assert!(
        stored.stdout.contains("hello from MCP"),
        "{}",
        stored.stdout
    );
}

#[test]
fn the_python_sdk_uses_the_plane_over_streamable_http() {
    let up = plane();
    let url = format!(
        "http://127.0.0.1:{}/mcp?profile=mcp-face",
        up.ports.metrics[0]
    );
    let report = python_client(&["http", &url]);
    let run = check_report(&report);
    check_journal(&up, &run, &report);
}

#[test]
fn the_python_sdk_uses_the_plane_through_the_stdio_bridge() {
    let up = plane();
    let url = format!("http://127.0.0.1:{}/mcp", up.ports.metrics[0]);
    let bin = bin();
    let report = python_client(&[
        "stdio",
        &bin.to_string_lossy(),
        "mcp",
        "serve",
        "--stdio",
        "--profile",
        "mcp-face",
        "--url",
        &url,
    ]);
    let run = check_report(&report);
    check_journal(&up, &run, &report);
}

#[test]
fn the_typescript_sdk_uses_the_plane_over_streamable_http() {
    let up = plane();
    let url = format!(
        "http://127.0.0.1:{}/mcp?profile=mcp-face",
        up.ports.metrics[0]
    );
    let report = typescript_client(&["http", &url]);
    let run = check_report(&report);
    check_journal(&up, &run, &report);
}

const SEARCHING: &str = r#"{
  "id": "searching",
  "tools": {
    "allow": ["builtin:dice.roll", "builtin:workspace.*"],
    "search": {"core": ["builtin:dice.roll"]}
  }
}"#;

/// With tool search, a search that finds tools grows the advertised set: the client is told with
/// `notifications/tools/list_changed` and its next `tools/list` shows what was found.
#[test]
fn a_search_through_the_face_tells_the_client_its_tool_list_changed() {
    let profiles = tempfile::tempdir().unwrap();
    write(profiles.path(), "searching.json", SEARCHING);
    let up = Up::start(&["--profiles-dir", &profiles.path().to_string_lossy()]);
    let url = format!(
        "http://127.0.0.1:{}/mcp?profile=searching",
        up.ports.metrics[0]
    );
    let python = mcp_venv().join("bin/python");
    let script = repo_root().join("tests/mcp-clients/python_client.py");
    let plan = json!({"calls": [
        {"name": "dice_roll", "arguments": {"notation": "d6"}},
        {"name": "tools_search", "arguments": {"query": "read the lines of a file"}},
    ], "relist": true});
    let report = client_with(Command::new(python).arg(script).args(["http", &url]), &plan);
    let names = |key: &str| -> Vec<String> {
        report[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let before = names("tools");
    assert!(
        !before.contains(&"workspace_read_file".to_owned()),
        "{before:?}"
    );
    let after = names("toolsAfter");
    assert!(
        after.contains(&"workspace_read_file".to_owned()),
        "{after:?}"
    );
    let notifications = report["notifications"].as_array().unwrap();
    let changed = notifications
        .iter()
        .filter(|n| *n == "notifications/tools/list_changed")
        .count();
    // The plain call changed nothing; the search did, once.
    assert_eq!(changed, 1, "{report}");
}

const SLOW: &str = r#"{
  "id": "slow",
  "tools": {"allow": ["builtin:dice.roll", "mcp:everything/trigger-long-running-operation"]}
}"#;

/// `toolplane mcp serve --stdio` driven with raw JSON-RPC lines on its stdin and stdout (the
/// SDK clients await each call before the next and cannot send a cancel of their own choosing):
/// each line it writes arrives on the channel.
struct Bridge {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
    /// Every message read so far.
    seen: Vec<Value>,
}

impl Bridge {
    fn start(up: &Up, profile: &str) -> Bridge {
        let url = format!("http://127.0.0.1:{}/mcp", up.ports.metrics[0]);
        let mut child = Command::new(bin())
            .args([
                "mcp",
                "serve",
                "--stdio",
                "--profile",
                profile,
                "--url",
                &url,
            ])
            .current_dir(up.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut bridge = Bridge {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        bridge.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-lines", "version": "1"},
            }}),
        );
        bridge.answer(1, std::time::Duration::from_secs(30));
        bridge.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        bridge
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The answer to request `id`, waiting at most `within`.
    fn answer(&mut self, id: u64, within: std::time::Duration) -> Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let message = self.lines.recv_timeout(left).unwrap_or_else(|e| {
                panic!("no answer to {id} within {within:?} ({e}): {:?}", self.seen)
            });
            self.seen.push(message.clone());
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Every message that arrives within `wait`.
    fn drain(&mut self, wait: std::time::Duration) {
        while let Ok(message) = self.lines.recv_timeout(wait) {
            self.seen.push(message);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Through the stdio bridge, with raw JSON-RPC lines: while a slow MCP call is in flight the
/// bridge keeps answering (a `ping` comes back first); `notifications/cancelled` for the slow call
/// cancels it in the plane — the next call is not held behind it for the rest of its 30 s — and the
/// client never gets a response for it; the run's journal has the call as cancelled, outcome
/// unknown.
#[test]
fn the_stdio_bridge_answers_while_a_call_runs_and_forwards_its_cancel() {
    let profiles = tempfile::tempdir().unwrap();
    write(profiles.path(), "slow.json", SLOW);
    let up = Up::start(&["--profiles-dir", &profiles.path().to_string_lossy()]);
    let everything = server_everything_entry().unwrap();
    up.cli(&[
        "mcp",
        "add",
        "everything",
        "--stdio",
        "--",
        "node",
        &everything.to_string_lossy(),
        "stdio",
    ])
    .ok();
    up.cli(&[
        "mcp",
        "permit",
        "everything",
        "trigger-long-running-operation",
    ])
    .ok();
    let mut bridge = Bridge::start(&up, "slow");
    bridge.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = bridge.answer(2, std::time::Duration::from_secs(10));
    let slow = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .find(|n| n.contains("long"))
        .unwrap_or_else(|| panic!("{listed}"));

    bridge.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": slow, "arguments": {"duration": 30, "steps": 30}}}));
    std::thread::sleep(std::time::Duration::from_secs(2));
    bridge.send(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    bridge.answer(4, std::time::Duration::from_secs(5));

    let cancelled = std::time::Instant::now();
    bridge.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 3, "reason": "the user changed their mind"}}),
    );
    bridge.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "dice_roll", "arguments": {"notation": "d6"}}}));
    let dice = bridge.answer(5, std::time::Duration::from_secs(20));
    assert!(
        cancelled.elapsed() < std::time::Duration::from_secs(15),
        "the next call waited {:?} for the cancelled one",
        cancelled.elapsed()
    );
    assert_eq!(dice["result"]["isError"], false, "{dice}");
    bridge.drain(std::time::Duration::from_secs(1));
    assert!(
        bridge.seen.iter().all(|m| m["id"] != 3),
        "a response for the cancelled call: {:?}",
        bridge.seen
    );

    let run = dice["result"]["_meta"]["dev.toolplane/runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = up
        .cli(&["--json", "events", run.as_str(), "--all"])
        .ok()
        .json();
    let failed: Vec<&Value> = events
        .as_array()
        .unwrap_or_else(|| panic!("{events}"))
        .iter()
        .filter(|e| e["type"] == "tool_call_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{events}");
    let payload = &failed[0]["payload"];
    assert_eq!(payload["alias"], slow.as_str(), "{payload}");
    assert_eq!(payload["errorCode"], "tool.cancelled", "{payload}");
    assert_eq!(payload["outcome"], "unknown", "{payload}");
}
