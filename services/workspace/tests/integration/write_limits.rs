//! The limits of what a write or patch may produce, checked on the file it would leave and not only
//! on the new text: an append or a `replace_all` whose pieces are each within the line limit can
//! still join into a line over it. And content with a NUL character is not text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;

const LINE_LIMIT: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_that_joins_a_line_over_the_limit_is_refused_and_changes_nothing() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "w").await;
    let half = "a".repeat(LINE_LIMIT / 2 + 1);
    s.ok(
        "r1",
        "w",
        "workspace.write_file",
        json!({"path": "output/long.md", "content": half}),
    )
    .await;
    assert_eq!(
        s.err(
            "r1",
            "w",
            "workspace.write_file",
            json!({"path": "output/long.md", "content": half, "mode": "append"}),
        )
        .await,
        "workspace.limit_exceeded"
    );
    let on_disk = std::fs::read(s.run_dir("default", "r1").join("output/long.md")).unwrap();
    assert_eq!(on_disk.len(), half.len(), "the file is as it was");
    // The same append after a line break is fine.
    s.ok(
        "r1",
        "w",
        "workspace.write_file",
        json!({"path": "output/long.md", "content": format!("\n{half}"), "mode": "append"}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_all_that_makes_a_line_over_the_limit_is_refused() {
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
    // 2,000 replacements of 600 bytes: a 1.2 MB file of one line.
    assert_eq!(
        s.err(
            "r1",
            "w",
            "workspace.apply_patch",
            json!({"path": "scratch/a.txt", "old_string": "a", "new_string": "b".repeat(600), "replace_all": true}),
        )
        .await,
        "workspace.limit_exceeded"
    );
    // With line breaks in the new text the same growth is an ordinary patch.
    s.ok(
        "r1",
        "w",
        "workspace.apply_patch",
        json!({"path": "scratch/a.txt", "old_string": "a", "new_string": format!("{}\n", "b".repeat(599)), "replace_all": true}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_with_a_nul_character_is_not_text() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "w").await;
    assert_eq!(
        s.err(
            "r1",
            "w",
            "workspace.write_file",
            json!({"path": "output/nul.md", "content": "a\u{0}b"}),
        )
        .await,
        "workspace.file_not_text"
    );
}
