//! `agent.list`: the agents an invocation may delegate or hand off to.

use serde_json::{Map, Value, json};
use toolplane_core::Profile;
use toolplane_core::error::{AGENT_NO_MODEL, AGENT_UNAVAILABLE, TOOL_INVALID_ARGUMENTS};
use toolplane_core::invocation::ToolInvocation;
use toolplane_core::result::AgentToolResult;

use super::{Purpose, check_target, refused, string_arg};
use crate::context::Runtime;
use crate::error::RuntimeError;
use crate::state::{Event, Invocation, InvocationInner};
use crate::tools::{Dispatched, Effect};

/// Most profiles `agent.list` looks at.
const MAX_LISTED_PROFILES: usize = 1000;

/// `agent.list`: the agents this invocation may delegate or hand off to.
pub async fn list(
    rt: &Runtime,
    inv: &Invocation,
    inner: &InvocationInner,
    call: &ToolInvocation,
    args: &Map<String, Value>,
) -> Result<Dispatched, RuntimeError> {
    let purpose = string_arg(args, "purpose");
    let purpose = if purpose.is_empty() { "any" } else { purpose };
    if !matches!(purpose, "any" | "delegate" | "handoff") {
        return Ok(refused(
            call,
            TOOL_INVALID_ARGUMENTS,
            "purpose is one of any, delegate, handoff",
        ));
    }
    let query = string_arg(args, "query").to_lowercase();
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(20)
        .clamp(1, 100) as usize;
    let caller = &inner.profile;
    let want_delegate = matches!(purpose, "any" | "delegate") && caller.delegation.can_delegate;
    let want_handoff = matches!(purpose, "any" | "handoff") && caller.delegation.can_handoff;
    if !want_delegate && !want_handoff {
        return Ok(refused(
            call,
            AGENT_UNAVAILABLE,
            format!(
                "this agent may not {} other agents",
                if purpose == "handoff" {
                    "hand off to"
                } else {
                    "delegate to"
                }
            ),
        ));
    }

    let profiles = read_profiles(rt, &inv.run.cell).await?;

    let (mut offered, unavailable) = offer(caller, profiles, &query, want_delegate, want_handoff);
    let total = offered.len();
    offered.truncate(limit);

    let (text, listed) = render(&offered, total);
    let mut events = Vec::new();
    if !unavailable.is_empty() {
        events.push(
            Event::new(
                "agent_target_unavailable",
                json!({"invocationId": inv.id, "callId": call.call_id, "targets": unavailable}),
            )
            .inv(&inv.id)
            .warn(),
        );
    }
    let mut d = Dispatched::known(
        AgentToolResult::ok(call, text)
            .with_structured(json!({"agents": listed, "total": total, "unavailable": unavailable})),
        Effect::None,
    );
    d.events = events;
    Ok(d)
}

/// The answer's text and the listed agents' structured form.
fn render(offered: &[(Profile, bool, bool)], total: usize) -> (String, Vec<Value>) {
    let mut text = if offered.is_empty() {
        "No agents are available to you for this purpose.".to_owned()
    } else {
        format!("{} agent(s) you can call:\n", offered.len())
    };
    let mut listed = Vec::new();
    for (p, delegate, handoff) in offered {
        let how: Vec<&str> = [(*delegate, "delegate"), (*handoff, "handoff")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
        text.push_str(&format!(
            "\n- `{}`{} ({}){}",
            p.id,
            p.name
                .as_deref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default(),
            how.join(", "),
            p.description
                .as_deref()
                .map(|d| format!(": {}", d.chars().take(300).collect::<String>()))
                .unwrap_or_default()
        ));
        listed.push(json!({"agentId": p.id, "name": p.name, "description": p.description, "delegate": delegate, "handoff": handoff}));
    }
    if total > offered.len() {
        text.push_str(&format!(
            "\n\n{} more match; narrow the query or raise the limit.",
            total - offered.len()
        ));
    }
    (text, listed)
}

/// The cell's stored profiles (their JSON documents), up to the most `agent.list` looks at.
async fn read_profiles(rt: &Runtime, cell: &str) -> Result<Vec<String>, RuntimeError> {
    let mut profiles = Vec::new();
    let mut token = String::new();
    loop {
        let page = rt
            .ports
            .catalog
            .list_profiles(cell, 500, &token)
            .await
            .map_err(|e| RuntimeError::dependency(format!("listing profiles: {}", e.message)))?;
        profiles.extend(page.profiles.into_iter().map(|p| p.profile_json));
        if page.next_page_token.is_empty() || profiles.len() >= MAX_LISTED_PROFILES {
            break;
        }
        token = page.next_page_token;
    }
    Ok(profiles)
}

/// The profiles the caller may call, and the ones it may not only because they have no model.
fn offer(
    caller: &Profile,
    profiles: Vec<String>,
    query: &str,
    want_delegate: bool,
    want_handoff: bool,
) -> (Vec<(Profile, bool, bool)>, Vec<Value>) {
    let mut offered = Vec::new();
    let mut unavailable = Vec::new();
    for json in profiles {
        let Ok(target) = Profile::from_json(&json) else {
            continue;
        };
        if target.id == caller.id {
            continue;
        }
        let text = format!(
            "{} {} {}",
            target.id,
            target.name.as_deref().unwrap_or(""),
            target.description.as_deref().unwrap_or("")
        )
        .to_lowercase();
        if !query.is_empty() && !text.contains(query) {
            continue;
        }
        let delegate = want_delegate && check_target(caller, &target, Purpose::Delegate).is_ok();
        let handoff = want_handoff && check_target(caller, &target, Purpose::Handoff).is_ok();
        if delegate || handoff {
            offered.push((target, delegate, handoff));
        } else if want_delegate
            && let Err((code, why)) = check_target(caller, &target, Purpose::Delegate)
            && code == AGENT_NO_MODEL
        {
            unavailable.push(json!({"agentId": target.id, "reason": why}));
        }
    }
    (offered, unavailable)
}
