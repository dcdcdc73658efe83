//! Checks the exported file descriptor sets: every service and RPC of the contract is in them, the
//! test-only package stays out of the production set, the wire conventions hold (no
//! `google.protobuf.Struct`), and tonic-reflection accepts them.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use prost_types::FileDescriptorSet;
use prost_types::field_descriptor_proto::Type;
use tonic::server::NamedService;

fn decode(bytes: &[u8]) -> Result<FileDescriptorSet, prost::DecodeError> {
    FileDescriptorSet::decode(bytes)
}

/// `package.Service` -> its RPC names.
fn services(set: &FileDescriptorSet) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for file in &set.file {
        for service in &file.service {
            let name = format!("{}.{}", file.package(), service.name());
            let methods = service.method.iter().map(|m| m.name().to_owned()).collect();
            out.insert(name, methods);
        }
    }
    out
}

#[test]
fn production_set_holds_every_service_and_rpc() {
    let expected: &[(&str, &[&str])] = &[
        (
            "toolplane.v1.CatalogService",
            &[
                "ListTools",
                "GetTool",
                "DescribeTools",
                "RegisterTools",
                "DeregisterTools",
                "ListToolHosts",
            ],
        ),
        (
            "toolplane.v1.ProfileService",
            &[
                "PutProfile",
                "GetProfile",
                "ListProfiles",
                "DeleteProfile",
                "PutPlatformPolicy",
                "GetPlatformPolicy",
                "PutUserPolicy",
                "GetUserPolicy",
            ],
        ),
        (
            "toolplane.v1.RuntimeService",
            &[
                "CreateRun",
                "StartRun",
                "GetRun",
                "ListRuns",
                "CancelRun",
                "WatchRun",
                "OpenInvocation",
                "ExecuteToolCalls",
                "CloseInvocation",
                "GetInvocation",
                "ListInvocations",
                "GetSnapshot",
                "ListApprovals",
                "DecideApproval",
                "AnswerQuestion",
                "CollectToolResults",
            ],
        ),
        (
            "toolplane.v1.WorkspaceService",
            &[
                "CreateRunWorkspace",
                "GetRunWorkspace",
                "OpenInvocationWorkspace",
                "CloseInvocationWorkspace",
                "PutAuditObject",
                "GetObject",
                "ListObjects",
                "ReadFile",
                "AppendJournal",
                "ReadJournal",
                "FollowJournal",
                "AppendChatMessage",
                "CommitRunMessage",
                "ListChatMessages",
                "ImportSkill",
                "ListSkills",
                "DeleteSkill",
                "PutWorldInfoActivation",
                "PromotePersist",
                "FinishRunWorkspace",
            ],
        ),
        (
            "toolplane.v1.McpProxyService",
            &[
                "UpsertServer",
                "DeregisterServer",
                "SetServerState",
                "SetToolPermission",
                "RefreshServer",
                "GetServer",
                "ListServers",
                "ListCachedTools",
            ],
        ),
        ("toolplane.v1.ToolExecutor", &["Execute"]),
        (
            "toolplane.v1.TokenService",
            &["CreateToken", "ListTokens", "RevokeToken"],
        ),
        ("toolplane.v1.AdminAuditService", &["ListAdminAudit"]),
    ];

    let actual = services(&decode(toolplane_proto::FILE_DESCRIPTOR_SET).unwrap());
    let names: BTreeSet<&str> = actual.keys().map(String::as_str).collect();
    let expected_names: BTreeSet<&str> = expected.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names, expected_names,
        "services in the production descriptor set"
    );
    for (service, rpcs) in expected {
        let methods = &actual[*service];
        for rpc in *rpcs {
            assert!(methods.contains(*rpc), "{service} lacks rpc {rpc}");
        }
    }
}

#[test]
fn testing_set_holds_only_the_echo_service() {
    let actual = services(&decode(toolplane_proto::testing::FILE_DESCRIPTOR_SET).unwrap());
    let expected = BTreeMap::from([(
        "toolplane.testing.v1.EchoService".to_owned(),
        BTreeSet::from(["Echo".to_owned()]),
    )]);
    assert_eq!(actual, expected);
}

#[test]
fn production_set_keeps_comments_and_no_struct_fields() {
    let set = decode(toolplane_proto::FILE_DESCRIPTOR_SET).unwrap();
    for file in &set.file {
        assert!(
            file.package().starts_with("toolplane.v1"),
            "unexpected file {}",
            file.name()
        );
        let comments = file.source_code_info.as_ref().map_or(0, |info| {
            info.location
                .iter()
                .filter(|l| l.leading_comments.is_some())
                .count()
        });
        assert!(comments > 0, "{} lost its comments", file.name());
        let mut messages: Vec<&prost_types::DescriptorProto> = file.message_type.iter().collect();
        while let Some(message) = messages.pop() {
            messages.extend(message.nested_type.iter());
            for field in &message.field {
                if field.r#type() == Type::Message {
                    assert!(
                        !field.type_name().starts_with(".google.protobuf."),
                        "{}.{} uses {}: JSON travels as *_json text fields",
                        message.name(),
                        field.name(),
                        field.type_name()
                    );
                }
            }
        }
    }
}

#[test]
fn generated_service_names_match_the_contract() {
    use toolplane_proto::testing::v1::echo_service_server::EchoServiceServer;
    use toolplane_proto::v1::catalog_service_server::CatalogServiceServer;
    use toolplane_proto::v1::tool_executor_server::ToolExecutorServer;

    assert_eq!(
        <ToolExecutorServer<()> as NamedService>::NAME,
        "toolplane.v1.ToolExecutor"
    );
    assert_eq!(
        <CatalogServiceServer<()> as NamedService>::NAME,
        "toolplane.v1.CatalogService"
    );
    assert_eq!(
        <EchoServiceServer<()> as NamedService>::NAME,
        "toolplane.testing.v1.EchoService"
    );
}

#[test]
fn reflection_accepts_both_sets() {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolplane_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("reflection accepts the production set");
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolplane_proto::testing::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("reflection accepts the testing set");
}
