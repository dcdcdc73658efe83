//! Patch matching of `workspace.apply_patch` (where `old_string`, `new_string` and `replace_all`
//! are applied). The matcher is not a pure function of the service, so this drives the narrowest
//! public path that applies a patch: the service's `ToolExecutor.Execute` (called in process, no
//! socket) on a workspace engine in a temporary directory (on `/dev/shm` when there is one),
//! reading what the previous input left, writing the arbitrary text over it, reading it whole,
//! then patching it.
//!
//! Invariants: a patch that succeeds leaves exactly the text `str::replacen` (one occurrence) or
//! `str::replace` (`replace_all`) makes; `patch_no_match` means the old string does not occur and
//! `patch_ambiguous` that it occurs more than once without `replace_all`.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tonic::Request;
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::tool_executor_server::ToolExecutor;
use toolplane_proto::v1::workspace_service_server::WorkspaceService;
use toolplane_workspace::{EngineOptions, Workspace, WorkspaceGrpc, limits::Limits};

const CELL: &str = "default";
const RUN: &str = "r1";
const INV: &str = "inv1";

struct Fixture {
    rt: tokio::runtime::Runtime,
    grpc: WorkspaceGrpc,
    file: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let data = base.join(format!("toolplane-fuzz-workspace-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let grpc = rt.block_on(async {
            let ws = Workspace::open(EngineOptions {
                data_dir: data.clone(),
                limits: Limits::default(),
            })
            .await
            .unwrap_or_else(|e| panic!("engine: {e}"));
            let grpc = WorkspaceGrpc::new(Arc::new(ws));
            grpc.create_run_workspace(Request::new(pb::CreateRunWorkspaceRequest {
                manifest: Some(pb::RunWorkspaceManifest {
                    cell_id: CELL.into(),
                    run_id: RUN.into(),
                    chat: Some(pb::ChatBinding {
                        chat_id: "c1".into(),
                        message_id: None,
                    }),
                    ..Default::default()
                }),
                epoch: 1,
            }))
            .await
            .unwrap_or_else(|e| panic!("create run: {e}"));
            grpc.open_invocation_workspace(Request::new(pb::OpenInvocationWorkspaceRequest {
                run_id: RUN.into(),
                invocation_id: INV.into(),
                roots: None,
                epoch: 1,
                cell_id: CELL.into(),
                skills: None,
            }))
            .await
            .unwrap_or_else(|e| panic!("open invocation: {e}"));
            grpc
        });
        let data = std::fs::canonicalize(&data).unwrap_or(data);
        let file = data.join("tree").join(CELL).join(RUN).join("output/f.txt");
        Fixture { rt, grpc, file }
    })
}

/// One tool call; `Err` is its error code (a recoverable tool error or a status).
fn call(f: &Fixture, tool: &str, args: Value) -> Result<String, String> {
    let req = pb::ExecuteRequest {
        context: Some(pb::ToolContext {
            cell_id: CELL.into(),
            run_id: RUN.into(),
            invocation_id: INV.into(),
            epoch: 1,
            ..Default::default()
        }),
        invocation: Some(pb::ToolInvocation {
            call_id: "call_1".into(),
            tool_id: format!("builtin:{tool}"),
            arguments_json: args.to_string(),
            provider_metadata_json: None,
        }),
        timeout_ms: None,
        trace: false,
    };
    let response =
        f.rt.block_on(f.grpc.execute(Request::new(req)))
            .map_err(|s| format!("status {:?}: {}", s.code(), s.message()))?;
    let result = response
        .into_inner()
        .result
        .ok_or_else(|| "no result".to_owned())?;
    if result.is_error {
        Err(result.error_code.unwrap_or_default())
    } else {
        Ok(result.content)
    }
}

#[derive(Debug)]
struct Input<'a> {
    text: &'a str,
    old: &'a str,
    new: &'a str,
    replace_all: bool,
}

// The input: the file's text, the old string and the new string separated by NUL bytes, then
// optionally a NUL and `all` for `replace_all`.
fuzz_target!(|data: &str| {
    let mut parts = data.split('\0');
    let input = Input {
        text: parts.next().unwrap_or(""),
        old: parts.next().unwrap_or(""),
        new: parts.next().unwrap_or(""),
        replace_all: parts.next() == Some("all"),
    };
    let f = fixture();
    let path = "output/f.txt";
    // A file is replaced only after it was read whole: read what the last input left first.
    let _ = call(f, "workspace.read_file", json!({"path": path}));
    let written = call(
        f,
        "workspace.write_file",
        json!({"path": path, "content": input.text, "mode": "replace"}),
    );
    if written.is_err() {
        return;
    }
    if call(f, "workspace.read_file", json!({"path": path})).is_err() {
        return;
    }
    let patched = call(
        f,
        "workspace.apply_patch",
        json!({
            "path": path,
            "old_string": input.old,
            "new_string": input.new,
            "replace_all": input.replace_all,
        }),
    );
    let count = if input.old.is_empty() {
        0
    } else {
        input.text.matches(input.old).count()
    };
    match patched {
        Ok(_) => {
            let expected = if input.replace_all {
                input.text.replace(input.old, input.new)
            } else {
                input.text.replacen(input.old, input.new, 1)
            };
            let on_disk = std::fs::read_to_string(&f.file)
                .unwrap_or_else(|e| panic!("read {}: {e}", f.file.display()));
            assert_eq!(on_disk, expected, "{input:?}");
        }
        Err(code) if code == "workspace.patch_no_match" => assert_eq!(count, 0, "{input:?}"),
        Err(code) if code == "workspace.patch_ambiguous" => {
            assert!(count > 1 && !input.replace_all, "{input:?}");
        }
        Err(_) => {}
    }
});
