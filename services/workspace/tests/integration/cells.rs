//! Cells that never meet, over a real socket with the auth layer mounted: with cell B's agent and
//! admin tokens, every id of cell A (its run workspace, audit objects, files, journal, chat) is
//! answered exactly like an id that does not exist, no listing shows anything of A, and a
//! request naming cell A is refused. With authentication off the request's cell is used as
//! before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Status};
use toolplane_auth::{AuthLayer, Authenticator, NewToken, Role, TokenStore};
use toolplane_proto::v1::{self as pb, workspace_service_client::WorkspaceServiceClient};
use toolplane_store::{FsStore, MemoryStore, StoreOptions};
use toolplane_workspace::{Workspace, limits::Limits, tree::NoHooks};

const OBJ: &str = "tool-args/i/call_0123456789abcdef.json";

/// A workspace behind the auth layer; the temp directory lives as long as the test.
async fn serve(auth: Authenticator) -> (SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    let store = FsStore::open(data.join("store"), StoreOptions::default())
        .await
        .unwrap();
    let ws = Arc::new(
        Workspace::open_on_disk(data, Arc::new(store), Limits::default(), Arc::new(NoHooks))
            .await
            .unwrap(),
    );
    let routes = toolplane_workspace::routes(ws).await.unwrap();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .layer(AuthLayer::new(auth))
            .add_routes(routes)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    (addr, dir)
}

/// A client that sends `secret` (none for `None`) on every request.
struct As {
    client: WorkspaceServiceClient<Channel>,
    bearer: Option<String>,
}

impl As {
    async fn new(addr: SocketAddr, secret: Option<&str>) -> As {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        As {
            client: WorkspaceServiceClient::new(channel),
            bearer: secret.map(|s| format!("Bearer {s}")),
        }
    }

    fn req<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(b) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", b.parse().unwrap());
        }
        request
    }
}

async fn token(tokens: &TokenStore, cell: &str, role: Role) -> String {
    tokens
        .create(NewToken {
            name: format!("{cell}-{role}"),
            cell: cell.into(),
            role,
            expires_at_unix_ms: None,
        })
        .await
        .unwrap()
        .secret
        .expose()
        .to_owned()
}

/// Creates run `run` of the caller's cell with one audit object and one journal record.
async fn seed(c: &mut As, run: &str) {
    let manifest = pb::RunWorkspaceManifest {
        run_id: run.into(),
        chat: Some(pb::ChatBinding {
            chat_id: "chat-1".into(),
            message_id: None,
        }),
        ..Default::default()
    };
    let req = c.req(pb::CreateRunWorkspaceRequest {
        manifest: Some(manifest),
        epoch: 1,
    });
    c.client.create_run_workspace(req).await.unwrap();
    let req = c.req(pb::PutAuditObjectRequest {
        run_id: run.into(),
        path: OBJ.into(),
        content: b"{\"secret\":\"of a\"}".to_vec(),
        epoch: 1,
        ..Default::default()
    });
    c.client.put_audit_object(req).await.unwrap();
    let req = c.req(pb::AppendJournalRequest {
        run_id: run.into(),
        epoch: 1,
        expected_seq: 1,
        records: vec![pb::JournalEvent {
            r#type: "tool_call_requested".into(),
            payload_json: format!("{{\"argsPath\":\"{OBJ}\"}}"),
            ..Default::default()
        }],
        ..Default::default()
    });
    c.client.append_journal(req).await.unwrap();
}

/// Every by-id read of run `run`, as `(rpc, status)`; `Ok` answers are failures of the probe.
async fn probes(c: &mut As, run: &str) -> Vec<(&'static str, Result<String, Status>)> {
    let mut out = Vec::new();
    let req = c.req(pb::GetRunWorkspaceRequest {
        run_id: run.into(),
        ..Default::default()
    });
    out.push((
        "GetRunWorkspace",
        c.client
            .get_run_workspace(req)
            .await
            .map(|r| format!("{:?}", r.into_inner())),
    ));
    let req = c.req(pb::GetObjectRequest {
        run_id: run.into(),
        path: OBJ.into(),
        ..Default::default()
    });
    out.push((
        "GetObject",
        c.client
            .get_object(req)
            .await
            .map(|r| format!("{:?}", r.into_inner())),
    ));
    let req = c.req(pb::ListObjectsRequest {
        run_id: run.into(),
        ..Default::default()
    });
    out.push((
        "ListObjects",
        c.client
            .list_objects(req)
            .await
            .map(|r| format!("{:?}", r.into_inner())),
    ));
    let req = c.req(pb::ReadFileRequest {
        run_id: run.into(),
        path: OBJ.into(),
        ..Default::default()
    });
    out.push((
        "ReadFile",
        c.client
            .read_file(req)
            .await
            .map(|r| format!("{:?}", r.into_inner())),
    ));
    let req = c.req(pb::ReadJournalRequest {
        run_id: run.into(),
        from_seq: 1,
        ..Default::default()
    });
    out.push((
        "ReadJournal",
        c.client
            .read_journal(req)
            .await
            .map(|r| format!("{:?}", r.into_inner())),
    ));
    let req = c.req(pb::FollowJournalRequest {
        run_id: run.into(),
        from_seq: 1,
        ..Default::default()
    });
    out.push((
        "FollowJournal",
        c.client
            .follow_journal(req)
            .await
            .map(|_| "a stream".to_owned()),
    ));
    out
}

