//! A real process killed with SIGKILL in the middle of writes and journal checkpoints: after a
//! restart every file is either its old or its new content, every audit object is whole, every
//! acknowledged journal record is present, and the log was checkpointed.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::json;
use tonic::transport::Channel;
use toolplane_proto::v1::{
    self as pb, tool_executor_client::ToolExecutorClient,
    workspace_service_client::WorkspaceServiceClient,
};

/// The service process, killed when dropped: a failed assertion never leaves it running.
struct Service(Child);

impl Service {
    /// SIGKILL: no shutdown path runs.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(data: &std::path::Path) -> (Service, String) {
    // Small segments: checkpoints (object packs and journal files written, segments deleted)
    // run all the time, so the kill lands in one too.
    let config = data.join("workspace.toml");
    std::fs::write(&config, "[limits]\njournal_segment_bytes = 32768\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolplane-workspace"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the toolplane-workspace binary runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening line")
        .to_owned();
    (Service(child), format!("http://{addr}"))
}

async fn clients(url: &str) -> (WorkspaceServiceClient<Channel>, ToolExecutorClient<Channel>) {
    let channel = Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    (
        WorkspaceServiceClient::new(channel.clone()),
        ToolExecutorClient::new(channel),
    )
}

fn ctx(run: &str, inv: &str) -> Option<pb::ToolContext> {
    Some(pb::ToolContext {
        run_id: run.into(),
        invocation_id: inv.into(),
        epoch: 1,
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_writes_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = spawn(dir.path());
    let (mut storage, _) = clients(&url).await;
    for r in 0..4 {
        let run = format!("r{r}");
        storage
            .create_run_workspace(pb::CreateRunWorkspaceRequest {
                manifest: Some(pb::RunWorkspaceManifest {
                    run_id: run.clone(),
                    chat: Some(pb::ChatBinding {
                        chat_id: "c".into(),
                        message_id: None,
                    }),
                    ..Default::default()
                }),
                epoch: 1,
            })
            .await
            .unwrap();
        storage
            .open_invocation_workspace(pb::OpenInvocationWorkspaceRequest {
                run_id: run,
                invocation_id: "i".into(),
                epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for r in 0..4 {
        let (mut storage, mut tools) = clients(&url).await;
        let acked = Arc::clone(&acked);
        tasks.push(tokio::spawn(async move {
            let run = format!("r{r}");
            for seq in 1..u64::MAX {
                let path = format!("tool-args/i/call_{seq:016x}.json");
                let body = json!({"seq": seq, "pad": "x".repeat(2000)}).to_string();
                // Runs r0 and r1 put their objects first; r2 and r3 carry them in the append,
                // as the runtime does.
                let mut objects = Vec::new();
                if r < 2 {
                    if storage
                        .put_audit_object(pb::PutAuditObjectRequest {
                            run_id: run.clone(),
                            path,
                            content: body.into_bytes(),
                            epoch: 1,
                            ..Default::default()
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                } else {
                    objects.push(pb::AuditObjectWrite {
                        path,
                        content: body.into_bytes(),
                        content_type: String::new(),
                    });
                }
                let content = format!("version {seq}\n{}", "y".repeat(4000));
                let w = tools
                    .execute(pb::ExecuteRequest {
                        context: ctx(&run, "i"),
                        invocation: Some(pb::ToolInvocation {
                            call_id: format!("c{seq}"),
                            tool_id: "builtin:workspace.write_file".into(),
                            arguments_json: json!({"path": "output/f.md", "content": content})
                                .to_string(),
                            provider_metadata_json: None,
                        }),
                        timeout_ms: None,
                        trace: false,
                    })
                    .await;
                if w.is_err() {
                    return;
                }
                let a = storage
                    .append_journal(pb::AppendJournalRequest {
                        run_id: run.clone(),
                        expected_seq: seq,
                        records: vec![pb::JournalEvent {
                            r#type: "tool_call_completed".into(),
                            payload_json: json!({"seq": seq}).to_string(),
                            ..Default::default()
                        }],
                        epoch: 1,
                        cell_id: String::new(),
                        objects,
                    })
                    .await;
                match a {
                    Ok(_) => acked.lock().unwrap().push((run.clone(), seq)),
                    Err(_) => return,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill();
    for t in tasks {
        let _ = t.await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 20,
        "the writers made progress before the kill ({})",
        acked.len()
    );
    let segments = |dir: &std::path::Path| {
        std::fs::read_dir(dir.join("journal"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".wal")
            })
            .count()
    };
    let checkpointed: usize = std::fs::read_dir(dir.path().join("journal/runs/default"))
        .map(|runs| {
            runs.map(|r| std::fs::read_dir(r.unwrap().path()).unwrap().count())
                .sum()
        })
        .unwrap_or(0);
    assert!(
        checkpointed > 0,
        "checkpoints wrote journal files before the kill"
    );
    let (mut child, url) = spawn(dir.path());
    assert_eq!(
        segments(dir.path()),
        0,
        "the restart checkpointed the old segments (the next is made by its first write)"
    );
    let (mut storage, mut tools) = clients(&url).await;
    for r in 0..4 {
        let run = format!("r{r}");
        let last = acked
            .iter()
            .filter(|(x, _)| *x == run)
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(0);
        let page = storage
            .read_journal(pb::ReadJournalRequest {
                run_id: run.clone(),
                from_seq: 1,
                page_size: 5000,
                cell_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            page.records.len() as u64 >= last,
            "{run}: acknowledged records {last}, found {}",
            page.records.len()
        );
        for (i, rec) in page.records.iter().enumerate() {
            assert_eq!(rec.seq, i as u64 + 1);
        }
        // Every audit object named by a journal record is whole.
        for rec in &page.records {
            let path = format!("tool-args/i/call_{:016x}.json", rec.seq);
            let obj = storage
                .get_object(pb::GetObjectRequest {
                    run_id: run.clone(),
                    path,
                    cell_id: String::new(),
                })
                .await
                .unwrap()
                .into_inner();
            let v: serde_json::Value = serde_json::from_slice(&obj.content).unwrap();
            assert_eq!(v["seq"], rec.seq);
        }
        // The file is one complete version, never torn.
        storage
            .open_invocation_workspace(pb::OpenInvocationWorkspaceRequest {
                run_id: run.clone(),
                invocation_id: "after".into(),
                epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        let r = tools
            .execute(pb::ExecuteRequest {
                context: ctx(&run, "after"),
                invocation: Some(pb::ToolInvocation {
                    call_id: "x".into(),
                    tool_id: "builtin:workspace.read_file".into(),
                    arguments_json: json!({"path": "output/f.md"}).to_string(),
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
        let version: u64 = r
            .content
            .lines()
            .next()
            .unwrap()
            .strip_prefix("version ")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            r.content.len(),
            format!("version {version}\n").len() + 4000,
            "{run}: file is whole"
        );
        assert!(
            version >= last,
            "{run}: acknowledged write {last} lost (found {version})"
        );
    }
    child.kill();
}
