//! Approvals and questions on the wire: the stored [`Approval`] as `toolplane.v1.Approval` with
//! its card, and the states a list filters on.

use serde_json::Value;
use toolplane_proto::v1 as pb;

use crate::state::{Approval, ApprovalKind, ApprovalState};

pub fn state_pb(s: ApprovalState) -> i32 {
    (match s {
        ApprovalState::Pending => pb::ApprovalState::Pending,
        ApprovalState::Approved => pb::ApprovalState::Approved,
        ApprovalState::Denied => pb::ApprovalState::Denied,
        ApprovalState::Expired => pb::ApprovalState::Expired,
    }) as i32
}

/// The state a list asks for; `None` for every state.
pub fn state_filter(v: i32) -> Option<ApprovalState> {
    match pb::ApprovalState::try_from(v).unwrap_or(pb::ApprovalState::Unspecified) {
        pb::ApprovalState::Unspecified => None,
        pb::ApprovalState::Pending => Some(ApprovalState::Pending),
        pb::ApprovalState::Approved => Some(ApprovalState::Approved),
        pb::ApprovalState::Denied => Some(ApprovalState::Denied),
        pb::ApprovalState::Expired => Some(ApprovalState::Expired),
    }
}

pub fn approval_pb(a: &Approval) -> pb::Approval {
    let c = &a.card;
    let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let hint = |k: &str| {
        c.get("hints")
            .and_then(|h| h.get(k))
            .and_then(Value::as_bool)
    };
    pb::Approval {
        approval_id: a.id.clone(),
        cell_id: a.cell_id.clone(),
        run_id: a.run_id.clone(),
        invocation_id: a.invocation_id.clone(),
        round: a.round,
        call_id: a.call_id.clone(),
        alias: a.alias.clone(),
        tool_id: a.tool_id.clone(),
        kind: (match a.kind {
            ApprovalKind::ToolCall => pb::ApprovalKind::ToolCall,
            ApprovalKind::Question => pb::ApprovalKind::Question,
        }) as i32,
        state: state_pb(a.state),
        card: Some(pb::ApprovalCard {
            tool_title: text("toolTitle"),
            tool_source: text("toolSource"),
            arguments_summary_json: c.get("arguments").map(Value::to_string).unwrap_or_default(),
            read_only_hint: hint("readOnly"),
            destructive_hint: hint("destructive"),
            idempotent_hint: hint("idempotent"),
            open_world_hint: hint("openWorld"),
            rule: text("rule"),
            question: text("question"),
            choices: c
                .get("choices")
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }),
        decided_by: a.decided_by.clone(),
        reason: a.reason.clone(),
        answer: a.answer.clone(),
        created_unix_ms: a.created_ms,
        decided_unix_ms: a.decided_ms,
        expires_unix_ms: a.expires_ms,
        remember_for_run: a.remember_for_run,
    }
}
