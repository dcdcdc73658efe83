//! `chat.search` and `chat.read_messages` over the run's own chat. Owns their
//! ranges and budgets; must never read a chat other than the one the run is bound to.

use serde_json::json;
use toolplane_text::{Matcher, WindowRequest, normalize_query, score_text, truncate_chars, window};

use super::{Call, ToolOutput, args::Args};
use crate::error::WsError;

async fn chat_of(call: &Call<'_>) -> Result<String, WsError> {
    Ok(call.run.record.lock().await.0.chat_id.clone())
}

// Long: the scan, the ranking and the answer text are one sequence over the same hits.
pub async fn search(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let query = normalize_query(args.required_str("query")?)
        .map_err(|e| WsError::tool("chat.invalid_query", e.to_string()))?;
    let limit = args.u64("limit").unwrap_or(10).clamp(1, 50) as usize;
    let role = args.str("role").map(str::to_owned);
    let chat = chat_of(call).await?;
    let (messages, _) = call.ws.chats().load(&call.ctx.cell, &chat).await?;
    let last = messages.len().saturating_sub(1) as u64;
    let start = args.u64("start_message").unwrap_or(0);
    let end = args.u64("end_message").unwrap_or(last).min(last);
    if start > end && !messages.is_empty() {
        return Err(WsError::tool(
            "chat.invalid_range",
            format!("start_message {start} is after end_message {end}"),
        ));
    }
    let scan_limit = args
        .u64("scan_limit")
        .map(|n| n as usize)
        .unwrap_or(usize::MAX);
    let matcher = Matcher::new(query);
    let mut hits: Vec<(u64, &str, f64, String)> = Vec::new();
    let mut scanned = 0usize;
    // Newest first, so a scan limit keeps the recent part of a long chat.
    for index in (start..=end).rev() {
        if messages.is_empty() || scanned >= scan_limit {
            break;
        }
        let Some(message) = messages.get(index as usize) else {
            continue;
        };
        if role.as_deref().is_some_and(|r| r != message.role) {
            continue;
        }
        scanned += 1;
        let score = score_text(&matcher, &message.content);
        if score > 0.0 {
            let line = matcher
                .line_hits(&message.content)
                .first()
                .map(|h| h.line)
                .unwrap_or(1);
            let text: String = message
                .content
                .lines()
                .skip((line - 1) as usize)
                .take(3)
                .collect::<Vec<_>>()
                .join("\n");
            let (snippet, cut) = truncate_chars(&text, 300);
            hits.push((
                index,
                message.role.as_str(),
                score,
                format!("{snippet}{}", if cut { "…" } else { "" }),
            ));
        }
    }
    let total = hits.len();
    hits.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.0.cmp(&a.0)));
    hits.truncate(limit);
    let mut content = if total == 0 {
        "No matching messages.".to_owned()
    } else {
        format!(
            "{total} matching messages (showing {}, best first):",
            hits.len()
        )
    };
    for (index, role, score, snippet) in &hits {
        content.push_str(&format!(
            "\n\n## chat:current#{index} ({role}, score {score:.2})\n{snippet}"
        ));
    }
    Ok(ToolOutput {
        content,
        structured: json!({"results": hits.iter().map(|(i, r, s, sn)| json!({"index": i, "role": r, "score": s, "snippet": sn, "ref": format!("chat:current#{i}")})).collect::<Vec<_>>(), "totalMatches": total, "scanned": scanned}),
        refs: hits
            .iter()
            .map(|(i, ..)| format!("chat:current#{i}"))
            .collect(),
    })
}

pub async fn read_messages(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let requests = args.array("messages").cloned().unwrap_or_default();
    let chat = chat_of(call).await?;
    let (messages, _) = call.ws.chats().load(&call.ctx.cell, &chat).await?;
    let mut budget = call.ws.limits().max_chat_read_chars;
    let mut content = String::new();
    let mut out = Vec::new();
    let mut refs = Vec::new();
    for request in &requests {
        let index = request.get("index").and_then(|v| v.as_u64()).unwrap_or(0);
        let Some(message) = messages.get(index as usize) else {
            return Err(WsError::tool(
                "chat.message_not_found",
                format!(
                    "message {index} does not exist; the chat has {} messages (0-{})",
                    messages.len(),
                    messages.len().saturating_sub(1)
                ),
            ));
        };
        let w = window(
            &message.content,
            WindowRequest {
                start_line: request.get("start_line").and_then(|v| v.as_u64()),
                line_count: request.get("line_count").and_then(|v| v.as_u64()),
                max_chars: budget.max(1),
                max_line_chars: call.ws.limits().max_line_chars,
            },
        )
        .map_err(|e| WsError::tool("chat.invalid_range", format!("message {index}: {e}")))?;
        budget = budget.saturating_sub(toolplane_text::char_len(&w.content));
        content.push_str(&format!(
            "## chat:current#{index} ({})\n{}",
            message.role, w.content
        ));
        if !w.content.ends_with('\n') {
            content.push('\n');
        }
        if let Some(next) = w.next_start_line {
            content.push_str(&format!(
                "[lines {}-{} of {}; continue with index={index}, start_line={next}]\n",
                w.start_line, w.end_line, w.total_lines
            ));
        }
        content.push('\n');
        refs.push(format!("chat:current#{index}"));
        out.push(json!({"index": index, "role": message.role, "messageId": message.message_id, "startLine": w.start_line, "endLine": w.end_line, "totalLines": w.total_lines, "nextStartLine": w.next_start_line}));
        if budget == 0 {
            content.push_str("[the 20,000-character limit of one call is reached; read the remaining messages in another call]\n");
            break;
        }
    }
    Ok(ToolOutput {
        content: content.trim_end().to_owned(),
        structured: json!({"messages": out}),
        refs,
    })
}
