//! `skill.list`, `skill.search` and `skill.read`. Owns visibility (deny over
//! visible, `*` for all) and the per-call and per-run read budgets, which search snippets count
//! against too; must never return more skill text than the budgets allow.

use serde_json::json;
use toolplane_text::{
    Matcher, WindowRequest, char_len, hunks, line_count, normalize_query, truncate_chars, window,
};

use super::{Call, ToolOutput, args::Args};
use crate::{error::WsError, runs::Runs, skills::SkillPackage};

fn not_found(name: &str) -> WsError {
    WsError::tool(
        "skill.not_found",
        format!("no skill named {name:?} is available to you; use skill_list"),
    )
}

async fn visible_skill(call: &Call<'_>, name: &str) -> Result<SkillPackage, WsError> {
    if !call.invocation.record().skills.can_see(name) {
        return Err(not_found(name));
    }
    call.ws
        .skills()
        .get(&call.ctx.cell, name)
        .await?
        .ok_or_else(|| not_found(name))
}

/// Characters still allowed for this call: the per-call limit and what is left of the run's.
fn remaining(call: &Call<'_>) -> Result<usize, WsError> {
    let access = call.invocation.record().skills;
    let used = call
        .run
        .skill_chars_used
        .load(std::sync::atomic::Ordering::Acquire);
    let left = u64::from(access.max_read_chars_per_run).saturating_sub(used);
    if left == 0 {
        return Err(WsError::tool(
            "skill.budget_exhausted",
            format!(
                "this run has used its skill reading budget of {} characters",
                access.max_read_chars_per_run
            ),
        ));
    }
    Ok((access.max_read_chars_per_call as usize).min(left as usize))
}

fn clean_path(raw: &str) -> Result<String, WsError> {
    let bad = raw.is_empty()
        || raw.starts_with('/')
        || raw.contains('\\')
        || raw.contains('\0')
        || raw
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(WsError::tool(
            "skill.invalid_path",
            format!("{raw:?} is not a relative path inside the skill"),
        ));
    }
    Ok(raw.to_owned())
}

pub async fn list(call: &Call<'_>, _args: Args) -> Result<ToolOutput, WsError> {
    let access = call.invocation.record().skills;
    let skills: Vec<SkillPackage> = call
        .ws
        .skills()
        .list(&call.ctx.cell)
        .await?
        .into_iter()
        .filter(|s| access.can_see(&s.name))
        .collect();
    let content = if skills.is_empty() {
        "No skills are installed for you.".to_owned()
    } else {
        let mut c = format!("{} skills:", skills.len());
        for s in &skills {
            c.push_str(&format!(
                "\n- {}: {}",
                s.name,
                if s.description.is_empty() {
                    "(no description)"
                } else {
                    &s.description
                }
            ));
        }
        c
    };
    Ok(ToolOutput {
        content,
        structured: json!({"skills": skills.iter().map(|s| json!({"name": s.name, "description": s.description, "files": s.files.len(), "version": s.version})).collect::<Vec<_>>()}),
        refs: Vec::new(),
    })
}

