//! The admin and user commands against a running `toolplane up`, each its own process, as a user
//! or a script runs them: profiles from files, tool listings in the JSON shape scripts rely on,
//! MCP servers added, permitted, paused, resumed and removed, runs started from a script file and
//! from an OpenAI-compatible endpoint, followed, inspected, cancelled, and their timelines; and
//! bad input (malformed files, a script that ends early, unreachable services) as one clear line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_support;

use cli_support::*;
use serde_json::{Value, json};

fn ids(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

fn mcp_tools(tools: &Value, server: &str) -> Vec<Value> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["mcp"]["serverDisplayName"] == server)
        .cloned()
        .collect()
}

#[test]
fn profiles_tools_and_mcp_servers_are_administered_from_the_command_line() {
    let up = Up::start(&[]);
    let dir = up.dir.path().to_path_buf();

    // Profiles from files.
    let writer = write(&dir, "writer.json", &json!({"id": "writer", "name": "Writer", "tools": {"allow": ["builtin:workspace.*", "mcp:counter/*"]}}).to_string());
    let put = up.cli(&["profile", "put", &writer]).ok();
    assert!(
        put.stdout.contains("profile `writer` stored, version 1"),
        "{}",
        put.stdout
    );
    assert!(
        put.stderr.contains("profile.selector_matches_nothing"),
        "the MCP selector matches nothing yet: {}",
        put.stderr
    );
    let got = up.cli(&["profile", "get", "writer", "--json"]).ok().json();
    assert_eq!(got["version"], 1);
    assert_eq!(got["profile"]["tools"]["allow"][1], "mcp:counter/*");
    let doc = up.cli(&["profile", "get", "writer"]).ok();
    assert_eq!(
        serde_json::from_str::<Value>(&doc.stdout).unwrap()["id"],
        "writer",
        "plain `get` prints the document alone"
    );
    let listed = up.cli(&["profile", "ls", "--json"]).ok().json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["profileId"] == "writer"),
        "{listed}"
    );
    assert!(up.cli(&["profile", "ls"]).ok().stdout.contains("writer  1"));

    let malformed = write(
        &dir,
        "malformed.json",
        "{\"id\": \"x\", \"tools\": {\"allow\": [",
    );
    up.cli(&["profile", "put", &malformed])
        .one_line_error(2, "cli.invalid_input: the profile file");
    let unknown = write(
        &dir,
        "unknown.json",
        "{\"id\": \"x\", \"tols\": {\"allow\": []}}",
    );
    let l = up
        .cli(&["profile", "put", &unknown])
        .one_line_error(2, "profile.invalid")
        .to_owned();
    assert!(l.contains("tols"), "the catalog names the bad field: {l}");
    up.cli(&["profile", "get", "nope"])
        .one_line_error(2, "profile.not_found");

    // Tool listings, in the shape scripts rely on: usable tools only unless --all.
    let tools = up.cli(&["tools", "ls", "--json"]).ok().json();
    for t in tools.as_array().unwrap() {
        for key in ["id", "source", "category", "usable"] {
            assert!(t.get(key).is_some(), "{key} missing in {t}");
        }
        assert_eq!(t["usable"], true, "{t}");
    }
    let read = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "builtin:workspace.read_file")
        .unwrap();
    assert_eq!(
        (read["source"].as_str(), read["category"].as_str()),
        (Some("builtin"), Some("exploration"))
    );
    let text = up.cli(&["tools", "ls"]).ok().stdout;
    assert!(
        text.starts_with("ID ")
            && text.contains("builtin:workspace.write_file")
            && text.contains("action"),
        "{text}"
    );
    let described = up
        .cli(&["tools", "describe", "builtin:workspace.write_file"])
        .ok()
        .stdout;
    assert!(
        described.starts_with("builtin:workspace.write_file — Write a workspace file")
            && described.contains("- path (string, required)"),
        "{described}"
    );
    up.cli(&["tools", "describe", "builtin:nope"])
        .one_line_error(2, "catalog.tool_not_found");

    // An MCP server over stdio (this binary's demo server): active and discovered, but every tool
    // stays off until allowed, and the command says so.
    let bin = bin().to_string_lossy().into_owned();
    let added = up
        .cli(&[
            "mcp",
            "add",
            "counter",
            "--stdio",
            "--",
            &bin,
            "demo-mcp-server",
        ])
        .ok();
    assert!(
        added.stdout.contains("added MCP server `counter`")
            && added
                .stdout
                .contains("active, connected, 2 tools discovered: word_count, title_case"),
        "{}",
        added.stdout
    );
    assert!(
        added.stdout.contains("permission: off for every tool")
            && added.stdout.contains("toolplane mcp permit counter --all"),
        "{}",
        added.stdout
    );
    let usable = up.cli(&["tools", "ls", "--json"]).ok().json();
    assert!(
        mcp_tools(&usable, "counter").is_empty(),
        "off tools are not listed as usable: {usable}"
    );
    let all = up
        .cli(&["tools", "ls", "--all", "--source", "mcp", "--json"])
        .ok()
        .json();
    let off = mcp_tools(&all, "counter");
    assert_eq!(off.len(), 2, "{all}");
    assert!(
        off.iter()
            .all(|t| t["usable"] == false && t["reason"] == "mcp.permission_off"),
        "{off:?}"
    );
    let servers = up.cli(&["mcp", "ls", "--json"]).ok().json();
    let counter = servers
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["displayName"] == "counter")
        .unwrap()
        .clone();
    assert_eq!(
        (counter["state"].as_str(), counter["connection"].as_str()),
        (Some("active"), Some("connected"))
    );
    up.cli(&[
        "mcp",
        "add",
        "counter",
        "--stdio",
        "--",
        &bin,
        "demo-mcp-server",
    ])
    .one_line_error(2, "mcp.duplicate_display_name");

    up.cli(&["mcp", "permit", "counter", "--all"]).ok();
    let now = up.cli(&["tools", "ls", "--json"]).ok().json();
    assert_eq!(
        mcp_tools(&now, "counter").len(),
        2,
        "allowed tools are usable at once: {now}"
    );
    let per_tool = up.cli(&["mcp", "ls", "counter"]).ok().stdout;
    assert!(
        per_tool.contains("word_count  allow       yes"),
        "{per_tool}"
    );

    up.cli(&["mcp", "pause", "counter"]).ok();
    let paused = up.cli(&["tools", "ls", "--all", "--json"]).ok().json();
    assert!(
        mcp_tools(&paused, "counter")
            .iter()
            .all(|t| t["usable"] == false && t["reason"] == "mcp.server_paused"),
        "{paused}"
    );
    let resumed = up.cli(&["mcp", "resume", "counter"]).ok();
    assert!(
        resumed.stdout.contains("active, connected, 2 tools"),
        "{}",
        resumed.stdout
    );
    assert_eq!(
        mcp_tools(&up.cli(&["tools", "ls", "--json"]).ok().json(), "counter").len(),
        2,
        "resume undoes pause"
    );
    let refreshed = up.cli(&["mcp", "refresh", "counter"]).ok();
    assert!(
        refreshed
            .stdout
            .contains("refreshed `counter`: 2 tools (0 added, 0 removed), connected"),
        "{}",
        refreshed.stdout
    );

    // --allow: usable from the start; --paused: registered, not connected.
    let allowed = up
        .cli(&[
            "mcp",
            "add",
            "counter2",
            "--allow",
            "--stdio",
            "--",
            &bin,
            "demo-mcp-server",
        ])
        .ok();
    assert!(
        allowed.stdout.contains("permission: allow for all 2 tools"),
        "{}",
        allowed.stdout
    );
    assert_eq!(
        mcp_tools(&up.cli(&["tools", "ls", "--json"]).ok().json(), "counter2").len(),
        2
    );
    let paused = up
        .cli(&[
            "mcp",
            "add",
            "later",
            "--paused",
            "--stdio",
            "--",
            &bin,
            "demo-mcp-server",
        ])
        .ok();
    assert!(
        paused.stdout.contains("`later`") && paused.stdout.contains("paused"),
        "{}",
        paused.stdout
    );

    // A server that cannot start: registered, reported as one clear line and a failure.
    let broken = up.cli(&[
        "mcp",
        "add",
        "broken",
        "--stdio",
        "--",
        "/nonexistent/mcp-server",
    ]);
    let l = broken.one_line_error(1, "mcp.connection_failed").to_owned();
    assert!(
        l.contains("/nonexistent/mcp-server") && l.contains("toolplane mcp refresh broken"),
        "{l}"
    );

    for name in ["counter2", "later", "broken"] {
        up.cli(&["mcp", "rm", name]).ok();
    }
    up.cli(&["mcp", "pause", "nope"])
        .one_line_error(2, "cli.not_found");
    up.cli(&["mcp", "add", "x", "--stdio"])
        .one_line_error(2, "cli.invalid_input");
    up.cli(&["mcp", "add", "x"])
        .one_line_error(2, "cli.invalid_input");
    let names: Vec<Value> = up
        .cli(&["mcp", "ls", "--json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["displayName"].clone())
        .collect();
    assert_eq!(names, [json!("counter")]);

    // A scripted run through the CLI, using the MCP tool by its alias.
    let script = write(
        &dir,
        "script.json",
        &json!({"turns": [
            {"tool_calls": [{"function": {"name": "workspace_write_file", "arguments": {"path": "output/main.md", "content": "one two three\n"}}}]},
            {"tool_calls": [{"function": {"name": "mcp__counter__word_count", "arguments": {"text": "one two three"}}}]},
            {"tool_calls": [{"function": {"name": "workspace_read_file", "arguments": {"path": "output/missing.md"}}}]},
            {"tool_calls": [{"function": {"name": "workspace_commit", "arguments": {}}}]},
            {"tool_calls": [{"function": {"name": "workspace_finish", "arguments": {}}}]}
        ]})
        .to_string(),
    );
    let started = up
        .cli(&[
            "run",
            "start",
            "--profile",
            "writer",
            "--script",
            &script,
            "--chat",
            "c1",
        ])
        .ok();
    let out = &started.stdout;
    assert!(
        out.lines().next().unwrap().starts_with("run ") && out.contains("scripted model"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("mcp__counter__word_count") && l.contains(" ok ")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.contains("workspace_read_file")
            && l.contains("error")
            && l.contains("workspace.file_not_found")),
        "{out}"
    );
    let run_id = out
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();
    assert!(out.contains(&format!("toolplane events {run_id}")), "{out}");

    // Its timeline afterwards: every call with alias, duration, outcome, error code, audit paths.
    let events = up.cli(&["events", &run_id]).ok().stdout;
    let lines: Vec<&str> = events.lines().collect();
    let call = lines
        .iter()
        .position(|l| l.contains("workspace_read_file"))
        .unwrap();
    assert!(
        lines[call].contains("error")
            && lines[call].contains(" ms")
            && lines[call].contains("known")
            && lines[call].contains("workspace.file_not_found"),
        "{events}"
    );
    assert!(
        lines[call + 1].trim_start().starts_with("args tool-args/")
            && lines[call + 1].contains("result tool-results/"),
        "{events}"
    );
    // The audit objects it names, and the run's files, read back with `run cat`.
    let result_path = lines[call + 1]
        .split_whitespace()
        .skip_while(|w| *w != "result")
        .nth(1)
        .unwrap();
    let result = up.cli(&["run", "cat", &run_id, result_path]).ok();
    let result: Value = serde_json::from_str(&result.stdout).unwrap();
    assert_eq!(
        result["result"]["errorCode"], "workspace.file_not_found",
        "{result}"
    );
    assert_eq!(
        up.cli(&["run", "cat", &run_id, "output/main.md"])
            .ok()
            .stdout,
        "one two three\n"
    );
    let file = up
        .cli(&["run", "cat", &run_id, "output/main.md", "--json"])
        .ok()
        .json();
    assert_eq!(
        (file["content"].as_str(), file["size"].as_u64()),
        (Some("one two three\n"), Some(14))
    );
    up.cli(&["run", "cat", &run_id, "output/missing.md"])
        .one_line_error(2, "workspace.not_found");

    let as_json = up.cli(&["events", &run_id, "--json"]).ok().json();
    let kinds: Vec<&str> = as_json
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_created"));
    assert_eq!(kinds.last(), Some(&"run_completed"));
    assert!(
        as_json
            .as_array()
            .unwrap()
            .windows(2)
            .all(|w| w[1]["seq"].as_u64().unwrap() == w[0]["seq"].as_u64().unwrap() + 1)
    );
    let run = up.cli(&["run", "get", &run_id, "--json"]).ok().json();
    assert_eq!(
        (run["status"].as_str(), run["committed"].as_bool()),
        (Some("completed"), Some(true))
    );
    assert!(up.cli(&["run", "ls"]).ok().stdout.contains(&run_id));
    let watched = up.cli(&["run", "watch", &run_id]).ok();
    assert!(
        watched.stdout.contains("run       completed"),
        "watching an ended run replays it: {}",
        watched.stdout
    );

    // A script that ends before the run finishes: the timeline, then one line and exit 1.
    let short = write(&dir, "short.json", &json!({"turns": [{"tool_calls": [{"function": {"name": "workspace_list_files", "arguments": {}}}]}]}).to_string());
    let ran = up.cli(&["run", "start", "--profile", "writer", "--script", &short]);
    let l = ran.one_line_error(1, "cli.run_failed").to_owned();
    assert!(
        l.contains("ended failed: model.call_failed: the script ended after 1 turns"),
        "{l}"
    );
    assert!(
        ran.stdout.contains("workspace_list_files"),
        "the timeline is shown first: {}",
        ran.stdout
    );
    // A script file that is not a script, refused before anything is sent.
    let bad = write(&dir, "bad.json", "{\"steps\": []}");
    up.cli(&["run", "start", "--script", &bad])
        .one_line_error(2, "cli.invalid_input: the script file");
    // A profile that does not exist: refused before a run is created, and the line says why.
    let ghost = up.cli(&["run", "start", "--profile", "ghost", "--script", &script]);
    assert!(
        ghost
            .one_line_error(2, "runtime.not_found")
            .contains("no profile `ghost`"),
        "{}",
        ghost.stderr
    );

    up.cli(&["mcp", "rm", "counter"]).ok();
    assert!(
        mcp_tools(
            &up.cli(&["tools", "ls", "--all", "--json"]).ok().json(),
            "counter"
        )
        .is_empty()
    );
    let all_ids = ids(&up.cli(&["tools", "ls", "--all", "--json"]).ok().json());
    assert!(
        all_ids.iter().all(|id| !id.starts_with("mcp/")),
        "{all_ids:?}"
    );

    let (status, _, stderr) = up.interrupt();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn unreachable_services_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let port = toolplane_testkit::mcp_fixture::free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    for args in [
        vec!["tools", "ls", "--catalog", &addr],
        vec!["profile", "ls", "--catalog", &addr],
        vec!["mcp", "ls", "--mcp-proxy", &addr],
        vec!["run", "get", "r1", "--runtime", &addr],
        vec!["events", "r1", "--runtime", &addr],
    ] {
        let ran = run_in(dir.path(), &args);
        let l = ran
            .one_line_error(1, "cli.unreachable: cannot reach the")
            .to_owned();
        assert!(
            l.contains(&format!("http://{addr}")) && l.to_lowercase().contains("refused"),
            "{l}"
        );
    }
    // The environment names the plane too.
    let ran = {
        let mut c = command(dir.path());
        c.args(["tools", "ls"])
            .env("TOOLPLANE_CATALOG_URL", format!("http://{addr}"));
        let o = c.output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(ran.0, Some(1));
    assert!(
        ran.1.starts_with(&format!(
            "toolplane: cli.unreachable: cannot reach the catalog at http://{addr}"
        )),
        "{}",
        ran.1
    );
    let bad = run_in(dir.path(), &["tools", "ls", "--catalog", "http://[nope"]);
    bad.one_line_error(2, "cli.invalid_address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_an_openai_compatible_endpoint_is_followed_and_cancelled() {
    use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};
    let mut slow = ScriptedReply::tool_calls(1, &[("workspace_finish", json!({}))]);
    slow.delay = Some(std::time::Duration::from_secs(30));
    let model = spawn_model_server(vec![slow]).await.unwrap();
    let base_url = model.base_url();
    let handle = tokio::task::spawn_blocking(move || {
        let up = Up::start(&[]);
        let profile = write(
            up.dir.path(),
            "p.json",
            &json!({"id": "p", "tools": {"allow": ["builtin:workspace.*"]}}).to_string(),
        );
        up.cli(&["profile", "put", &profile]).ok();
        let started = up
            .cli(&[
                "run",
                "start",
                "Write a note.",
                "--profile",
                "p",
                "--base-url",
                &base_url,
                "--model",
                "m",
                "--detach",
                "--json",
            ])
            .ok()
            .json();
        let run_id = started["runId"].as_str().unwrap().to_owned();
        assert!(
            started["status"] == "created" || started["status"] == "running",
            "{started}"
        );
        // Wait until the runtime is inside the model call, then cancel.
        for _ in 0..100 {
            let events = up.cli(&["events", &run_id, "--all"]).ok().stdout;
            if events.contains("model_call_attempt_started") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let cancelled = up.cli(&["run", "cancel", &run_id]).ok();
        assert!(cancelled.stdout.contains("cancel"), "{}", cancelled.stdout);
        let watched = up.cli(&["run", "watch", &run_id]);
        let l = watched.one_line_error(1, "cli.run_failed").to_owned();
        assert!(l.contains("ended cancelled"), "{l}");
        assert!(
            watched.stdout.contains("cancel requested"),
            "{}",
            watched.stdout
        );
        up.interrupt()
    });
    let (status, _, stderr) = handle.await.unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["model"], "m");
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "workspace_finish")
    );
}

