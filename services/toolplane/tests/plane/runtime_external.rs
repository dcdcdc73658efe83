//! An external tool host on a real socket, end to end: a small `toolplane.v1.ToolExecutor` in the
//! test registers a tool with the catalog (with an `authorization` header, as docs/catalog.md
//! shows), a profile allows it, and the model calls it in a host-driven `ExecuteToolCalls` turn
//! and in a runtime-driven run. The host's answer reaches the model in the provider's format, and
//! the call is journalled and audited.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use common::*;
use serde_json::{Value, json};
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use toolplane_proto::v1 as pb;
use toolplane_proto::v1::catalog_service_client::CatalogServiceClient;
use toolplane_proto::v1::tool_executor_server::{ToolExecutor, ToolExecutorServer};
use toolplane_testkit::model_server::{ScriptedReply, spawn_model_server};

const OPENAI: pb::ProviderFormat = pb::ProviderFormat::OpenaiChat;
const TOKEN: &str = "Bearer crm-secret";

/// What the host saw of one call.
#[derive(Debug, Clone)]
struct Seen {
    run_id: String,
    call_id: String,
    tool_id: String,
    arguments: Value,
}

/// A CRM host: `ext/crm:lookup_customer` answers `{"query"}` with the customer's facts, and only
/// to callers that send the registered `authorization` header.
#[derive(Clone, Default)]
struct Crm {
    seen: Arc<Mutex<Vec<Seen>>>,
}

#[tonic::async_trait]
impl ToolExecutor for Crm {
    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if auth.as_deref() != Some(TOKEN) {
            return Err(Status::unauthenticated(format!(
                "authorization header {auth:?}"
            )));
        }
        let req = request.into_inner();
        let inv = req.invocation.unwrap_or_default();
        let arguments: Value = serde_json::from_str(&inv.arguments_json).unwrap_or(Value::Null);
        let query = arguments["query"].as_str().unwrap_or_default().to_owned();
        self.seen.lock().unwrap().push(Seen {
            run_id: req.context.unwrap_or_default().run_id,
            call_id: inv.call_id.clone(),
            tool_id: inv.tool_id.clone(),
            arguments,
        });
        Ok(Response::new(pb::ExecuteResponse {
            result: Some(pb::ToolResult {
                call_id: inv.call_id,
                tool_id: inv.tool_id,
                content: format!("Customer `{query}`: Ada Lovelace, plan gold, since 1843."),
                structured_json: Some(
                    json!({"customer": "Ada Lovelace", "plan": "gold"}).to_string(),
                ),
                ..Default::default()
            }),
            outcome: pb::ExecutionOutcome::Known as i32,
            elapsed_ms: 1,
            raw_result_json: Some(json!({"crm": {"id": 1843, "name": "Ada Lovelace"}}).to_string()),
            trace: Vec::new(),
        }))
    }
}

/// Starts the host and registers its tool with the catalog.
async fn register_crm(h: &Harness) -> (Crm, toolplane_testkit::ServerHandle) {
    let crm = Crm::default();
    let server = toolplane_testkit::spawn_routes(Routes::new(ToolExecutorServer::new(crm.clone())))
        .await
        .unwrap();
    let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
    CatalogServiceClient::new(channel(&h.plane.catalog_url()).await)
        .register_tools(pb::RegisterToolsRequest {
            cell_id: String::new(),
            host_id: "crm".into(),
            display_name: "CRM".into(),
            endpoint: Some(pb::ExecutorEndpoint {
                url: server.url(),
                headers: [("authorization".to_owned(), TOKEN.to_owned())].into(),
                timeout_ms: 10_000,
                max_concurrent_calls: 0,
            }),
            tools: vec![pb::ToolRegistration {
                descriptor: Some(pb::ToolDescriptor {
                    id: "ext/crm:lookup_customer".into(),
                    description: "Find a customer by name or email and return their account facts."
                        .into(),
                    input_schema_json: schema.to_string(),
                    ..Default::default()
                }),
                category: pb::ToolCategory::Exploration as i32,
                progress_aware: false,
            }],
            expected_generation: None,
        })
        .await
        .unwrap();
    (crm, server)
}

fn profile() -> Value {
    json!({
        "id": "support",
        "tools": {"allow": ["builtin:workspace.*", "ext/crm:lookup_customer"]}
    })
}