// Long: the scan, its budget accounting and the answer text are one sequence over the same hits.
pub async fn search(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let name = args.required_str("name")?;
    let query = normalize_query(args.required_str("query")?)
        .map_err(|e| WsError::tool("skill.invalid_query", e.to_string()))?;
    let limit = args.u64("limit").unwrap_or(10).clamp(1, 50) as usize;
    let context = args.u64("context_lines").unwrap_or(1).min(10);
    let skill = visible_skill(call, name).await?;
    let scope = args.str("path").map(clean_path).transpose()?;
    if let Some(scope) = &scope
        && !skill
            .files
            .keys()
            .any(|p| p == scope || p.starts_with(&format!("{}/", scope.trim_end_matches('/'))))
    {
        return Err(WsError::tool(
            "skill.file_not_found",
            format!("skill {name} has no text file or folder {scope}"),
        ));
    }
    let mut budget = remaining(call)?;
    let matcher = Matcher::new(query);
    let mut hits = Vec::new();
    for (path, text) in &skill.files {
        if let Some(scope) = &scope
            && !(path == scope || path.starts_with(&format!("{}/", scope.trim_end_matches('/'))))
        {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for hunk in hunks(
            &matcher.line_hits(text),
            context,
            line_count(text),
            matcher.query().terms.len(),
        ) {
            let snippet: String = (hunk.start_line..=hunk.end_line)
                .map(|n| {
                    format!(
                        "L{n}: {}\n",
                        lines.get((n - 1) as usize).copied().unwrap_or("")
                    )
                })
                .collect();
            hits.push((path.clone(), hunk, snippet));
        }
    }
    let total = hits.len();
    hits.sort_by(|a, b| {
        b.1.score
            .total_cmp(&a.1.score)
            .then_with(|| a.0.cmp(&b.0))
            .then(a.1.start_line.cmp(&b.1.start_line))
    });
    hits.truncate(limit);
    let mut content = if total == 0 {
        format!("No matches in skill {name}.")
    } else {
        format!(
            "{total} matches in skill {name} (showing up to {}):",
            hits.len()
        )
    };
    let mut results = Vec::new();
    let mut used = 0usize;
    for (path, hunk, snippet) in &hits {
        let (snippet, _) = truncate_chars(snippet.trim_end(), 600.min(budget));
        if snippet.is_empty() {
            content.push_str(
                "\n\n[your skill reading budget is used up; the remaining matches are not shown]",
            );
            break;
        }
        let r = format!(
            "skill:{name}/{path}#L{}-L{}",
            hunk.start_line, hunk.end_line
        );
        content.push_str(&format!("\n\n## {r} (score {:.2})\n{snippet}", hunk.score));
        let n = char_len(snippet);
        budget -= n.min(budget);
        used += n;
        results.push(json!({"path": path, "startLine": hunk.start_line, "endLine": hunk.end_line, "score": hunk.score, "snippet": snippet, "ref": r}));
    }
    if !skill.skipped.is_empty() {
        content.push_str(&format!(
            "\n\n[{} binary files skipped]",
            skill.skipped.len()
        ));
    }
    Runs::skill_budget_use(&call.run, used as u64);
    Ok(ToolOutput {
        content,
        refs: results
            .iter()
            .filter_map(|r| r.get("ref").and_then(|v| v.as_str()).map(str::to_owned))
            .collect(),
        structured: json!({"results": results, "totalMatches": total, "skippedFiles": skill.skipped.len(), "charsCounted": used}),
    })
}

pub async fn read(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let name = args.required_str("name")?;
    let path = clean_path(args.str("path").unwrap_or("SKILL.md"))?;
    let skill = visible_skill(call, name).await?;
    let Some(text) = skill.files.get(&path) else {
        let why = if skill.skipped.contains(&path) {
            "it is not a text file"
        } else {
            "no such file"
        };
        return Err(WsError::tool(
            "skill.file_not_found",
            format!("skill {name} has no readable {path}: {why}"),
        ));
    };
    let budget = remaining(call)?;
    let w = window(
        text,
        WindowRequest {
            start_line: args.u64("start_line"),
            line_count: args.u64("line_count"),
            max_chars: budget,
            max_line_chars: call.ws.limits().max_line_chars,
        },
    )
    .map_err(|e| WsError::tool("skill.invalid_range", format!("{name}/{path}: {e}")))?;
    Runs::skill_budget_use(&call.run, char_len(&w.content) as u64);
    let mut content = w.content.clone();
    if let Some(next) = w.next_start_line {
        if !content.ends_with('\n') {
            content.push('\n');
        }
        content.push_str(&format!(
            "[showing lines {}-{} of {}; continue with start_line={next}]",
            w.start_line, w.end_line, w.total_lines
        ));
    }
    Ok(ToolOutput {
        content,
        structured: json!({"name": name, "path": path, "startLine": w.start_line, "endLine": w.end_line, "totalLines": w.total_lines, "nextStartLine": w.next_start_line, "version": skill.version}),
        refs: vec![format!(
            "skill:{name}/{path}#L{}-L{}",
            w.start_line, w.end_line
        )],
    })
}
