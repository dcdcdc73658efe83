//! The workspace tools through `ToolExecutor/Execute` over a real socket: read-state rules, CAS,
//! windows, search, refs, and every recoverable error a model can cause.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_patch_with_read_state() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "inv1").await;
    let out = s
        .ok(
            "r1",
            "inv1",
            "workspace.write_file",
            json!({"path": "output/main.md", "content": "alpha\nbeta\ngamma\n"}),
        )
        .await;
    assert!(out.contains("output/main.md"), "{out}");
    assert_eq!(
        std::fs::read_to_string(s.run_dir("default", "r1").join("output/main.md")).unwrap(),
        "alpha\nbeta\ngamma\n"
    );
    // The writer knows the whole file: it may patch without reading.
    let out = s
        .ok(
            "r1",
            "inv1",
            "workspace.apply_patch",
            json!({"path": "output/main.md", "old_string": "beta", "new_string": "BETA"}),
        )
        .await;
    assert!(
        out.contains("output/main.md") && out.contains("line 2"),
        "{out}"
    );
    // Another invocation has not read it: replace and patch are refused, append is allowed.
    s.open("default", "r1", "inv2", None).await;
    assert_eq!(
        s.err(
            "r1",
            "inv2",
            "workspace.write_file",
            json!({"path": "output/main.md", "content": "x"})
        )
        .await,
        "workspace.read_required"
    );
    assert_eq!(
        s.err(
            "r1",
            "inv2",
            "workspace.apply_patch",
            json!({"path": "output/main.md", "old_string": "alpha", "new_string": "a"})
        )
        .await,
        "workspace.read_required"
    );
    s.ok(
        "r1",
        "inv2",
        "workspace.write_file",
        json!({"path": "output/main.md", "content": "delta\n", "mode": "append"}),
    )
    .await;
    // Append to an unread file grants nothing: a replace still needs a read.
    assert_eq!(
        s.err(
            "r1",
            "inv2",
            "workspace.write_file",
            json!({"path": "output/main.md", "content": "x"})
        )
        .await,
        "workspace.read_required"
    );
    // inv1's read-state is now stale.
    assert_eq!(
        s.err(
            "r1",
            "inv1",
            "workspace.write_file",
            json!({"path": "output/main.md", "content": "x"})
        )
        .await,
        "workspace.stale_file"
    );
    assert_eq!(
        s.err(
            "r1",
            "inv1",
            "workspace.apply_patch",
            json!({"path": "output/main.md", "old_string": "gamma", "new_string": "g"})
        )
        .await,
        "workspace.stale_file"
    );
    let read = s
        .call(
            "default",
            "r1",
            "inv1",
            "workspace.read_file",
            json!({"path": "output/main.md"}),
        )
        .await
        .unwrap();
    assert_eq!(read.content, "alpha\nBETA\ngamma\ndelta\n");
    assert_eq!(read.resource_refs[0].uri, "workspace:output/main.md#L1-L4");
    s.ok(
        "r1",
        "inv1",
        "workspace.write_file",
        json!({"path": "output/main.md", "content": "fresh\n"}),
    )
    .await;
    // Append after a full read at the current version keeps the full read-state.
    s.ok(
        "r1",
        "inv1",
        "workspace.write_file",
        json!({"path": "output/main.md", "content": "more\n", "mode": "append"}),
    )
    .await;
    s.ok(
        "r1",
        "inv1",
        "workspace.apply_patch",
        json!({"path": "output/main.md", "old_string": "fresh\nmore", "new_string": "done"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(s.run_dir("default", "r1").join("output/main.md")).unwrap(),
        "done\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_reads_fragments_and_replace_all() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "w").await;
    let text: String = (1..=10).map(|i| format!("line {i} x\n")).collect();
    s.ok(
        "r1",
        "w",
        "workspace.write_file",
        json!({"path": "scratch/a.txt", "content": text}),
    )
    .await;
    s.open("default", "r1", "p", None).await;
    let r = s
        .call(
            "default",
            "r1",
            "p",
            "workspace.read_file",
            json!({"path": "scratch/a.txt", "start_line": 3, "line_count": 2}),
        )
        .await
        .unwrap();
    assert!(
        r.content.starts_with("line 3 x\nline 4 x\n"),
        "{}",
        r.content
    );
    assert!(
        r.content.contains("continue with start_line=5"),
        "{}",
        r.content
    );
    assert_eq!(r.resource_refs[0].uri, "workspace:scratch/a.txt#L3-L4");
    // Text outside the fragment is refused, and that failure demands a full read.
    assert_eq!(
        s.err(
            "r1",
            "p",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": "line 9 x", "new_string": "nine"})
        )
        .await,
        "workspace.patch_not_read"
    );
    assert_eq!(
        s.err(
            "r1",
            "p",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": "line 3 x", "new_string": "three"})
        )
        .await,
        "workspace.full_read_required"
    );
    s.ok(
        "r1",
        "p",
        "workspace.read_file",
        json!({"path": "scratch/a.txt", "start_line": 1}),
    )
    .await;
    // Ambiguous without replace_all; replace_all after the full read.
    assert_eq!(
        s.err(
            "r1",
            "p",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": " x", "new_string": "!"})
        )
        .await,
        "workspace.patch_ambiguous"
    );
    assert_eq!(
        s.err(
            "r1",
            "p",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": "nope", "new_string": "!"})
        )
        .await,
        "workspace.patch_no_match"
    );
    assert_eq!(
        s.err(
            "r1",
            "p",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": "", "new_string": "!"})
        )
        .await,
        "workspace.patch_invalid"
    );
    let out = s.ok("r1", "p", "workspace.apply_patch", json!({"path": "scratch/a.txt", "old_string": " x", "new_string": "!", "replace_all": true})).await;
    assert!(out.contains("10 occurrences"), "{out}");
    // A partial reader may not replace_all.
    s.open("default", "r1", "q", None).await;
    s.ok(
        "r1",
        "q",
        "workspace.read_file",
        json!({"path": "scratch/a.txt", "line_count": 1}),
    )
    .await;
    assert_eq!(s.err("r1", "q", "workspace.apply_patch", json!({"path": "scratch/a.txt", "old_string": "line 1!", "new_string": "one", "replace_all": true})).await, "workspace.full_read_required");
    s.ok(
        "r1",
        "q",
        "workspace.apply_patch",
        json!({"path": "scratch/a.txt", "old_string": "line 1!", "new_string": "one"}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_files_come_back_as_previews() {
    let mut s = start_with(
        std::sync::Arc::new(toolplane_workspace::tree::NoHooks),
        toolplane_workspace::limits::Limits {
            max_read_chars: 100,
            max_line_chars: 40,
            ..Default::default()
        },
    )
    .await;
    s.run("default", "r1", "c", "i").await;
    let text: String = (1..=50).map(|i| format!("row {i:03}\n")).collect();
    s.ok(
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "output/long.md", "content": text}),
    )
    .await;
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/long.md"}),
        )
        .await
        .unwrap();
    let st = structured(&r);
    assert_eq!(st["startLine"], 1);
    assert_eq!(st["totalLines"], 50);
    let next = st["nextStartLine"].as_u64().unwrap();
    assert!(next > 1 && next < 50);
    assert!(r.content.contains(&format!("start_line={next}")));
    let long = format!("{}\n", "y".repeat(100));
    s.ok(
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "output/wide.md", "content": long}),
    )
    .await;
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/wide.md"}),
        )
        .await
        .unwrap();
    assert!(r.content.contains("was cut"), "{}", r.content);
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/long.md", "start_line": 99})
        )
        .await,
        "workspace.invalid_range"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recoverable_errors_of_model_input() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let d = s.run_dir("default", "r1");
    write(&d, "output/bin.dat", &[0, 159, 146, 150]);
    std::fs::create_dir_all(d.join("output/folder")).unwrap();
    write(&d, "input/secret.json", b"{}");
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/bin.dat"})
        )
        .await,
        "workspace.file_not_text"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/folder"})
        )
        .await,
        "workspace.path_is_directory"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.write_file",
            json!({"path": "output/folder", "content": "x"})
        )
        .await,
        "workspace.path_is_directory"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/none.md"})
        )
        .await,
        "workspace.file_not_found"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "input/secret.json"})
        )
        .await,
        "workspace.path_not_visible"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.write_file",
            json!({"path": "tool-results/x.json", "content": "x"})
        )
        .await,
        "workspace.path_not_writable"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.write_file",
            json!({"path": "output/a", "content": "x", "mode": "insert"})
        )
        .await,
        "tool.invalid_arguments"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.write_file",
            json!({"path": "output/a"})
        )
        .await,
        "tool.invalid_arguments"
    );
    assert_eq!(
        s.err("r1", "i", "workspace.search_files", json!({"query": "   "}))
            .await,
        "workspace.invalid_query"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.search_files",
            json!({"query": "x", "path": "output/missing/"})
        )
        .await,
        "workspace.file_not_found"
    );
    assert_eq!(
        s.err("r1", "i", "workspace.list_files", json!({"path": "input/"}))
            .await,
        "workspace.path_not_visible"
    );
    let big = "z".repeat(9 * 1024 * 1024);
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.write_file",
            json!({"path": "output/big", "content": big})
        )
        .await,
        "workspace.file_too_large"
    );
    // Governance paths from the ToolContext.
    let r = s
        .tools
        .execute(toolplane_proto::v1::ExecuteRequest {
            context: Some(toolplane_proto::v1::ToolContext {
                run_id: "r1".into(),
                invocation_id: "i".into(),
                epoch: 1,
                deny_paths: vec!["output/private".into()],
                ..Default::default()
            }),
            invocation: Some(toolplane_proto::v1::ToolInvocation {
                call_id: "c1".into(),
                tool_id: "builtin:workspace.write_file".into(),
                arguments_json: json!({"path": "output/private/x.md", "content": "x"}).to_string(),
                provider_metadata_json: None,
            }),
            timeout_ms: None,
            trace: false,
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(r.error_code.as_deref(), Some("workspace.path_denied"));
    // A runtime-control tool is not executed here.
    let status = s
        .call("default", "r1", "i", "workspace.commit", json!({}))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with("workspace.unknown_tool"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_paths_are_refused_and_touch_nothing() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let long = format!("output/{}", "n".repeat(300));
    let hostile = [
        "../escape.md",
        "output/../../escape.md",
        "/etc/passwd",
        "/tmp/x",
        "output/%2e%2e/%2e%2e/escape.md",
        "%2e%2e/x",
        "output/a\u{0}b",
        "output\\..\\..\\x",
        "output/\u{2024}\u{2024}/x",
        "output/\u{FF0E}\u{FF0E}/x",
        "output\u{2215}x",
        "output/\u{202E}dm.exe",
        long.as_str(),
        "input/invocations/i/tool_snapshot.json",
        "tool-args/i/call_0000000000000000.json",
        "model-responses/m.json",
        "journal/seg-0000000001.wal",
        "../../store/workspace/cells",
        "OUTPUT/x.md",
        "",
        ".",
        "output/./x",
    ];
    for path in hostile {
        for (tool, args) in [
            (
                "workspace.write_file",
                json!({"path": path, "content": "pwned"}),
            ),
            ("workspace.read_file", json!({"path": path})),
            (
                "workspace.apply_patch",
                json!({"path": path, "old_string": "a", "new_string": "b"}),
            ),
        ] {
            let code = s.err("r1", "i", tool, args).await;
            assert!(
                [
                    "workspace.invalid_path",
                    "workspace.path_not_visible",
                    "workspace.path_not_writable"
                ]
                .contains(&code.as_str()),
                "{path:?} {tool}: {code}"
            );
        }
    }
    let data = s.data();
    assert!(!data.join("escape.md").exists() && !data.parent().unwrap().join("escape.md").exists());
    let mut found = Vec::new();
    for entry in walk(&data.join("tree")) {
        found.push(entry);
    }
    assert!(
        found
            .iter()
            .all(|p| !std::fs::read(p).map(|b| b == b"pwned").unwrap_or(false)),
        "nothing was written: {found:?}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p))
            } else {
                out.push(p)
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_search_with_refs() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    s.ok("r1", "i", "workspace.write_file", json!({"path": "output/notes.md", "content": "intro\nthe quick brown fox\nmiddle\n\n\n\nfox and hound\n"})).await;
    s.ok(
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "plan/todo.md", "content": "a => b\nquick fox fox fox\n"}),
    )
    .await;
    let d = s.run_dir("default", "r1");
    write(&d, "input/hidden.md", b"quick fox hidden");
    write(&d, "output/blob.bin", &[0, 1, 2, 0xff]);
    let listed = s.ok("r1", "i", "workspace.list_files", json!({})).await;
    assert!(
        listed.contains("output/notes.md")
            && listed.contains("plan/todo.md")
            && !listed.contains("input/"),
        "{listed}"
    );
    let listed = s
        .ok("r1", "i", "workspace.list_files", json!({"path": "plan/"}))
        .await;
    assert!(
        listed.contains("plan/todo.md") && !listed.contains("output/"),
        "{listed}"
    );
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.search_files",
            json!({"query": "quick fox", "context_lines": 0}),
        )
        .await
        .unwrap();
    let st = structured(&r);
    let results = st["results"].as_array().unwrap();
    assert_eq!(st["totalMatches"], 3, "{}", r.content);
    assert_eq!(st["skippedBinary"], 1);
    assert!(
        results
            .iter()
            .all(|h| !h["path"].as_str().unwrap().starts_with("input/"))
    );
    // The line holding both terms ranks above lines holding one.
    let first = &results[0];
    assert!(
        first["snippet"].as_str().unwrap().contains("quick"),
        "{first}"
    );
    assert!(
        r.resource_refs
            .iter()
            .any(|r| r.uri == "workspace:output/notes.md#L2-L2"),
        "{:?}",
        r.resource_refs
    );
    // Symbol-only queries search literally.
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.search_files",
            json!({"query": "=>"}),
        )
        .await
        .unwrap();
    assert_eq!(structured(&r)["results"][0]["path"], "plan/todo.md");
    let none = s
        .ok(
            "r1",
            "i",
            "workspace.search_files",
            json!({"query": "zebra"}),
        )
        .await;
    assert!(none.starts_with("No matches."), "{none}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_are_narrowed_per_invocation_and_read_state_is_per_invocation() {
    let mut s = start().await;
    s.create_run("default", "r1", "c").await;
    let narrowed = s
        .storage
        .open_invocation_workspace(toolplane_proto::v1::OpenInvocationWorkspaceRequest {
            run_id: "r1".into(),
            invocation_id: "child".into(),
            roots: Some(toolplane_proto::v1::WorkspaceRoots {
                visible: vec!["output/".into(), "scratch/".into()],
                writable: vec!["scratch/".into()],
            }),
            epoch: 1,
            cell_id: String::new(),
            skills: None,
        })
        .await
        .unwrap()
        .into_inner()
        .roots
        .unwrap();
    assert_eq!(narrowed.writable, vec!["scratch/"]);
    assert_eq!(
        s.err(
            "r1",
            "child",
            "workspace.write_file",
            json!({"path": "output/a.md", "content": "x"})
        )
        .await,
        "workspace.path_not_writable"
    );
    assert_eq!(
        s.err(
            "r1",
            "child",
            "workspace.read_file",
            json!({"path": "plan/a.md"})
        )
        .await,
        "workspace.path_not_visible"
    );
    s.ok(
        "r1",
        "child",
        "workspace.write_file",
        json!({"path": "scratch/a.md", "content": "x\n"}),
    )
    .await;
    // A call for an invocation that was never opened is a system failure.
    let status = s
        .call("default", "r1", "ghost", "workspace.list_files", json!({}))
        .await
        .unwrap_err();
    assert!(
        status
            .message()
            .starts_with("workspace.invocation_not_open"),
        "{status:?}"
    );
    // Closed invocations are refused.
    s.storage
        .close_invocation_workspace(toolplane_proto::v1::CloseInvocationWorkspaceRequest {
            run_id: "r1".into(),
            invocation_id: "child".into(),
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(
        s.err("r1", "child", "workspace.list_files", json!({}))
            .await,
        "workspace.invocation_closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cell_never_reaches_another() {
    let mut s = start().await;
    s.run("cell-a", "r1", "c", "i").await;
    s.call(
        "cell-a",
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "output/a.md", "content": "secret of a"}),
    )
    .await
    .unwrap();
    // The same run id in another cell does not exist.
    let status = s
        .call(
            "cell-b",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/a.md"}),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    s.run("cell-b", "r1", "c", "i").await;
    let r = s
        .call(
            "cell-b",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/a.md"}),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code.as_deref(), Some("workspace.file_not_found"));
    let status = s
        .storage
        .get_object(toolplane_proto::v1::GetObjectRequest {
            run_id: "r1".into(),
            path: "output/a.md".into(),
            cell_id: "cell-b".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    let bad = s
        .storage
        .get_run_workspace(toolplane_proto::v1::GetRunWorkspaceRequest {
            run_id: "r1".into(),
            cell_id: "../cell-a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_epochs_are_refused() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    // A newer epoch raises the run's; the old holder is then refused.
    s.storage
        .append_journal(toolplane_proto::v1::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: 1,
            records: vec![toolplane_proto::v1::JournalEvent {
                r#type: "run_created".into(),
                ..Default::default()
            }],
            epoch: 5,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await
        .unwrap();
    let status = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.write_file",
            json!({"path": "output/a.md", "content": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert!(status.message().starts_with("workspace.stale_epoch"));
    assert!(!s.run_dir("default", "r1").join("output/a.md").exists());
    let m = s
        .storage
        .get_run_workspace(toolplane_proto::v1::GetRunWorkspaceRequest {
            run_id: "r1".into(),
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(m.manifest.unwrap().epoch, 5);
    // Reads need no epoch.
    s.ok("r1", "i", "workspace.list_files", json!({})).await;
}

/// The peak resident memory of this test's process (nextest runs each test in its own).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

#[tokio::test]
async fn a_replace_all_bomb_is_refused_before_its_result_is_built() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "w").await;
    s.ok(
        "r1",
        "w",
        "workspace.write_file",
        json!({"path": "scratch/a.txt", "content": "a".repeat(2_000)}),
    )
    .await;
    s.ok(
        "r1",
        "w",
        "workspace.read_file",
        json!({"path": "scratch/a.txt"}),
    )
    .await;
    let before = peak_rss_bytes();
    // 2,000 replacements of 900 KiB each would be a 1.7 GiB result.
    assert_eq!(
        s.err(
            "r1",
            "w",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": "a", "new_string": "b".repeat(900 * 1024), "replace_all": true}),
        )
        .await,
        "workspace.file_too_large"
    );
    let grown = peak_rss_bytes().saturating_sub(before);
    assert!(
        grown < 64 * 1024 * 1024,
        "the refused patch raised the peak by {} MiB",
        grown / (1024 * 1024)
    );
    // The file is as it was.
    let r = s
        .call(
            "default",
            "r1",
            "w",
            "workspace.read_file",
            json!({"path": "scratch/a.txt"}),
        )
        .await
        .unwrap();
    assert!(r.content.starts_with("aaaa"), "{}", r.content);
}

#[tokio::test]
async fn symlinks_and_special_files_in_a_workspace_are_skipped_and_reported() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "w").await;
    s.ok(
        "r1",
        "w",
        "workspace.write_file",
        json!({"path": "output/real.md", "content": "real\n"}),
    )
    .await;
    // Someone with access to the host put a symlink and a fifo into the run's tree.
    let data = s.data();
    let output = walk(&data.join("tree"))
        .into_iter()
        .find(|p| p.ends_with("output/real.md"))
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    std::os::unix::fs::symlink("/etc/passwd", output.join("link.md")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(output.join("pipe"))
        .status()
        .unwrap();
    assert!(fifo.success());
    for tool in ["workspace.list_files", "workspace.search_files"] {
        let args = if tool == "workspace.list_files" {
            json!({})
        } else {
            json!({"query": "real"})
        };
        let r = s.call("default", "r1", "w", tool, args).await.unwrap();
        assert!(!r.is_error, "{tool}: {}", r.content);
        let text = r.content.to_string();
        assert!(
            !text.contains(data.to_str().unwrap()),
            "{tool} names a host path: {text}"
        );
    }
    let r = s
        .call("default", "r1", "w", "workspace.list_files", json!({}))
        .await
        .unwrap();
    assert!(r.content.contains("output/real.md"), "{}", r.content);
    assert!(r.content.contains("skipped 2 entries"), "{}", r.content);
    let st = structured(&r);
    let skipped: Vec<&str> = st["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["output/link.md", "output/pipe"]);
}
