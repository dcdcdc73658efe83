//! `toolplane approvals ls`, `approve`, `deny` and `answer`: the calls held for a person and the
//! `ask_user` questions of the caller's cell, through the runtime's approval RPCs
//! (docs/approvals.md). Who decides is the credential's principal.

use serde_json::{Value, json};
use toolplane_proto::v1 as pb;

use super::run::runtime_client;
use crate::cli::{AnswerArgs, ApprovalsLsArgs, ApproveArgs, DenyArgs};
use crate::client::Endpoints;
use crate::error::CliError;
use crate::output::{Out, line, table};

fn state_arg(s: &str) -> Result<pb::ApprovalState, CliError> {
    Ok(match s {
        "all" => pb::ApprovalState::Unspecified,
        "pending" => pb::ApprovalState::Pending,
        "approved" => pb::ApprovalState::Approved,
        "denied" => pb::ApprovalState::Denied,
        "expired" => pb::ApprovalState::Expired,
        other => {
            return Err(CliError::InvalidInput(format!(
                "--state `{other}`: expected pending, approved, denied, expired or all"
            )));
        }
    })
}

fn state_name(v: i32) -> &'static str {
    match pb::ApprovalState::try_from(v).unwrap_or(pb::ApprovalState::Unspecified) {
        pb::ApprovalState::Pending => "pending",
        pb::ApprovalState::Approved => "approved",
        pb::ApprovalState::Denied => "denied",
        pb::ApprovalState::Expired => "expired",
        pb::ApprovalState::Unspecified => "unknown",
    }
}

/// An approval as JSON, for `--json`.
fn approval_json(a: &pb::Approval) -> Value {
    let card = a.card.clone().unwrap_or_default();
    let question = a.kind == pb::ApprovalKind::Question as i32;
    json!({
        "approvalId": a.approval_id, "runId": a.run_id, "invocationId": a.invocation_id,
        "callId": a.call_id, "alias": a.alias, "toolId": a.tool_id,
        "kind": if question { "question" } else { "tool_call" },
        "state": state_name(a.state),
        "card": {
            "toolTitle": card.tool_title, "toolSource": card.tool_source,
            "arguments": serde_json::from_str::<Value>(&card.arguments_summary_json).unwrap_or(Value::Null),
            "hints": {"readOnly": card.read_only_hint, "destructive": card.destructive_hint,
                      "idempotent": card.idempotent_hint, "openWorld": card.open_world_hint},
            "rule": card.rule, "question": card.question, "choices": card.choices,
        },
        "decidedBy": a.decided_by, "reason": a.reason, "answer": a.answer,
        "createdUnixMs": a.created_unix_ms, "decidedUnixMs": a.decided_unix_ms,
        "expiresUnixMs": a.expires_unix_ms, "rememberForRun": a.remember_for_run,
    })
}

/// What a person reads in a listing: the question, or the tool and its argument summary.
fn what(a: &pb::Approval) -> String {
    let card = a.card.clone().unwrap_or_default();
    if a.kind == pb::ApprovalKind::Question as i32 {
        let mut s = format!("asks: {}", card.question);
        if !card.choices.is_empty() {
            s.push_str(&format!(" [{}]", card.choices.join(" / ")));
        }
        return s;
    }
    let mut s = format!(
        "{} ({}) {}",
        card.tool_title, card.tool_source, card.arguments_summary_json
    );
    if card.destructive_hint == Some(true) {
        s.push_str(" — destructive");
    }
    s.push_str(&format!(" — asked by {}", card.rule));
    s
}

pub async fn ls(args: ApprovalsLsArgs, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let state = state_arg(&args.state)?;
    let conn = eps.connect("runtime", &eps.runtime).await?;
    let mut rt = runtime_client(&conn);
    let mut approvals = Vec::new();
    let mut page_token = String::new();
    loop {
        let r = rt
            .list_approvals(pb::ListApprovalsRequest {
                run_id: args.run.clone().unwrap_or_default(),
                state: state as i32,
                page_size: 1000,
                page_token,
            })
            .await
            .map_err(|s| conn.err(s))?
            .into_inner();
        approvals.extend(r.approvals);
        if r.next_page_token.is_empty() {
            break;
        }
        page_token = r.next_page_token;
    }
    if out.json {
        return out.json(&Value::Array(approvals.iter().map(approval_json).collect()));
    }
    if approvals.is_empty() {
        return line("no approvals");
    }
    let rows: Vec<Vec<String>> = approvals
        .iter()
        .map(|a| {
            vec![
                a.approval_id.clone(),
                state_name(a.state).to_owned(),
                a.run_id.clone(),
                a.alias.clone(),
                what(a),
            ]
        })
        .collect();
    line(&table(&["ID", "STATE", "RUN", "TOOL", "WHAT"], &rows))
}

/// Prints a decided approval.
fn decided(out: Out, a: Option<pb::Approval>) -> Result<(), CliError> {
    let a = a.unwrap_or_default();
    if out.json {
        return out.json(&approval_json(&a));
    }
    line(&format!(
        "{} {} ({} in run {})",
        a.approval_id,
        state_name(a.state),
        a.alias,
        a.run_id
    ))
}

pub async fn approve(args: ApproveArgs, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let conn = eps.connect("runtime", &eps.runtime).await?;
    let r = runtime_client(&conn)
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: args.id,
            approve: true,
            reason: args.reason,
            remember_for_run: args.remember,
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    decided(out, r.approval)
}

pub async fn deny(args: DenyArgs, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let conn = eps.connect("runtime", &eps.runtime).await?;
    let r = runtime_client(&conn)
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: args.id,
            approve: false,
            reason: args.reason,
            remember_for_run: false,
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    decided(out, r.approval)
}

pub async fn answer(args: AnswerArgs, eps: &Endpoints, out: Out) -> Result<(), CliError> {
    let conn = eps.connect("runtime", &eps.runtime).await?;
    let r = runtime_client(&conn)
        .answer_question(pb::AnswerQuestionRequest {
            approval_id: args.id,
            answer: args.text,
        })
        .await
        .map_err(|s| conn.err(s))?
        .into_inner();
    decided(out, r.approval)
}
