//! Profiles and policies over real sockets: versioned writes, validation, warnings for tools that
//! do not exist yet, "what would this profile see" under the policy layers, sub-agent tools,
//! `ResolveProfile`, and the start-up directory of profile files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};
use toolplane_catalog::{CatalogConfig, StoreConfig};
use toolplane_proto::v1 as pb;

fn put(json: Value, expected: Option<u64>) -> pb::PutProfileRequest {
    pb::PutProfileRequest {
        profile_json: json.to_string(),
        expected_version: expected,
        ..Default::default()
    }
}

#[tokio::test]
async fn profiles_are_versioned_with_compare_and_swap() {
    let c = start().await;
    let mut p = profile_client(&c).await;
    let doc = json!({"id": "writer", "name": "Writer", "description": "Writes.", "tools": {"allow": ["builtin:workspace.*", "mcp:github/*", "ext/crm:lookup"]}});
    let answer = p
        .put_profile(put(doc.clone(), Some(0)))
        .await
        .unwrap()
        .into_inner();
    let stored = answer.profile.unwrap();
    assert_eq!(
        (stored.version, stored.display_name.as_str()),
        (1, "Writer")
    );
    assert_eq!(
        stored.profile_json,
        doc.to_string(),
        "stored exactly as written"
    );
    let warned: Vec<(&str, &str)> = answer
        .warnings
        .iter()
        .map(|w| (w.code.as_str(), w.subject.as_str()))
        .collect();
    assert_eq!(
        warned,
        [
            ("profile.selector_matches_nothing", "mcp:github/*"),
            ("profile.selector_matches_nothing", "ext/crm:lookup"),
            ("catalog.mcp_not_configured", ""),
        ],
        "tools that may appear later are warnings, not errors"
    );

    let err = p.put_profile(put(doc.clone(), Some(0))).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert!(
        err.message().starts_with("profile.version_conflict: "),
        "{}",
        err.message()
    );
    let v2 = p
        .put_profile(put(doc.clone(), Some(1)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v2.profile.unwrap().version, 2);
    let err = p.put_profile(put(doc.clone(), Some(1))).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted, "a stale version fails");
    let v3 = p
        .put_profile(put(doc.clone(), None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        v3.profile.unwrap().version,
        3,
        "unconditional writes still count up"
    );

    let dry = p
        .put_profile(pb::PutProfileRequest {
            validate_only: true,
            ..put(json!({"id": "dry", "tools": {"allow": []}}), None)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dry.profile.unwrap().version, 1);
    p.put_profile(put(
        json!({"id": "reader", "tools": {"allow": ["builtin:workspace.read_file"]}}),
        None,
    ))
    .await
    .unwrap();

    let got = p
        .get_profile(pb::GetProfileRequest {
            profile_id: "writer".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .profile
        .unwrap();
    assert_eq!(got.version, 3);
    let missing = p
        .get_profile(pb::GetProfileRequest {
            profile_id: "dry".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        missing.code(),
        tonic::Code::NotFound,
        "validate_only stores nothing"
    );

    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let page = p
            .list_profiles(pb::ListProfilesRequest {
                page_size: 1,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        listed.extend(page.profiles.into_iter().map(|p| p.profile_id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(listed, ["reader", "writer"]);

    let del = |v: Option<u64>| pb::DeleteProfileRequest {
        profile_id: "writer".into(),
        expected_version: v,
        ..Default::default()
    };
    assert_eq!(
        p.delete_profile(del(Some(2))).await.unwrap_err().code(),
        tonic::Code::Aborted
    );
    let deleted = p.delete_profile(del(Some(3))).await.unwrap().into_inner();
    assert_eq!(deleted.deleted_version, 3);
    let err = p.delete_profile(del(None)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().starts_with("profile.not_found: "));
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn invalid_profiles_are_refused_with_their_code() {
    let c = start().await;
    let mut p = profile_client(&c).await;
    let cases = [
        (
            json!({"id": "a", "tools": {"allow": []}, "colour": "red"}),
            "profile.invalid",
        ),
        (
            json!({"id": "a", "tools": {"allow": [], "maxCalls": 3}}),
            "profile.invalid",
        ),
        (json!({"id": "a"}), "profile.invalid"),
        (
            json!({"id": "a", "tools": {"allow": [], "maxRounds": 0}}),
            "profile.invalid_limit",
        ),
        (
            json!({"id": "a", "tools": {"allow": [], "maxCallsPerInvocation": 0}}),
            "profile.invalid_limit",
        ),
        (
            json!({"id": "a", "tools": {"allow": ["builtin:task.return"]}}),
            "profile.runtime_only_tool",
        ),
        (
            json!({"id": "a", "tools": {"allow": ["workspace.read_file"]}}),
            "profile.invalid_selector",
        ),
    ];
    for (doc, code) in cases {
        let err = p.put_profile(put(doc.clone(), None)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{doc}");
        assert!(
            err.message().starts_with(&format!("{code}: ")),
            "{doc}: {}",
            err.message()
        );
    }
    let err = p
        .put_profile(pb::PutProfileRequest {
            profile_id: "b".into(),
            ..put(json!({"id": "a", "tools": {"allow": []}}), None)
        })
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with("profile.invalid: "),
        "{}",
        err.message()
    );
    let listed = p
        .list_profiles(pb::ListProfilesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.profiles.is_empty(), "nothing refused was stored");
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_profile_listing_shows_what_the_profile_would_see_and_why_not() {
    let c = start().await;
    let mut cat = catalog_client(&c).await;
    let mut p = profile_client(&c).await;
    cat.register_tools(register(
        "crm",
        "http://127.0.0.1:7001",
        &["ext/crm:lookup", "ext/crm:update", "ext/crm:export"],
    ))
    .await
    .unwrap();
    let profile = json!({
        "id": "support",
        "tools": {
            "allow": ["ext/crm:*", "builtin:workspace.read_file", "builtin:dice.roll", "mcp:github/*", "ext/crm:gone"],
            "deny": ["ext/crm:update"],
            "maxCallsPerTool": 9,
            "overrides": {"builtin:workspace.read_file": {"description": "Read a case file.", "maxCalls": 3}}
        }
    });
    p.put_profile(put(profile, None)).await.unwrap();
    let platform = p
        .put_platform_policy(pb::PutPlatformPolicyRequest {
            policy_json: json!({"disabledTools": ["builtin:dice.roll"], "deny": ["mcp:nowhere/*"]})
                .to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(platform.policy.unwrap().version, 1);
    assert_eq!(platform.warnings[0].code, "policy.selector_matches_nothing");
    p.put_user_policy(pb::PutUserPolicyRequest {
        actor_id: "alice@example.com".into(),
        policy_json: json!({"deny": ["ext/crm:export"]}).to_string(),
        ..Default::default()
    })
    .await
    .unwrap();

    let view = |actor: &str| pb::ListToolsRequest {
        profile_id: "support".into(),
        actor_id: actor.into(),
        ..Default::default()
    };
    let (tools, first) = list_all(&mut cat, view("")).await;
    assert_eq!(
        ids(&tools),
        [
            "ext/crm:lookup",
            "ext/crm:export",
            "builtin:workspace.read_file"
        ],
        "advertisement order is allow order, a selector expanding in catalog order"
    );
    let read = &tools[2];
    assert_eq!(
        read.descriptor.as_ref().unwrap().description,
        "Read a case file."
    );
    let policy = read.policy.as_ref().unwrap();
    assert!(policy.visible && policy.callable && !policy.approval_required);
    assert_eq!(policy.max_calls, Some(3));
    assert_eq!(policy.reason, "allowed by `builtin:workspace.read_file`");
    assert_eq!(tools[0].policy.as_ref().unwrap().max_calls, Some(9));
    let omitted: Vec<(&str, &str, &str)> = first
        .omitted
        .iter()
        .map(|o| {
            (
                o.tool_id.as_str(),
                o.selector.as_str(),
                o.diagnostic.as_ref().unwrap().code.as_str(),
            )
        })
        .collect();
    assert_eq!(
        omitted,
        [
            ("ext/crm:update", "ext/crm:*", "policy.denied"),
            ("builtin:dice.roll", "builtin:dice.roll", "policy.denied"),
            ("ext/crm:gone", "ext/crm:gone", "catalog.tool_missing"),
            (
                "mcp:github/*",
                "mcp:github/*",
                "profile.selector_matches_nothing"
            ),
        ]
    );
    let dice = &first.omitted[1].diagnostic.as_ref().unwrap().message;
    assert!(dice.contains("disabled for this cell"), "{dice}");

    // The actor's user policy is the highest layer.
    let (tools, first) = list_all(&mut cat, view("alice@example.com")).await;
    assert_eq!(
        ids(&tools),
        ["ext/crm:lookup", "builtin:workspace.read_file"]
    );
    assert!(first.omitted.iter().any(|o| {
        o.tool_id == "ext/crm:export"
            && o.diagnostic
                .as_ref()
                .unwrap()
                .message
                .contains("user policy")
    }));

    // The same over HTTP.
    let (_, _, body) = http_get(&c, "/tools?profile=support&actor=alice%40example.com").await;
    let listed: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["policy"]["maxCalls"], 3);
    let (_, _, body) = http_get(&c, "/tools/omitted?profile=support").await;
    let omitted: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(omitted[0]["toolId"], "ext/crm:update");
    let (_, _, text) = http_get(&c, "/tools/descriptions?profile=support").await;
    assert!(
        text.contains("builtin:workspace.read_file — Read a workspace file\nRead a case file.\n"),
        "{text}"
    );

    let (status, _, _) = http_get(&c, "/tools?profile=nobody").await;
    assert_eq!(status, 404);
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn sub_agents_become_tools_and_resolve_hands_the_runtime_everything() {
    let c = start().await;
    let mut cat = catalog_client(&c).await;
    let mut p = profile_client(&c).await;
    cat.register_tools(register(
        "crm",
        "http://127.0.0.1:7001",
        &["ext/crm:lookup"],
    ))
    .await
    .unwrap();
    let researcher = json!({"id": "researcher", "name": "Researcher", "description": "Finds facts and cites them.", "tools": {"allow": ["builtin:workspace.*"]}, "delegation": {"callableAsTool": true}});
    p.put_profile(put(researcher.clone(), None)).await.unwrap();

    let unusable = |include: bool| pb::ListToolsRequest {
        sources: vec![pb::ToolSource::Agent as i32],
        include_unusable: include,
        ..Default::default()
    };
    let (tools, _) = list_all(&mut cat, unusable(false)).await;
    assert!(tools.is_empty(), "unusable tools leave the default listing");
    let (tools, _) = list_all(&mut cat, unusable(true)).await;
    assert_eq!(ids(&tools), ["agent/researcher:run"]);
    assert!(!tools[0].usable);
    assert_eq!(tools[0].diagnostics[0].code, "catalog.no_model_endpoint");

    let mut with_model = researcher;
    with_model["model"] =
        json!({"kind": "openai-compatible", "baseUrl": "http://127.0.0.1:8000/v1", "model": "m"});
    p.put_profile(put(with_model, None)).await.unwrap();
    let (tools, _) = list_all(&mut cat, unusable(false)).await;
    assert_eq!(ids(&tools), ["agent/researcher:run"]);
    let d = tools[0].descriptor.as_ref().unwrap();
    assert_eq!(d.title.as_deref(), Some("Researcher"));
    assert!(
        d.description
            .contains("About this agent: Finds facts and cites them.")
    );

    p.put_profile(put(json!({"id": "lead", "tools": {"allow": ["agent/researcher:run", "ext/crm:*", "builtin:dice.roll"]}}), None))
        .await
        .unwrap();
    p.put_platform_policy(pb::PutPlatformPolicyRequest {
        policy_json: json!({"disabledTools": ["builtin:dice.roll"]}).to_string(),
        ..Default::default()
    })
    .await
    .unwrap();
    p.put_user_policy(pb::PutUserPolicyRequest {
        actor_id: "bob".into(),
        policy_json: json!({"approvalRequired": ["ext/crm:*"]}).to_string(),
        ..Default::default()
    })
    .await
    .unwrap();
    let resolved = p
        .resolve_profile(pb::ResolveProfileRequest {
            profile_id: "lead".into(),
            actor_id: "bob".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resolved.profile.unwrap().profile_id, "lead");
    assert_eq!(resolved.platform_policy.unwrap().version, 1);
    let user = resolved.user_policy.unwrap();
    assert_eq!(user.version, 1);
    assert!(user.policy_json.contains("approvalRequired"));
    assert_eq!(
        ids(&resolved.tools),
        [
            "builtin:dice.roll",
            "ext/crm:lookup",
            "agent/researcher:run"
        ],
        "every tool an allow selector matches, in catalog order, policies not yet applied"
    );
    let crm = resolved.tools[1].external.as_ref().unwrap();
    let endpoint = crm.endpoint.as_ref().unwrap();
    assert_eq!(
        endpoint.headers["authorization"], "Bearer secret",
        "the runtime gets header values"
    );
    assert_eq!(endpoint.timeout_ms, 5000);

    let nobody = p
        .get_user_policy(pb::GetUserPolicyRequest {
            actor_id: "carol".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    assert_eq!((nobody.version, nobody.policy_json.as_str()), (0, "{}"));
    let err = p
        .put_platform_policy(pb::PutPlatformPolicyRequest {
            policy_json: json!({"disabled": []}).to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.message().starts_with("policy.invalid: "));
    let err = p
        .put_platform_policy(pb::PutPlatformPolicyRequest {
            policy_json: "{}".into(),
            expected_version: Some(7),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Aborted);
    assert!(err.message().starts_with("policy.version_conflict: "));
    c.shutdown().await.unwrap();
}

fn write(path: &Path, value: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

#[tokio::test]
async fn profile_files_load_at_start_and_api_edits_win_until_the_file_changes() {
    let store = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let config = || CatalogConfig {
        store: StoreConfig::Fs {
            root: store.path().to_owned(),
        },
        profiles_dir: Some(files.path().to_owned()),
        ..CatalogConfig::ephemeral()
    };
    let writer = json!({"id": "writer", "tools": {"allow": ["builtin:workspace.*"]}});
    write(&files.path().join("writer.json"), &writer);
    write(
        &files.path().join("team-a/helper.json"),
        &json!({"id": "helper", "tools": {"allow": []}}),
    );
    std::fs::write(files.path().join("README.txt"), "not a profile").unwrap();

    let get = |cell: &str, id: &str| pb::GetProfileRequest {
        cell_id: cell.into(),
        profile_id: id.into(),
    };
    let c = start_with(config()).await;
    let mut p = profile_client(&c).await;
    let w = p
        .get_profile(get("", "writer"))
        .await
        .unwrap()
        .into_inner()
        .profile
        .unwrap();
    assert_eq!(w.version, 1);
    let h = p
        .get_profile(get("team-a", "helper"))
        .await
        .unwrap()
        .into_inner()
        .profile
        .unwrap();
    assert_eq!(h.cell_id, "team-a");
    // An edit through the API.
    let edited = json!({"id": "writer", "tools": {"allow": ["builtin:workspace.read_file"]}});
    p.put_profile(put(edited.clone(), Some(1))).await.unwrap();
    c.shutdown().await.unwrap();

    // Unchanged file: the API edit stays.
    let c = start_with(config()).await;
    let mut p = profile_client(&c).await;
    let w = p
        .get_profile(get("", "writer"))
        .await
        .unwrap()
        .into_inner()
        .profile
        .unwrap();
    assert_eq!((w.version, w.profile_json), (2, edited.to_string()));
    c.shutdown().await.unwrap();

    // Changed file: the file wins.
    let changed = json!({"id": "writer", "description": "From the file.", "tools": {"allow": ["builtin:workspace.*"]}});
    write(&files.path().join("writer.json"), &changed);
    let c = start_with(config()).await;
    let mut p = profile_client(&c).await;
    let w = p
        .get_profile(get("", "writer"))
        .await
        .unwrap()
        .into_inner()
        .profile
        .unwrap();
    assert_eq!(w.version, 3);
    assert_eq!(w.description, "From the file.");
    c.shutdown().await.unwrap();

    // A broken file stops the start, naming the file.
    write(
        &files.path().join("broken.json"),
        &json!({"id": "broken", "tools": {"allow": []}, "oops": 1}),
    );
    let err = toolplane_catalog::start(config()).await.unwrap_err();
    assert_eq!(err.code(), "profile.file_invalid");
    assert!(err.to_string().contains("broken.json"), "{err}");
    std::fs::remove_file(files.path().join("broken.json")).unwrap();
    write(
        &files.path().join("misnamed.json"),
        &json!({"id": "other", "tools": {"allow": []}}),
    );
    let err = toolplane_catalog::start(config()).await.unwrap_err();
    assert!(
        err.to_string().contains("must be named `other.json`"),
        "{err}"
    );
}

#[tokio::test]
async fn the_shipped_default_profile_loads_and_sees_the_everyday_builtins() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let c = start_with(CatalogConfig {
        profiles_dir: Some(shipped),
        ..CatalogConfig::ephemeral()
    })
    .await;
    let mut cat = catalog_client(&c).await;
    let (tools, first) = list_all(
        &mut cat,
        pb::ListToolsRequest {
            profile_id: "default".into(),
            ..Default::default()
        },
    )
    .await;
    let ids = ids(&tools);
    assert_eq!(
        ids,
        [
            "builtin:workspace.list_files",
            "builtin:workspace.search_files",
            "builtin:workspace.read_file",
            "builtin:workspace.write_file",
            "builtin:workspace.apply_patch",
            "builtin:workspace.commit",
            "builtin:workspace.finish",
            "builtin:chat.search",
            "builtin:chat.read_messages",
            "builtin:skill.list",
            "builtin:skill.search",
            "builtin:skill.read",
            "builtin:worldinfo.read_activated",
        ]
    );
    assert!(first.omitted.is_empty(), "{:?}", first.omitted);
    c.shutdown().await.unwrap();
}