#[test]
fn tokens_are_created_listed_and_revoked_from_the_command_line() {
    let up = Up::start(&[]);
    let created = up
        .cli(&[
            "token",
            "create",
            "--cell",
            "team-a",
            "--role",
            "agent",
            "--name",
            "ci",
            "--expires",
            "30d",
        ])
        .ok();
    let secret = created.stdout.trim().to_owned();
    assert!(secret.starts_with("tp_") && secret.len() == 67, "{secret}");
    assert!(
        created.stderr.contains("shown this once"),
        "{}",
        created.stderr
    );

    let listed = up.cli(&["token", "ls", "--json"]).ok();
    assert!(!listed.stdout.contains(&secret), "a secret is never listed");
    let tokens = listed.json();
    let token = &tokens.as_array().unwrap()[0];
    assert_eq!(
        (
            &token["name"],
            &token["cellId"],
            &token["role"],
            &token["revoked"]
        ),
        (
            &json!("ci"),
            &json!("team-a"),
            &json!("agent"),
            &json!(false)
        )
    );
    assert!(token["expiresAtUnixMs"].as_u64().unwrap() > 0);

    let id = token["tokenId"].as_str().unwrap();
    let revoked = up.cli(&["token", "revoke", id]).ok();
    assert!(revoked.stdout.contains("revoked"), "{}", revoked.stdout);
    let tokens = up.cli(&["token", "ls", "--json"]).ok().json();
    assert_eq!(tokens[0]["revoked"], json!(true));

    let bad = up.cli(&["token", "create", "--role", "root"]);
    assert_ne!(bad.code, Some(0));
    assert!(bad.stderr.contains("auth.invalid_role"), "{}", bad.stderr);
}
