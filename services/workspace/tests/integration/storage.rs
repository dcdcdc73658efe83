//! The storage RPCs and the chat, skill and world-info tools over a real socket: audit objects,
//! the journal, chats and commits, skills, world info, `persist/` promotion, symlinks and
//! concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{path::Path, sync::Arc};

use common::*;
use serde_json::json;
use toolplane_proto::v1 as pb;

fn event(kind: &str) -> pb::JournalEvent {
    pb::JournalEvent {
        r#type: kind.into(),
        payload_json: "{}".into(),
        ..Default::default()
    }
}

fn put(path: &str, bytes: &[u8]) -> pb::PutAuditObjectRequest {
    pb::PutAuditObjectRequest {
        run_id: "r1".into(),
        path: path.into(),
        content: bytes.to_vec(),
        content_type: String::new(),
        epoch: 1,
        allow_identical: false,
        sync: false,
        cell_id: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_objects_are_create_only_even_under_concurrency() {
    let before = now_ms();
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let path = "tool-args/inv1/call_0123456789abcdef.json";
    let mut tasks = Vec::new();
    for n in 0..16 {
        let mut client = s.storage.clone();
        tasks.push(tokio::spawn(async move {
            client
                .put_audit_object(put(path, format!("{{\"n\":{n}}}").as_bytes()))
                .await
        }));
    }
    let mut wins = Vec::new();
    for (n, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(_) => wins.push(n),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::AlreadyExists);
                assert!(status.message().starts_with("workspace.audit_exists"));
            }
        }
    }
    assert_eq!(wins.len(), 1, "exactly one creator wins");
    let got = s
        .storage
        .get_object(pb::GetObjectRequest {
            run_id: "r1".into(),
            path: path.into(),
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.content, format!("{{\"n\":{}}}", wins[0]).into_bytes());
    // A retried identical put is accepted without writing; a different one still fails.
    let mut same = put(path, &got.content);
    same.allow_identical = true;
    assert!(
        !s.storage
            .put_audit_object(same)
            .await
            .unwrap()
            .into_inner()
            .created
    );
    // Bad audit paths.
    for bad in [
        "tool-args/inv1/call_0.json",
        "tool-args/inv1/CALL_0123456789abcdef.json",
        "output/x.json",
        "tool-args/../x",
        "tool-results/x.json",
    ] {
        assert_eq!(
            s.storage
                .put_audit_object(put(bad, b"{}"))
                .await
                .unwrap_err()
                .code(),
            tonic::Code::InvalidArgument,
            "{bad}"
        );
    }
    // tool-results are visible to the model, read-only.
    s.storage
        .put_audit_object(put(
            "tool-results/inv1/call_0123456789abcdef.json",
            b"{\"ok\":true}",
        ))
        .await
        .unwrap();
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "tool-results/inv1/call_0123456789abcdef.json"}),
        )
        .await
        .unwrap();
    assert_eq!(r.content, "{\"ok\":true}");
    let listed = s
        .storage
        .list_objects(pb::ListObjectsRequest {
            run_id: "r1".into(),
            include_hidden: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let paths: Vec<_> = listed
        .objects
        .iter()
        .map(|o| (o.path.as_str(), o.visible))
        .collect();
    assert!(
        paths.contains(&(path, false))
            && paths.contains(&("tool-results/inv1/call_0123456789abcdef.json", true)),
        "{paths:?}"
    );
    // Modification times are real, whether the object is still in memory or already packed.
    s.ws.wal().unwrap().checkpoint().await.unwrap();
    s.ok(
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "output/a.md", "content": "x"}),
    )
    .await;
    let listed = s
        .storage
        .list_objects(pb::ListObjectsRequest {
            run_id: "r1".into(),
            include_hidden: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let after = now_ms();
    assert_eq!(listed.objects.len(), 3, "{:?}", listed.objects);
    for o in &listed.objects {
        assert!(
            o.modified_at_unix_ms >= before - 1_000 && o.modified_at_unix_ms <= after + 1_000,
            "{} modified at {} (test ran {before}..{after})",
            o.path,
            o.modified_at_unix_ms
        );
    }
}

/// The workspace engine opened again on a stopped service's data directory (a restart).
async fn reopen(
    data: &Path,
    limits: toolplane_workspace::limits::Limits,
) -> toolplane_workspace::Workspace {
    let store = toolplane_store::FsStore::open(data.join("store"), Default::default())
        .await
        .unwrap();
    toolplane_workspace::Workspace::open_on_disk(
        data.to_path_buf(),
        Arc::new(store),
        limits,
        Arc::new(toolplane_workspace::tree::NoHooks),
    )
    .await
    .unwrap()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn carried(path: &str, bytes: &[u8]) -> pb::AuditObjectWrite {
    pb::AuditObjectWrite {
        path: path.into(),
        content: bytes.to_vec(),
        content_type: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_carry_the_objects_their_records_name_all_or_nothing() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let args = "tool-args/i/call_00000000000000a1.json";
    let result = "tool-results/i/call_00000000000000a1.json";
    let append = |seq: u64, objects: Vec<pb::AuditObjectWrite>| pb::AppendJournalRequest {
        run_id: "r1".into(),
        expected_seq: seq,
        records: vec![event("tool_call_completed"), event("tool_result_stored")],
        epoch: 1,
        cell_id: String::new(),
        objects,
    };
    let first = append(
        1,
        vec![carried(args, b"{\"a\":1}"), carried(result, b"{\"r\":1}")],
    );
    assert_eq!(
        s.storage
            .append_journal(first.clone())
            .await
            .unwrap()
            .into_inner()
            .last_seq,
        2
    );
    let get = |path: &str| pb::GetObjectRequest {
        run_id: "r1".into(),
        path: path.into(),
        cell_id: String::new(),
    };
    let got = s
        .storage
        .get_object(get(result))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.content, b"{\"r\":1}");
    // The model sees the result like any other.
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": result}),
        )
        .await
        .unwrap();
    assert_eq!(r.content, "{\"r\":1}");
    // A byte-identical retry succeeds; the same records with other object bytes do not.
    assert_eq!(
        s.storage
            .append_journal(first)
            .await
            .unwrap()
            .into_inner()
            .last_seq,
        2
    );
    let err = s
        .storage
        .append_journal(append(
            1,
            vec![carried(args, b"{\"a\":2}"), carried(result, b"{\"r\":1}")],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted, "{err:?}");
    // An existing object fails the whole append: no record, and the new object is not stored.
    let fresh = "tool-args/i/call_00000000000000a2.json";
    let err = s
        .storage
        .append_journal(append(
            3,
            vec![carried(fresh, b"{}"), carried(result, b"{}")],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");
    assert!(
        err.message().starts_with("workspace.audit_exists"),
        "{err:?}"
    );
    assert_eq!(
        s.storage.get_object(get(fresh)).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    // An object under another object's path would make a path both a file and a folder: refused too.
    let err = s
        .storage
        .append_journal(append(3, vec![carried(&format!("{result}/x"), b"{}")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");
    // Colliding paths within one append, and bad paths, are invalid requests.
    for objects in [
        vec![carried(fresh, b"{}"), carried(fresh, b"{}")],
        vec![
            carried("tool-results/i/a", b"{}"),
            carried("tool-results/i/a/b", b"{}"),
        ],
        vec![carried("output/x.json", b"{}")],
    ] {
        let err = s
            .storage
            .append_journal(append(3, objects))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    }
    let page = s
        .storage
        .read_journal(pb::ReadJournalRequest {
            run_id: "r1".into(),
            from_seq: 1,
            page_size: 10,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.records.len(), 2, "failed appends wrote nothing");
    assert_eq!(
        s.storage
            .append_journal(append(3, vec![carried(fresh, b"{}")]))
            .await
            .unwrap()
            .into_inner()
            .last_seq,
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_are_checkpointed_into_files_and_read_back() {
    // Every group closes its segment: checkpoints run all the time.
    let limits = toolplane_workspace::limits::Limits {
        journal_segment_bytes: 1,
        ..Default::default()
    };
    let mut s = start_with(Arc::new(toolplane_workspace::tree::NoHooks), limits.clone()).await;
    s.run("default", "r1", "c", "i").await;
    s.run("default", "r2", "c", "i").await;
    let mut follower = s
        .storage
        .follow_journal(pb::FollowJournalRequest {
            run_id: "r1".into(),
            from_seq: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut tasks = Vec::new();
    for run in ["r1", "r2"] {
        let mut c = s.storage.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..100u64 {
                let path = format!("tool-args/i/call_{n:016x}.json");
                // r1 puts its objects first, r2 carries them in the append.
                let mut objects = Vec::new();
                if run == "r1" {
                    let mut obj = put(&path, b"{}");
                    obj.run_id = run.into();
                    c.put_audit_object(obj).await.unwrap();
                } else {
                    objects.push(carried(&path, b"{}"));
                }
                c.append_journal(pb::AppendJournalRequest {
                    run_id: run.into(),
                    expected_seq: 3 * n + 1,
                    records: (0..3)
                        .map(|k| event(&format!("e{}", 3 * n + k + 1)))
                        .collect(),
                    epoch: 1,
                    cell_id: String::new(),
                    objects,
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    s.ws.wal().unwrap().checkpoint().await.unwrap();
    let journal = s.data().join("journal");
    let segments: Vec<_> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    assert!(
        segments.is_empty(),
        "old segments are deleted: {segments:?}"
    );
    let files: Vec<_> = std::fs::read_dir(journal.join("runs/default/r1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(files.len() > 1, "{files:?}");
    assert_eq!(
        s.ws.wal().unwrap().pending_count(),
        0,
        "every object is in its run's packs"
    );
    assert!(
        files.iter().any(|f| f.ends_with(".pack")),
        "objects are checkpointed into packs: {files:?}"
    );
    assert!(
        !s.run_dir("default", "r2").join("tool-args").exists(),
        "an audit object is no file of its own in the run tree"
    );
    // r2 is held by nobody and lives in its files only; r1 has a follower.
    assert_eq!(s.ws.wal().unwrap().resident_journals(), 1);
    // Its objects are read back from its packs.
    let object = s
        .storage
        .get_object(pb::GetObjectRequest {
            run_id: "r2".into(),
            path: "tool-args/i/call_0000000000000063.json".into(),
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!object.content.is_empty());
    // Pages that cross journal files, read from disk.
    let mut seqs = Vec::new();
    let mut from = 1;
    loop {
        let page = s
            .storage
            .read_journal(pb::ReadJournalRequest {
                run_id: "r2".into(),
                from_seq: from,
                page_size: 7,
                cell_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        for r in &page.records {
            assert_eq!(r.r#type, format!("e{}", r.seq));
            assert_eq!(r.run_id, "r2");
            seqs.push(r.seq);
        }
        from = page.next_seq;
        if page.at_end {
            break;
        }
    }
    assert_eq!(seqs, (1..=300).collect::<Vec<_>>());
    for want in 1..=300 {
        let got = follower.message().await.unwrap().unwrap().record.unwrap();
        assert_eq!(got.seq, want);
    }
    // A byte-identical retry of checkpointed records succeeds; another writer of them fails.
    let retry = pb::AppendJournalRequest {
        run_id: "r2".into(),
        expected_seq: 4,
        records: (4..=6).map(|k| event(&format!("e{k}"))).collect(),
        epoch: 1,
        cell_id: String::new(),
        objects: Vec::new(),
    };
    assert_eq!(
        s.storage
            .append_journal(retry.clone())
            .await
            .unwrap()
            .into_inner()
            .last_seq,
        6
    );
    let mut other = retry;
    other.records[1].r#type = "other".into();
    assert_eq!(
        s.storage.append_journal(other).await.unwrap_err().code(),
        tonic::Code::Aborted
    );
    s.storage
        .finish_run_workspace(pb::FinishRunWorkspaceRequest {
            run_id: "r2".into(),
            status: pb::RunStatus::Completed as i32,
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    // After a restart everything comes from the journal files (no segment is left).
    s.ws.shutdown();
    let ws = reopen(&s.data(), limits).await;
    for run in ["r1", "r2"] {
        let journal = ws
            .wal()
            .unwrap()
            .journal(&("default".into(), run.into()))
            .await
            .unwrap();
        let page = journal.read(1, 1_000).await.unwrap();
        assert_eq!(page.records.len(), 300, "{run}");
        assert!(page.at_end);
        assert_eq!(page.sealed, run == "r2", "{run}: the seal is durable");
    }
    ws.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_appends_conflicts_reads_and_follows() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let mut follower = s
        .storage
        .follow_journal(pb::FollowJournalRequest {
            run_id: "r1".into(),
            from_seq: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let a = s
        .storage
        .append_journal(pb::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: 1,
            records: vec![event("run_created"), event("status_changed")],
            epoch: 1,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(a.into_inner().last_seq, 2);
    // A second writer of seq 2 fails; an exact retry of 1-2 succeeds idempotently.
    let err = s
        .storage
        .append_journal(pb::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: 2,
            records: vec![event("other")],
            epoch: 1,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert!(err.message().starts_with("workspace.journal_conflict"));
    let retry = s
        .storage
        .append_journal(pb::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: 1,
            records: vec![event("run_created"), event("status_changed")],
            epoch: 1,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(retry.into_inner().last_seq, 2);
    // Concurrent writers of the same next number: exactly one wins.
    let mut tasks = Vec::new();
    for n in 0..8 {
        let mut c = s.storage.clone();
        tasks.push(tokio::spawn(async move {
            c.append_journal(pb::AppendJournalRequest {
                run_id: "r1".into(),
                expected_seq: 3,
                records: vec![event(&format!("w{n}"))],
                epoch: 1,
                cell_id: String::new(),
                objects: Vec::new(),
            })
            .await
            .is_ok()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1);
    let page = s
        .storage
        .read_journal(pb::ReadJournalRequest {
            run_id: "r1".into(),
            from_seq: 2,
            page_size: 10,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        page.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(page.at_end);
    assert_eq!(page.records[0].run_id, "r1");
    for want in 1..=3 {
        let got = follower.message().await.unwrap().unwrap().record.unwrap();
        assert_eq!(got.seq, want);
    }
    s.storage
        .finish_run_workspace(pb::FinishRunWorkspaceRequest {
            run_id: "r1".into(),
            status: pb::RunStatus::Completed as i32,
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    assert!(
        follower.message().await.unwrap().is_none(),
        "followers end when the run is sealed"
    );
    let err = s
        .storage
        .append_journal(pb::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: 4,
            records: vec![event("late")],
            epoch: 1,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with("workspace.run_finished"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_commit_and_chat_tools() {
    let mut s = start().await;
    s.run("default", "r1", "chat1", "i").await;
    for (role, text) in [
        (pb::ChatRole::User, "hello, can you plan a trip to Kyoto?"),
        (
            pb::ChatRole::Assistant,
            "Sure.\nDay 1: temples\nDay 2: gardens",
        ),
        (pb::ChatRole::User, "what about => symbols"),
    ] {
        s.storage
            .append_chat_message(pb::AppendChatMessageRequest {
                chat_id: "chat1".into(),
                role: role as i32,
                content: text.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let conflict = s
        .storage
        .append_chat_message(pb::AppendChatMessageRequest {
            chat_id: "chat1".into(),
            role: pb::ChatRole::User as i32,
            content: "x".into(),
            expected_index: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), tonic::Code::Aborted);
    let r = s
        .call(
            "default",
            "r1",
            "i",
            "chat.search",
            json!({"query": "Kyoto trip"}),
        )
        .await
        .unwrap();
    assert_eq!(r.resource_refs[0].uri, "chat:current#0");
    assert_eq!(structured(&r)["results"][0]["role"], "user");
    assert_eq!(
        s.ok(
            "r1",
            "i",
            "chat.search",
            json!({"query": "temples", "role": "user"})
        )
        .await,
        "No matching messages."
    );
    let r = s
        .call("default", "r1", "i", "chat.search", json!({"query": "=>"}))
        .await
        .unwrap();
    assert_eq!(structured(&r)["results"][0]["index"], 2);
    let r = s
        .ok(
            "r1",
            "i",
            "chat.read_messages",
            json!({"messages": [{"index": 1, "start_line": 2, "line_count": 1}, {"index": 0}]}),
        )
        .await;
    assert!(
        r.contains("Day 1: temples") && !r.contains("Day 2") && r.contains("Kyoto"),
        "{r}"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "chat.read_messages",
            json!({"messages": [{"index": 9}]})
        )
        .await,
        "chat.message_not_found"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "chat.read_messages",
            json!({"messages": [{"index": 1, "start_line": 9}]})
        )
        .await,
        "chat.invalid_range"
    );
    // Commit: the first creates the run's message, later ones replace or append to it.
    s.ok(
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "output/main.md", "content": "Answer v1"}),
    )
    .await;
    let c = s
        .storage
        .commit_run_message(pb::CommitRunMessageRequest {
            run_id: "r1".into(),
            source_path: "output/main.md".into(),
            mode: pb::CommitMode::Replace as i32,
            epoch: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(c.created);
    assert_eq!(c.message.as_ref().unwrap().index, 3);
    s.ok(
        "r1",
        "i",
        "workspace.write_file",
        json!({"path": "output/main.md", "content": "Answer v2"}),
    )
    .await;
    let c2 = s
        .storage
        .commit_run_message(pb::CommitRunMessageRequest {
            run_id: "r1".into(),
            source_path: "output/main.md".into(),
            mode: pb::CommitMode::Append as i32,
            epoch: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!c2.created);
    assert_eq!(c2.message.unwrap().content, "Answer v1Answer v2");
    let list = s
        .storage
        .list_chat_messages(pb::ListChatMessagesRequest {
            chat_id: "chat1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.messages.len(), 4);
    assert_eq!(list.messages[3].run_id, "r1");
    for bad in ["output/none.md", "output", "input/x"] {
        let e = s
            .storage
            .commit_run_message(pb::CommitRunMessageRequest {
                run_id: "r1".into(),
                source_path: bad.into(),
                epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(
            e.message().starts_with("workspace.commit_source_invalid"),
            "{bad}: {e:?}"
        );
    }
}

fn skill_folder(root: &Path) {
    write(
        root,
        "SKILL.md",
        b"---\nname: travel\ndescription: \"Plan trips\"\n---\n# Travel\nUse the checklist.\n",
    );
    write(
        root,
        "docs/checklist.md",
        b"passport\ntickets\nhotel booking\n",
    );
    write(root, "img/logo.png", &[0x89, b'P', b'N', b'G', 0, 0, 0xff]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_import_visibility_and_budgets() {
    let mut s = start().await;
    let src = tempfile::tempdir().unwrap();
    skill_folder(src.path());
    #[cfg(unix)]
    std::os::unix::fs::symlink("/etc/passwd", src.path().join("docs/leak.md")).unwrap();
    let imported = s
        .storage
        .import_skill(pb::ImportSkillRequest {
            source_path: src.path().display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let skill = imported.skill.unwrap();
    assert_eq!(
        (
            skill.name.as_str(),
            skill.file_count,
            skill.skipped_file_count
        ),
        ("travel", 2, 1)
    );
    assert!(
        imported
            .warnings
            .iter()
            .any(|w| w.code == "skill.symlink_refused")
    );
    assert_eq!(
        s.storage
            .import_skill(pb::ImportSkillRequest {
                source_path: src.path().display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::AlreadyExists
    );
    s.create_run("default", "r1", "c").await;
    s.open("default", "r1", "none", None).await;
    assert_eq!(
        s.ok("r1", "none", "skill.list", json!({})).await,
        "No skills are installed for you."
    );
    assert_eq!(
        s.err("r1", "none", "skill.read", json!({"name": "travel"}))
            .await,
        "skill.not_found"
    );
    s.open(
        "default",
        "r1",
        "denied",
        Some(pb::SkillAccess {
            visible: vec!["*".into()],
            deny: vec!["travel".into()],
            ..Default::default()
        }),
    )
    .await;
    assert_eq!(
        s.err("r1", "denied", "skill.read", json!({"name": "travel"}))
            .await,
        "skill.not_found"
    );
    s.open(
        "default",
        "r1",
        "i",
        Some(pb::SkillAccess {
            visible: vec!["*".into()],
            deny: vec![],
            max_read_chars_per_call: 40,
            max_read_chars_per_run: 90,
        }),
    )
    .await;
    assert!(
        s.ok("r1", "i", "skill.list", json!({}))
            .await
            .contains("travel: Plan trips")
    );
    let read = s
        .call(
            "default",
            "r1",
            "i",
            "skill.read",
            json!({"name": "travel"}),
        )
        .await
        .unwrap();
    assert!(
        read.content.contains("continue with start_line="),
        "per-call budget gives a preview: {}",
        read.content
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "skill.read",
            json!({"name": "travel", "path": "img/logo.png"})
        )
        .await,
        "skill.file_not_found"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "skill.read",
            json!({"name": "travel", "path": "../x"})
        )
        .await,
        "skill.invalid_path"
    );
    let found = s
        .call(
            "default",
            "r1",
            "i",
            "skill.search",
            json!({"name": "travel", "query": "hotel"}),
        )
        .await
        .unwrap();
    assert!(
        found.content.contains("hotel booking") && found.content.contains("1 binary files skipped"),
        "{}",
        found.content
    );
    // Reads and snippets used the run budget up.
    let mut code = String::new();
    for _ in 0..5 {
        let r = s
            .call(
                "default",
                "r1",
                "i",
                "skill.read",
                json!({"name": "travel", "path": "docs/checklist.md"}),
            )
            .await
            .unwrap();
        if r.is_error {
            code = r.error_code.unwrap();
            break;
        }
    }
    assert_eq!(code, "skill.budget_exhausted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn world_info_index_and_entries() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    assert!(
        s.ok("r1", "i", "worldinfo.read_activated", json!({}))
            .await
            .contains("No world-info")
    );
    let activation = json!({"entries": [{"uid": 7, "comment": "Kyoto", "world": "Japan", "position": "before_char", "content": "Old capital.\nTemples.\nGardens."}, {"ref": "tea", "name": "Tea", "content": "Matcha."}]});
    let put = s
        .storage
        .put_world_info_activation(pb::PutWorldInfoActivationRequest {
            run_id: "r1".into(),
            activation_json: activation.to_string(),
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.entry_count, 2);
    let index = s
        .call("default", "r1", "i", "worldinfo.read_activated", json!({}))
        .await
        .unwrap();
    assert!(
        index
            .content
            .contains("wi1: Kyoto (Japan; before_char; 3 lines")
            && !index.content.contains("Temples"),
        "{}",
        index.content
    );
    let body = s
        .ok(
            "r1",
            "i",
            "worldinfo.read_activated",
            json!({"entries": [{"ref": "wi1", "start_line": 2, "line_count": 1}]}),
        )
        .await;
    assert!(
        body.contains("Temples.") && !body.contains("Gardens"),
        "{body}"
    );
    assert_eq!(
        s.err(
            "r1",
            "i",
            "worldinfo.read_activated",
            json!({"entries": [{"ref": "nope"}]})
        )
        .await,
        "worldinfo.entry_not_found"
    );
    assert_eq!(
        s.storage
            .put_world_info_activation(pb::PutWorldInfoActivationRequest {
                run_id: "r1".into(),
                activation_json: "{\"entries\":[]}".into(),
                epoch: 1,
                cell_id: String::new()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::AlreadyExists
    );
    // The activation is hidden runtime storage, not a model-visible file.
    assert_eq!(
        s.err(
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "input/worldinfo_activation.json"})
        )
        .await,
        "workspace.path_not_visible"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persist_is_projected_and_promoted_by_cas() {
    let mut s = start().await;
    s.run("default", "base", "chat1", "i").await;
    s.ok(
        "base",
        "i",
        "workspace.write_file",
        json!({"path": "persist/memory.md", "content": "v0\n"}),
    )
    .await;
    s.storage
        .promote_persist(pb::PromotePersistRequest {
            run_id: "base".into(),
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    // Two runs of the chat start from the same version; only the first promotion wins.
    s.run("default", "a", "chat1", "i").await;
    s.run("default", "b", "chat1", "i").await;
    assert_eq!(
        std::fs::read_to_string(s.run_dir("default", "a").join("persist/memory.md")).unwrap(),
        "v0\n"
    );
    for run in ["a", "b"] {
        s.ok(
            run,
            "i",
            "workspace.read_file",
            json!({"path": "persist/memory.md"}),
        )
        .await;
        s.ok(
            run,
            "i",
            "workspace.write_file",
            json!({"path": "persist/memory.md", "content": format!("from {run}\n")}),
        )
        .await;
    }
    let (mut ca, mut cb) = (s.storage.clone(), s.storage.clone());
    let (ra, rb) = tokio::join!(
        ca.promote_persist(pb::PromotePersistRequest {
            run_id: "a".into(),
            epoch: 1,
            cell_id: String::new()
        }),
        cb.promote_persist(pb::PromotePersistRequest {
            run_id: "b".into(),
            epoch: 1,
            cell_id: String::new()
        }),
    );
    let (winner, loser) = match (ra, rb) {
        (Ok(w), Err(l)) => ("a", (w, l))
            .1
            .1
            .message()
            .starts_with("workspace.persist_conflict")
            .then_some("a")
            .map(|_| ("a", "b"))
            .unwrap(),
        (Err(l), Ok(_)) => {
            assert!(
                l.message().starts_with("workspace.persist_conflict"),
                "{l:?}"
            );
            ("b", "a")
        }
        other => panic!("exactly one promotion must win: {other:?}"),
    };
    let _ = loser;
    s.run("default", "c", "chat1", "i").await;
    assert_eq!(
        std::fs::read_to_string(s.run_dir("default", "c").join("persist/memory.md")).unwrap(),
        format!("from {winner}\n")
    );
    // A failed run never promotes.
    s.storage
        .finish_run_workspace(pb::FinishRunWorkspaceRequest {
            run_id: "c".into(),
            status: pb::RunStatus::Failed as i32,
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap();
    assert!(
        s.storage
            .promote_persist(pb::PromotePersistRequest {
                run_id: "c".into(),
                epoch: 1,
                cell_id: String::new()
            })
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_cut_short_is_answered_when_asked_again() {
    let mut s = start().await;
    s.run("default", "p1", "chat2", "i").await;
    s.ok(
        "p1",
        "i",
        "workspace.write_file",
        json!({"path": "persist/notes.md", "content": "kept\n"}),
    )
    .await;
    // The chat's state is swapped, and the request is cut short before the run's record says so
    // (its caller went away): the runtime that takes the run over asks again.
    let base =
        s.ws.run_record("default", "p1")
            .await
            .unwrap()
            .persist_base_version;
    let (swapped, _) =
        toolplane_workspace::persist::promote(&s.ws, "default", "chat2", "p1", &base)
            .await
            .unwrap();
    let again = s
        .storage
        .promote_persist(pb::PromotePersistRequest {
            run_id: "p1".into(),
            epoch: 1,
            cell_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.persist_version, swapped);
    s.run("default", "p2", "chat2", "i").await;
    assert_eq!(
        std::fs::read_to_string(s.run_dir("default", "p2").join("persist/notes.md")).unwrap(),
        "kept\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_lose_no_update() {
    let mut s = start().await;
    s.run("default", "r1", "c", "seed").await;
    s.ok(
        "r1",
        "seed",
        "workspace.write_file",
        json!({"path": "output/counter.txt", "content": "0"}),
    )
    .await;
    // Eight writers at once is what makes read-modify-write cycles overlap; 50 successful
    // increments each is plenty for an unchecked write to lose one (every overlap would), and
    // 2,000 in all made this the slowest test of the workspace (85 s in CI) for no more proof.
    const WRITERS: usize = 8;
    const ROUNDS: usize = 400;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let inv = format!("w{w}");
        s.open("default", "r1", &inv, None).await;
        let mut client = s.tools.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            let mut conflicts = 0;
            while done < ROUNDS / WRITERS {
                let r = call_with(
                    &mut client,
                    "default",
                    "r1",
                    &inv,
                    "workspace.read_file",
                    json!({"path": "output/counter.txt"}),
                )
                .await
                .unwrap();
                let n: u64 = r.content.trim().parse().unwrap();
                let w = call_with(
                    &mut client,
                    "default",
                    "r1",
                    &inv,
                    "workspace.write_file",
                    json!({"path": "output/counter.txt", "content": (n + 1).to_string()}),
                )
                .await
                .unwrap();
                if w.is_error {
                    assert_eq!(w.error_code.as_deref(), Some("workspace.stale_file"));
                    conflicts += 1;
                } else {
                    done += 1;
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for t in tasks {
        conflicts += t.await.unwrap();
    }
    let final_value =
        std::fs::read_to_string(s.run_dir("default", "r1").join("output/counter.txt")).unwrap();
    assert_eq!(
        final_value,
        ROUNDS.to_string(),
        "no update lost ({conflicts} stale-file retries)"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_symlinks_are_never_followed() {
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("target.txt"), "outside").unwrap();
    let d = s.run_dir("default", "r1");
    std::fs::create_dir_all(d.join("output")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("target.txt"), d.join("output/link.md"))
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), d.join("scratch")).unwrap();
    for (tool, args) in [
        ("workspace.read_file", json!({"path": "output/link.md"})),
        (
            "workspace.write_file",
            json!({"path": "output/link.md", "content": "pwned"}),
        ),
        (
            "workspace.write_file",
            json!({"path": "scratch/new.md", "content": "pwned"}),
        ),
        ("workspace.read_file", json!({"path": "scratch/target.txt"})),
        ("workspace.list_files", json!({})),
        ("workspace.search_files", json!({"query": "outside"})),
    ] {
        let status = s.call("default", "r1", "i", tool, args).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal, "{tool}");
        assert!(
            status.message().starts_with("workspace.escape"),
            "{tool}: {status:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("target.txt")).unwrap(),
        "outside"
    );
    assert!(!outside.path().join("new.md").exists());
}

/// Swaps the target of a write (or read) for a symlink to `outside` between the check and the IO.
#[derive(Debug)]
struct SwapHook {
    outside: std::path::PathBuf,
}

impl toolplane_workspace::tree::TreeHooks for SwapHook {
    fn before_commit(&self, target: &Path) {
        if target.ends_with("swap.md") {
            let _ = std::fs::remove_file(target);
            std::os::unix::fs::symlink(&self.outside, target).unwrap();
        }
    }
    fn before_read(&self, target: &Path) {
        self.before_commit(target);
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_between_check_and_write_is_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "untouched").unwrap();
    let mut s = start_with(
        Arc::new(SwapHook {
            outside: victim.clone(),
        }),
        Default::default(),
    )
    .await;
    s.run("default", "r1", "c", "i").await;
    for args in [
        json!({"path": "output/swap.md", "content": "pwned"}),
        json!({"path": "output/swap.md", "content": "pwned", "mode": "append"}),
    ] {
        let status = s
            .call("default", "r1", "i", "workspace.write_file", args)
            .await
            .unwrap_err();
        assert!(
            status.message().starts_with("workspace.escape"),
            "{status:?}"
        );
    }
    std::fs::remove_file(s.run_dir("default", "r1").join("output/swap.md")).unwrap();
    std::fs::write(s.run_dir("default", "r1").join("output/swap.md"), "inside").unwrap();
    let status = s
        .call(
            "default",
            "r1",
            "i",
            "workspace.read_file",
            json!({"path": "output/swap.md"}),
        )
        .await
        .unwrap_err();
    assert!(
        status.message().starts_with("workspace.escape"),
        "{status:?}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
}

/// `summaries/<name>-result.md` is where a returned task's summary is kept: a model can write
/// neither such a name nor below one, before or after the task returns, so a model's file never
/// blocks a child's result nor is taken for one; every other name under `summaries/` is the
/// model's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_tasks_summary_name_is_reserved_so_the_result_always_lands() {
    let mut s = common::start().await;
    s.run("default", "r1", "c", "i").await;
    let refused = |r: pb::ToolResult| r.error_code;
    let writes = [
        (
            "workspace.write_file",
            json!({"path": "summaries/m-result.md", "content": "the model's"}),
        ),
        (
            "workspace.write_file",
            json!({"path": "summaries/m-result.md", "content": "x", "mode": "append"}),
        ),
        (
            "workspace.apply_patch",
            json!({"path": "summaries/m-result.md", "old_string": "a", "new_string": "b"}),
        ),
        (
            "workspace.write_file",
            json!({"path": "summaries/m-result.md/notes.md", "content": "x"}),
        ),
    ];
    for (tool, args) in &writes {
        let r = s
            .call("default", "r1", "i", tool, args.clone())
            .await
            .unwrap();
        assert!(
            r.content.contains("summaries/m-result.md"),
            "{tool}: {}",
            r.content
        );
        assert_eq!(
            refused(r).as_deref(),
            Some("workspace.path_not_writable"),
            "{tool} {args}"
        );
    }
    let summaries = s.run_dir("default", "r1").join("summaries");
    assert!(!summaries.join("m-result.md").exists());
    // The task returns: its summary lands there and reads back; writes stay refused after.
    s.storage
        .put_audit_object(put("summaries/m-result.md", b"the child's result"))
        .await
        .unwrap();
    let key = ("default".to_owned(), "r1".to_owned());
    let object =
        s.ws.wal()
            .unwrap()
            .object(&key, "summaries/m-result.md")
            .await
            .unwrap();
    assert_eq!(*object.unwrap().read().unwrap(), b"the child's result");
    let (tool, args) = &writes[0];
    let r = s
        .call("default", "r1", "i", tool, args.clone())
        .await
        .unwrap();
    assert_eq!(refused(r).as_deref(), Some("workspace.path_not_writable"));
    // Other names under summaries/ are the model's.
    for path in [
        "summaries/m.md",
        "summaries/m-result.md.bak",
        "summaries/x/y-result.md",
    ] {
        let r = s
            .call(
                "default",
                "r1",
                "i",
                "workspace.write_file",
                json!({"path": path, "content": "notes"}),
            )
            .await
            .unwrap();
        assert_eq!(r.error_code, None, "{path}: {}", r.content);
    }
    // Writes racing the puts of other tasks' results: every result lands, every write is
    // refused, and no tree file appears under an object.
    let races = (0..40).map(|i| {
        let mut tools = s.tools.clone();
        let mut storage = s.storage.clone();
        async move {
            let path = format!("summaries/c{i}-result.md");
            let write = common::call_with(
                &mut tools,
                "default",
                "r1",
                "i",
                "workspace.write_file",
                json!({"path": path, "content": "written by the model"}),
            );
            let put = storage.put_audit_object(put(&path, b"the child's result"));
            let (write, put) = tokio::join!(write, put);
            (path, write.unwrap().error_code, put.map(|_| ()))
        }
    });
    for (path, write, put) in futures::future::join_all(races).await {
        assert_eq!(
            write.as_deref(),
            Some("workspace.path_not_writable"),
            "{path}"
        );
        put.unwrap();
        assert!(!s.run_dir("default", "r1").join(&path).exists(), "{path}");
    }
    // A file at such a name from before the names were reserved (planted here while the
    // service is stopped) is the model's: the task's put there is refused, even with the same
    // bytes, and the file is left as it was.
    s.ws.shutdown();
    std::fs::write(summaries.join("old-result.md"), "an older model's file").unwrap();
    let ws = reopen(&s.data(), Default::default()).await;
    let err = ws
        .wal()
        .unwrap()
        .put_object(
            &key,
            "summaries/old-result.md",
            b"an older model's file".to_vec(),
            true,
            true,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("workspace.audit_exists") && err.contains("written as a file"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(summaries.join("old-result.md")).unwrap(),
        "an older model's file"
    );
    // Other names are still free in that run.
    ws.wal()
        .unwrap()
        .put_object(
            &key,
            "summaries/new-result.md",
            b"a result".to_vec(),
            true,
            false,
        )
        .await
        .unwrap();
    ws.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_objects_live_in_packs_and_read_list_and_search_like_files() {
    let mut s = common::start().await;
    s.run("default", "r1", "c", "i").await;
    let result = "tool-results/i/call_00000000000000aa.json";
    let summary = "summaries/child-result.md";
    for (path, bytes) in [
        (result, &b"{\"quokka\": \"found\"}"[..]),
        (summary, &b"# Result\nthe quokka count is 3\n"[..]),
    ] {
        s.storage.put_audit_object(put(path, bytes)).await.unwrap();
    }
    let check = |s: &mut common::Service| {
        let mut tools = s.tools.clone();
        async move {
            let read = common::call_with(
                &mut tools,
                "default",
                "r1",
                "i",
                "workspace.read_file",
                json!({"path": summary}),
            )
            .await
            .unwrap();
            assert!(
                read.content.contains("the quokka count is 3"),
                "{}",
                read.content
            );
            let listed = common::call_with(
                &mut tools,
                "default",
                "r1",
                "i",
                "workspace.list_files",
                json!({"path": "tool-results"}),
            )
            .await
            .unwrap();
            assert!(listed.content.contains(result), "{}", listed.content);
            let found = common::call_with(
                &mut tools,
                "default",
                "r1",
                "i",
                "workspace.search_files",
                json!({"query": "quokka"}),
            )
            .await
            .unwrap();
            assert!(
                found.content.contains(result) && found.content.contains(summary),
                "{}",
                found.content
            );
            // A returned task's summary is an audit object: never changed, even after a read.
            let write = common::call_with(
                &mut tools,
                "default",
                "r1",
                "i",
                "workspace.write_file",
                json!({"path": summary, "content": "rewritten"}),
            )
            .await
            .unwrap();
            assert_eq!(
                write.error_code.as_deref(),
                Some("workspace.path_not_writable")
            );
        }
    };
    // From memory, before the segment is checkpointed.
    check(&mut s).await;
    // From the run's pack, after a checkpoint; no file of the tree holds them.
    s.ws.wal().unwrap().checkpoint().await.unwrap();
    assert_eq!(s.ws.wal().unwrap().pending_count(), 0);
    assert!(!s.run_dir("default", "r1").join("tool-results").exists());
    assert!(!s.run_dir("default", "r1").join(summary).exists());
    check(&mut s).await;
    // A second object at a packed path is refused; the same bytes again are recognised.
    let again = s
        .storage
        .put_audit_object(put(result, b"{\"other\": 1}"))
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists);
    let mut same = put(result, b"{\"quokka\": \"found\"}");
    same.allow_identical = true;
    assert!(
        !s.storage
            .put_audit_object(same)
            .await
            .unwrap()
            .into_inner()
            .created
    );
    // After a restart the index is rebuilt from the packs.
    s.ws.shutdown();
    let ws = reopen(&s.data(), Default::default()).await;
    let key = ("default".to_owned(), "r1".to_owned());
    assert_eq!(
        ws.wal()
            .unwrap()
            .object_bytes(&key, result)
            .await
            .unwrap()
            .as_deref()
            .map(Vec::as_slice),
        Some(&b"{\"quokka\": \"found\"}"[..])
    );
    let under = ws
        .wal()
        .unwrap()
        .objects_under(&key, "summaries/")
        .await
        .unwrap();
    assert_eq!(
        under.keys().map(String::as_str).collect::<Vec<_>>(),
        [summary]
    );
    // The run goes on after the restart: its next objects go to a new pack and the earlier ones
    // stay readable, across another restart.
    let later = "tool-results/i/call_00000000000000bb.json";
    ws.wal()
        .unwrap()
        .put_object(&key, later, b"later".to_vec(), true, false)
        .await
        .unwrap();
    ws.wal().unwrap().checkpoint().await.unwrap();
    ws.shutdown();
    drop(ws);
    let packs: Vec<String> = std::fs::read_dir(s.data().join("journal/runs/default/r1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pack"))
        .collect();
    assert_eq!(packs.len(), 2, "{packs:?}");
    let ws = reopen(&s.data(), Default::default()).await;
    for (path, bytes) in [
        (result, &b"{\"quokka\": \"found\"}"[..]),
        (later, &b"later"[..]),
    ] {
        assert_eq!(
            ws.wal()
                .unwrap()
                .object_bytes(&key, path)
                .await
                .unwrap()
                .as_deref()
                .map(Vec::as_slice),
            Some(bytes),
            "{path}"
        );
    }
    ws.shutdown();
}

/// Copies a directory tree (a crash image when taken from a running service: what its fsyncs
/// made durable, and possibly more).
/// The types of a default-cell run's first 100 records, read through the log.
async fn record_types(ws: &toolplane_workspace::Workspace, run: &str) -> Vec<String> {
    let key = ("default".to_owned(), run.to_owned());
    let page = ws
        .wal()
        .unwrap()
        .journal(&key)
        .await
        .unwrap()
        .read(1, 100)
        .await
        .unwrap();
    page.records.iter().map(|r| r.r#type.clone()).collect()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_image_of_the_log_recovers_every_acknowledged_record_past_the_zeros_ahead() {
    // The segment stays open however slowly the test runs: no close for quiet.
    let limits = toolplane_workspace::limits::Limits {
        journal_idle_close_ms: 0,
        ..Default::default()
    };
    let mut s = start_with(Arc::new(toolplane_workspace::tree::NoHooks), limits).await;
    s.run("default", "r1", "c", "i").await;
    for n in 0..3u64 {
        s.storage
            .append_journal(pb::AppendJournalRequest {
                run_id: "r1".into(),
                expected_seq: 2 * n + 1,
                records: vec![
                    event(&format!("e{}", 2 * n + 1)),
                    event(&format!("e{}", 2 * n + 2)),
                ],
                epoch: 1,
                cell_id: String::new(),
                objects: vec![carried(
                    &format!("tool-args/i/call_{n:016x}.json"),
                    format!("{{\"n\":{n}}}").as_bytes(),
                )],
            })
            .await
            .unwrap();
    }
    // The segment's file reaches past its frames: zeros the first group wrote ahead and synced
    // with itself, so the groups after it overwrite space the file has and sync data alone.
    let journal = s.data().join("journal");
    let segment = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "wal"))
        .expect("the open segment");
    let bytes = std::fs::read(&segment).unwrap();
    let written = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    assert!(
        written > 6 * 12 && written < 64 * 1024,
        "three small groups, then zeros: {written} bytes written"
    );
    assert!(
        bytes.len() - written > 768 * 1024 && bytes.len() <= 1024 * 1024 + written,
        "zeros are kept about a MiB ahead: {} bytes after {written} written",
        bytes.len()
    );

    // A crash now: the next start reads the segment up to the zeros and loses nothing.
    let image = tempfile::tempdir().unwrap();
    copy_tree(&s.data(), image.path());
    let ws = reopen(image.path(), Default::default()).await;
    let key = ("default".to_owned(), "r1".to_owned());
    assert_eq!(
        record_types(&ws, "r1").await,
        (1..=6).map(|k| format!("e{k}")).collect::<Vec<_>>()
    );
    for n in 0..3u64 {
        let object = ws
            .wal()
            .unwrap()
            .object(&key, &format!("tool-args/i/call_{n:016x}.json"))
            .await
            .unwrap()
            .expect("the object is recovered");
        assert_eq!(
            *object.read().unwrap(),
            format!("{{\"n\":{n}}}").into_bytes()
        );
    }
    // The recovered segment was checkpointed and deleted.
    assert!(
        !std::fs::read_dir(image.path().join("journal"))
            .unwrap()
            .any(|e| e.unwrap().path().extension().is_some_and(|e| e == "wal"))
    );
    ws.shutdown();
    s.ws.shutdown();
}

fn segments(journal: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_log_checkpoints_its_segment_and_makes_the_next_one_ready() {
    // 16 KiB segments: a quiet log closes one holding 1 KiB or more, and makes the next with
    // 16 KiB of zeros.
    let limits = toolplane_workspace::limits::Limits {
        journal_idle_close_ms: 500,
        journal_segment_bytes: 16 * 1024,
        ..Default::default()
    };
    let mut s = start_with(Arc::new(toolplane_workspace::tree::NoHooks), limits.clone()).await;
    s.run("default", "r1", "c", "i").await;
    s.run("default", "r2", "c", "i").await;
    let append = |run: &str, n: u64, pad: usize| pb::AppendJournalRequest {
        run_id: run.into(),
        expected_seq: n,
        records: vec![event(&format!("e{n}"))],
        epoch: 1,
        cell_id: String::new(),
        objects: vec![carried(
            &format!("tool-args/i/call_{n:016x}.json"),
            format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(pad)).as_bytes(),
        )],
    };
    let journal = s.data().join("journal");
    let number = |p: &Path| -> u64 {
        let name = p.file_name().unwrap().to_str().unwrap();
        name["seg-".len()..name.len() - ".wal".len()]
            .parse()
            .unwrap()
    };
    let run_files = |run: &str| -> Vec<String> {
        std::fs::read_dir(journal.join("runs/default").join(run))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };

    // Below the fill a quiet log keeps its segment: a trickle of small calls gets no files.
    s.storage.append_journal(append("r2", 1, 10)).await.unwrap();
    let small = segments(&journal);
    assert_eq!(small.len(), 1, "{small:?}");
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(segments(&journal), small, "a small segment stays open");
    assert!(run_files("r2").is_empty(), "{:?}", run_files("r2"));

    // With 2 KiB more, the quiet log closes the segment: the records and objects move into the
    // runs' journal files and packs, and the next segment is made, holding zeros alone.
    s.storage
        .append_journal(append("r1", 1, 2048))
        .await
        .unwrap();
    let first = number(&small[0]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let files = run_files("r1");
        let now = segments(&journal);
        if files.iter().any(|f| f.ends_with(".jrn"))
            && files.iter().any(|f| f.ends_with(".pack"))
            && now.iter().map(|p| number(p)).collect::<Vec<_>>() == [first + 1]
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the quiet segment was not checkpointed: run files {files:?}, segments {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(run_files("r2").iter().any(|f| f.ends_with(".jrn")));
    let ready = segments(&journal).remove(0);
    let bytes = std::fs::read(&ready).unwrap();
    assert!(
        bytes.len() == 16 * 1024 && bytes.iter().all(|&b| b == 0),
        "the next segment is ready, zeros only: {} bytes",
        bytes.len()
    );

    // The next append is written into that segment, over its zeros.
    s.storage
        .append_journal(append("r1", 2, 2048))
        .await
        .unwrap();
    let bytes = std::fs::read(&ready).unwrap();
    let written = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    assert!(
        written > 2048 && bytes.len() == 16 * 1024,
        "the group went into the ready segment: {written} of {} bytes",
        bytes.len()
    );

    // Everything reads back after a restart, and a start over a segment of zeros alone (made
    // ahead, never written: as a crash right after making it leaves it) finds it empty.
    s.ws.shutdown();
    std::fs::write(journal.join("seg-0000000100.wal"), vec![0u8; 16 * 1024]).unwrap();
    let ws = reopen(&s.data(), limits).await;
    for (run, want) in [("r1", vec!["e1", "e2"]), ("r2", vec!["e1"])] {
        assert_eq!(record_types(&ws, run).await, want, "{run}");
    }
    let key = ("default".to_owned(), "r1".to_owned());
    for n in 1..=2u64 {
        let object = ws
            .wal()
            .unwrap()
            .object(&key, &format!("tool-args/i/call_{n:016x}.json"))
            .await
            .unwrap()
            .expect("the object is there");
        assert!(
            object
                .read()
                .unwrap()
                .starts_with(format!("{{\"n\":{n},").as_bytes())
        );
    }
    assert!(
        segments(&journal).is_empty(),
        "the empty segment was checkpointed and deleted"
    );
    ws.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_runs_appends_share_a_request_and_fail_alone() {
    let mut s = start().await;
    for run in ["r1", "r2", "r3"] {
        s.run("default", run, "c", "i").await;
    }
    let append = |run: &str, seq: u64, kind: &str, object: &str| pb::AppendJournalRequest {
        run_id: run.into(),
        expected_seq: seq,
        records: vec![event(kind)],
        epoch: 1,
        cell_id: String::new(),
        objects: vec![carried(object, b"{}")],
    };
    // r2's append names a sequence number its journal is not at: it alone fails, as it would
    // alone, and leaves nothing behind.
    let outcomes = s
        .storage
        .append_journals(pb::AppendJournalsRequest {
            appends: vec![
                append("r1", 1, "a", "tool-args/i/call_0000000000000001.json"),
                append("r2", 5, "b", "tool-args/i/call_0000000000000002.json"),
                append("r3", 1, "c", "tool-args/i/call_0000000000000003.json"),
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .outcomes;
    assert_eq!(outcomes.len(), 3);
    assert_eq!((outcomes[0].code, outcomes[0].last_seq), (0, 1));
    assert_eq!(outcomes[1].code, tonic::Code::Aborted as i32);
    assert!(
        outcomes[1]
            .message
            .starts_with("workspace.journal_conflict"),
        "{:?}",
        outcomes[1]
    );
    assert_eq!((outcomes[2].code, outcomes[2].last_seq), (0, 1));
    for (run, want) in [("r1", vec!["a"]), ("r2", vec![]), ("r3", vec!["c"])] {
        let records = s
            .storage
            .read_journal(pb::ReadJournalRequest {
                run_id: run.into(),
                from_seq: 1,
                page_size: 10,
                cell_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .records;
        let kinds: Vec<_> = records.iter().map(|r| r.r#type.as_str()).collect();
        assert_eq!(kinds, want, "{run}");
    }
    let key = ("default".to_owned(), "r2".to_owned());
    assert!(
        s.ws.wal()
            .unwrap()
            .object(&key, "tool-args/i/call_0000000000000002.json")
            .await
            .unwrap()
            .is_none(),
        "the failed append stored no object"
    );

    // Two appends of one run in one request (its cell named or left empty), or too many
    // appends, are refused whole.
    let mut named = append("r1", 3, "e", "tool-args/i/call_0000000000000005.json");
    named.cell_id = "default".into();
    let err = s
        .storage
        .append_journals(pb::AppendJournalsRequest {
            appends: vec![
                append("r1", 2, "d", "tool-args/i/call_0000000000000004.json"),
                named,
            ],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = s
        .storage
        .append_journals(pb::AppendJournalsRequest {
            appends: (0..257)
                .map(|n| {
                    append(
                        &format!("x{n}"),
                        1,
                        "f",
                        "tool-args/i/call_0000000000000006.json",
                    )
                })
                .collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("256"), "{}", err.message());
    let next = s
        .storage
        .append_journal(append(
            "r1",
            2,
            "g",
            "tool-args/i/call_0000000000000007.json",
        ))
        .await
        .unwrap();
    assert_eq!(
        next.into_inner().last_seq,
        2,
        "the refused requests wrote nothing"
    );
}

/// Threads of this process named `name` (Linux; nextest runs each test in its own process).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.trim_end() == name)
        })
        .count()
}

/// How many records `run`'s journal holds (its first page).
async fn journal_len(s: &mut Service, run: &str) -> usize {
    s.storage
        .read_journal(pb::ReadJournalRequest {
            run_id: run.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .records
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_starts_its_threads_with_the_first_append() {
    // A workspace that only serves reads and run set-up runs no journal thread; the first append
    // starts the writer and the checkpointer, and its record is read back as usual.
    let mut s = start().await;
    s.run("default", "r1", "c", "i").await;
    assert_eq!(threads_named("workspace-wal"), 0);
    assert_eq!(threads_named("workspace-check"), 0);
    assert_eq!(journal_len(&mut s, "r1").await, 0);
    assert_eq!(threads_named("workspace-wal"), 0, "a read starts no thread");

    s.storage
        .append_journal(pb::AppendJournalRequest {
            run_id: "r1".into(),
            expected_seq: 1,
            records: vec![event("run_started")],
            epoch: 1,
            cell_id: String::new(),
            objects: Vec::new(),
        })
        .await
        .unwrap();
    // A thread names itself once it runs: wait for both names.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (
        threads_named("workspace-wal"),
        threads_named("workspace-check"),
    ) != (1, 1)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "threads: wal {}, checkpoint {}",
            threads_named("workspace-wal"),
            threads_named("workspace-check")
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(journal_len(&mut s, "r1").await, 1);
}