/// The completed call of `call_id` in the journal, and its audited arguments and result.
async fn audited(h: &mut Harness, run: &str, call_id: &str) -> (Value, Value, Value) {
    let done = h
        .journal(run)
        .await
        .iter()
        .filter(|e| e.r#type == "tool_call_completed")
        .map(payload)
        .find(|p| p["callId"] == call_id)
        .unwrap_or_else(|| panic!("no tool_call_completed for {call_id}"));
    let read = |path: &Value| path.as_str().unwrap().to_owned();
    let args = h.object(run, &read(&done["argsPath"])).await.unwrap();
    let result = h.object(run, &read(&done["resultPath"])).await.unwrap();
    (
        done,
        serde_json::from_slice(&args).unwrap(),
        serde_json::from_slice(&result).unwrap(),
    )
}

fn check_audit(done: &Value, args: &Value, result: &Value, call_id: &str) {
    assert_eq!(done["toolId"], "ext/crm:lookup_customer");
    assert_eq!(done["isError"], false);
    assert_eq!(done["outcome"], "known");
    assert_eq!(args["callId"], call_id);
    assert_eq!(args["arguments"]["query"], "ada@example.com");
    assert_eq!(result["result"]["callId"], call_id);
    assert!(
        result["result"]["content"]
            .as_str()
            .unwrap()
            .contains("Ada Lovelace, plan gold"),
        "{result}"
    );
    assert_eq!(result["outcome"], "known");
    assert_eq!(result["raw"]["crm"]["id"], 1843, "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_driven_turn_calls_an_external_host_and_gets_its_answer() {
    let mut h = harness().await;
    let (crm, server) = register_crm(&h).await;
    h.put_profile(profile()).await;
    let run = h.create_run("support", true).await;
    let inv = h.open(&run, OPENAI).await;
    let tools: Value = serde_json::from_str(&inv.tools_json).unwrap();
    let offered = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "ext__crm__lookup_customer")
        .unwrap_or_else(|| panic!("the host's tool is offered: {tools}"));
    assert!(
        offered["function"]["description"]
            .as_str()
            .unwrap()
            .contains("Find a customer")
    );

    let r = h
        .execute(
            &inv.invocation_id,
            &inv.first_turn.unwrap().turn_id,
            OPENAI,
            openai_calls(&[(
                "call_crm",
                "ext__crm__lookup_customer",
                json!({"query": "ada@example.com"}),
            )]),
        )
        .await
        .unwrap();
    assert!(!r.results[0].is_error, "{:?}", r.results[0]);
    assert_eq!(r.state, pb::InvocationState::Open as i32);
    // The answer in OpenAI's shape, as the host sends it back to its model.
    let messages: Value = serde_json::from_str(&r.result_messages_json).unwrap();
    assert_eq!(messages[0]["role"], "tool");
    assert_eq!(messages[0]["tool_call_id"], "call_crm");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("Customer `ada@example.com`: Ada Lovelace, plan gold"),
        "{messages}"
    );
    // The host got the canonical call, for this run.
    let seen = crm.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].tool_id, "ext/crm:lookup_customer");
    assert_eq!(seen[0].call_id, "call_crm");
    assert_eq!(seen[0].run_id, run);
    assert_eq!(seen[0].arguments["query"], "ada@example.com");

    let (done, args, result) = audited(&mut h, &run, "call_crm").await;
    check_audit(&done, &args, &result, "call_crm");
    assert_eq!(
        result["result"]["structured"]["plan"], "gold",
        "the structured result is kept for audit: {result}"
    );
    h.plane.shutdown().await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_driven_run_calls_an_external_host_and_its_model_reads_the_answer() {
    let mut h = harness().await;
    let (crm, server) = register_crm(&h).await;
    h.put_profile(profile()).await;
    let model = spawn_model_server(vec![
        ScriptedReply::tool_calls(
            1,
            &[(
                "ext__crm__lookup_customer",
                json!({"query": "ada@example.com"}),
            )],
        ),
        ScriptedReply::tool_calls(
            2,
            &[(
                "workspace_write_file",
                json!({"path": "output/main.md", "content": "Ada is on the gold plan.\n"}),
            )],
        ),
        ScriptedReply::tool_calls(3, &[("workspace_commit", json!({}))]),
        ScriptedReply::tool_calls(4, &[("workspace_finish", json!({}))]),
    ])
    .await
    .unwrap();
    let run = h
        .start_run(pb::RunSpec {
            profile_id: "support".into(),
            model: Some(pb::ModelEndpoint {
                kind: pb::ModelEndpointKind::OpenaiCompatible as i32,
                base_url: model.base_url(),
                model: "scripted".into(),
                ..Default::default()
            }),
            initial_user_message: "Which plan is ada@example.com on?".into(),
            mode: pb::RunMode::Foreground as i32,
            chat: Some(pb::ChatBinding {
                chat_id: "chat-crm".into(),
                message_id: None,
            }),
            max_rounds: 8,
            ..Default::default()
        })
        .await;
    let done = h.wait_terminal(&run).await;
    assert_eq!(
        done.status,
        pb::RunStatus::Completed as i32,
        "{:?}",
        done.failure
    );
    assert_eq!(
        h.chat("chat-crm").await.last().unwrap().content,
        "Ada is on the gold plan.\n"
    );
    // The model was offered the tool and read the host's answer in its next request.
    let requests = model.requests();
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "ext__crm__lookup_customer"),
        "{}",
        requests[0]["tools"]
    );
    let answer = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1_0")
        .cloned()
        .unwrap_or_else(|| panic!("no tool message: {}", requests[1]["messages"]));
    assert!(
        answer["content"]
            .as_str()
            .unwrap()
            .contains("Ada Lovelace, plan gold"),
        "{answer}"
    );
    let seen = crm.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].run_id, run);

    let (done, args, result) = audited(&mut h, &run, "call_1_0").await;
    check_audit(&done, &args, &result, "call_1_0");
    h.plane.shutdown().await;
    server.shutdown().await.unwrap();
}