fn shape(status: &Status, id: &str) -> (Code, String) {
    (status.code(), status.message().replace(id, "<id>"))
}

#[tokio::test(flavor = "multi_thread")]
async fn another_cells_run_is_answered_exactly_like_a_missing_one() {
    let tokens = TokenStore::new(Arc::new(MemoryStore::default()));
    let admin_a = token(&tokens, "a", Role::Admin).await;
    let agent_b = token(&tokens, "b", Role::Agent).await;
    let admin_b = token(&tokens, "b", Role::Admin).await;
    let (addr, _dir) = serve(Authenticator::on(Some(tokens), None)).await;

    let mut a = As::new(addr, Some(&admin_a)).await;
    seed(&mut a, "run-a").await;
    for (rpc, answer) in probes(&mut a, "run-a").await {
        assert!(answer.is_ok(), "{rpc} of cell a's own admin: {answer:?}");
    }

    for secret in [&agent_b, &admin_b] {
        let mut b = As::new(addr, Some(secret)).await;
        let hidden = probes(&mut b, "run-a").await;
        let missing = probes(&mut b, "run-x").await;
        for ((rpc, hidden), (_, missing)) in hidden.into_iter().zip(missing) {
            let hidden = hidden.expect_err(rpc);
            let missing = missing.expect_err(rpc);
            assert_eq!(hidden.code(), Code::NotFound, "{rpc}: {hidden:?}");
            assert_eq!(shape(&hidden, "run-a"), shape(&missing, "run-x"), "{rpc}");
            assert!(!hidden.message().contains("of a"), "{rpc}: {hidden:?}");
        }

        // A's chat lists nothing for B, exactly as a chat that does not exist.
        let req = b.req(pb::ListChatMessagesRequest {
            chat_id: "chat-1".into(),
            ..Default::default()
        });
        let hidden = b.client.list_chat_messages(req).await;
        let req = b.req(pb::ListChatMessagesRequest {
            chat_id: "chat-x".into(),
            ..Default::default()
        });
        let missing = b.client.list_chat_messages(req).await;
        match (hidden, missing) {
            (Ok(h), Ok(m)) => assert_eq!(h.into_inner().messages, m.into_inner().messages),
            (Err(h), Err(m)) => assert_eq!(shape(&h, "chat-1"), shape(&m, "chat-x")),
            (h, m) => panic!("chat-1 {h:?} but chat-x {m:?}"),
        }

        // Naming cell A is refused, whatever the id.
        let req = b.req(pb::GetRunWorkspaceRequest {
            run_id: "run-a".into(),
            cell_id: "a".into(),
        });
        let named = b.client.get_run_workspace(req).await.unwrap_err();
        assert_eq!(named.code(), Code::PermissionDenied, "{named:?}");
        let req = b.req(pb::ListSkillsRequest {
            cell_id: "a".into(),
            ..Default::default()
        });
        let named = b.client.list_skills(req).await.unwrap_err();
        assert_eq!(named.code(), Code::PermissionDenied, "{named:?}");
    }

    // B's admin cannot write into A's run either: it is not found in B's cell.
    let mut b = As::new(addr, Some(&admin_b)).await;
    let req = b.req(pb::AppendJournalRequest {
        run_id: "run-a".into(),
        epoch: 1,
        expected_seq: 2,
        records: vec![pb::JournalEvent {
            r#type: "run_failed".into(),
            payload_json: "{}".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let status = b.client.append_journal(req).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    let req = a.req(pb::ReadJournalRequest {
        run_id: "run-a".into(),
        from_seq: 1,
        ..Default::default()
    });
    let journal = a.client.read_journal(req).await.unwrap().into_inner();
    assert_eq!(journal.records.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_auth_off_the_request_names_the_cell() {
    let (addr, _dir) = serve(Authenticator::off("default")).await;
    let mut c = As::new(addr, None).await;
    let manifest = pb::RunWorkspaceManifest {
        cell_id: "a".into(),
        run_id: "run-a".into(),
        chat: Some(pb::ChatBinding {
            chat_id: "chat-1".into(),
            message_id: None,
        }),
        ..Default::default()
    };
    let req = c.req(pb::CreateRunWorkspaceRequest {
        manifest: Some(manifest),
        epoch: 1,
    });
    c.client.create_run_workspace(req).await.unwrap();
    let req = c.req(pb::GetRunWorkspaceRequest {
        run_id: "run-a".into(),
        cell_id: "a".into(),
    });
    let got = c.client.get_run_workspace(req).await.unwrap().into_inner();
    assert_eq!(got.manifest.unwrap().cell_id, "a");
    // The default cell (an empty cell) does not have it.
    let req = c.req(pb::GetRunWorkspaceRequest {
        run_id: "run-a".into(),
        cell_id: String::new(),
    });
    assert_eq!(
        c.client.get_run_workspace(req).await.unwrap_err().code(),
        Code::NotFound
    );
}
