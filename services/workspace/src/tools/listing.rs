//! `workspace.list_files` and `workspace.search_files`: which folders a call covers, the visible
//! files under them (the journal log's audit objects included) and the answers the model reads;
//! the scan itself is [`super::search`]. Must never list or search a path outside the visible
//! roots or the call's path guard.

use serde_json::{Value, json};
use toolplane_text::{Matcher, normalize_query};

use super::{
    Call, ToolOutput,
    args::Args,
    files::{file_ref, not_found, roots_of, run_base},
    search,
};
use crate::tree::Skipped;
use crate::{error::WsError, paths};

/// The folders a list or search covers: the given path (which must be visible), or every visible
/// root.
fn scopes(call: &Call<'_>, raw: Option<&str>) -> Result<Vec<String>, WsError> {
    let roots = roots_of(call);
    match raw {
        None | Some("") | Some("/") | Some(".") | Some("./") => Ok(roots.visible_roots()),
        Some(raw) => {
            let path = paths::parse(raw, true)?;
            paths::require_visible(&roots, &path)?;
            call.ctx.guard.check(&path)?;
            Ok(vec![path.as_str().to_owned()])
        }
    }
}

/// Lists the visible files under the scopes (the log's audit objects included); errors when a
/// named scope does not exist.
async fn files_under(
    call: &Call<'_>,
    scopes: Vec<String>,
    max: usize,
    named: bool,
) -> Result<(Vec<String>, bool, Vec<Skipped>), WsError> {
    let base = run_base(call);
    let guard = call.ctx.guard.clone();
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    let mut logged: Vec<String> = Vec::new();
    for scope in &scopes {
        let below = format!("{scope}/");
        logged.extend(
            call.ws
                .log()
                .objects_under(&key, scope)
                .await?
                .into_keys()
                .filter(|p| p == scope || p.starts_with(&below)),
        );
    }
    let (mut files, truncated, skipped) = call
        .ws
        .blocking(move |tree| {
            let mut out = Vec::new();
            let mut truncated = false;
            let mut skipped = Vec::new();
            for scope in &scopes {
                match tree.probe(&base, scope)? {
                    crate::tree::Entry::File => out.push(scope.clone()),
                    crate::tree::Entry::Dir => {
                        let (found, cut, passed_over) =
                            tree.list_files_skipping(&base, scope, max.saturating_sub(out.len()))?;
                        out.extend(found);
                        skipped.extend(passed_over);
                        truncated |= cut;
                    }
                    _ if named => {
                        let path = paths::parse(scope, true)?;
                        if !logged
                            .iter()
                            .any(|p| p == scope || p.starts_with(&format!("{scope}/")))
                        {
                            return Err(not_found(&path));
                        }
                    }
                    _ => {}
                }
            }
            // Duplicates go with the sort and dedup below.
            out.extend(logged);
            out.retain(|f| {
                paths::parse(f, false)
                    .map(|p| guard.check(&p).is_ok())
                    .unwrap_or(false)
            });
            out.sort();
            out.dedup();
            Ok((out, truncated, skipped))
        })
        .await?;
    if files.len() > max {
        files.truncate(max);
        return Ok((files, true, skipped));
    }
    Ok((files, truncated, skipped))
}

/// The answer's note and structured list of entries a listing or search passed over.
fn skipped_report(skipped: &[Skipped]) -> (String, Value) {
    let list: Vec<Value> = skipped
        .iter()
        .map(|s| json!({"path": s.path, "reason": s.reason}))
        .collect();
    let note = if skipped.is_empty() {
        String::new()
    } else {
        let shown: Vec<String> = skipped
            .iter()
            .take(20)
            .map(|s| format!("{} ({})", s.path, s.reason))
            .collect();
        format!(
            "\n[skipped {} entries that are not regular files: {}{}]",
            skipped.len(),
            shown.join(", "),
            if skipped.len() > 20 { ", …" } else { "" }
        )
    };
    (note, Value::Array(list))
}

pub async fn list_files(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let raw = args.str("path");
    let named = raw.is_some_and(|r| !r.is_empty() && r != "/" && r != "." && r != "./");
    let scopes = scopes(call, raw)?;
    let max = call.ws.limits().max_list_entries;
    let (files, truncated, skipped) = files_under(call, scopes, max, named).await?;
    let (skipped_note, skipped) = skipped_report(&skipped);
    let mut content = if files.is_empty() {
        "No files yet.".to_owned()
    } else {
        format!("{} files:\n{}", files.len(), files.join("\n"))
    };
    if truncated {
        content.push_str(&format!(
            "\n[listing stopped at {max} files; pass a folder path to list one folder]"
        ));
    }
    content.push_str(&skipped_note);
    Ok(ToolOutput {
        content,
        structured: json!({"files": files, "truncated": truncated, "skipped": skipped}),
        refs: Vec::new(),
    })
}

// Long: the scan's options, its outcome's ranking and the answer text with its notes, in order.
pub async fn search_files(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let query = normalize_query(args.required_str("query")?)
        .map_err(|e| WsError::tool("workspace.invalid_query", e.to_string()))?;
    let limit = args
        .u64("limit")
        .unwrap_or(20)
        .clamp(1, call.ws.limits().max_search_hits as u64) as usize;
    let context = args.u64("context_lines").unwrap_or(1).min(10);
    let raw = args.str("path");
    let named = raw.is_some_and(|r| !r.is_empty() && r != "/" && r != "." && r != "./");
    let scopes = scopes(call, raw)?;
    let limits = call.ws.limits().clone();
    let (files, list_truncated, _skipped) =
        files_under(call, scopes, limits.max_search_files, named).await?;
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    let logged = call.ws.log().objects_under(&key, "").await?;
    let base = run_base(call);
    let matcher = Matcher::new(query);
    let outcome = call
        .ws
        .blocking(move |tree| {
            let budget = search::ThreadBudget::acquire();
            let options = search::ScanOptions {
                context,
                max_file_bytes: limits.max_file_bytes,
                max_search_bytes: limits.max_search_bytes,
                max_snippet_chars: limits.max_snippet_chars,
                threads: budget.threads(),
            };
            search::scan(tree, &base, &files, &logged, &matcher, &options)
        })
        .await?;
    let search::ScanOutcome {
        mut hits,
        scanned,
        binary,
        large,
        stopped,
    } = outcome;
    let total = hits.len();
    let files_with_hits = {
        let mut p: Vec<&str> = hits.iter().map(|h| h.path.as_str()).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    };
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.path.cmp(&b.path))
            .then(a.start.cmp(&b.start))
    });
    hits.truncate(limit);
    let mut content = if total == 0 {
        "No matches.".to_owned()
    } else {
        format!(
            "{total} matches in {files_with_hits} files (showing {}, best first):",
            hits.len()
        )
    };
    for hit in &hits {
        content.push_str(&format!(
            "\n\n## {} (score {:.2})\n{}",
            &file_ref(&WsPathLike(&hit.path), hit.start, hit.end)["workspace:".len()..],
            hit.score,
            hit.snippet
        ));
    }
    let mut notes = Vec::new();
    if binary > 0 {
        notes.push(format!("{binary} non-text files skipped"));
    }
    if large > 0 {
        notes.push(format!("{large} files over the size limit skipped"));
    }
    if stopped || list_truncated {
        notes.push("the search stopped at its limit; narrow it with path".to_owned());
    }
    if !notes.is_empty() {
        content.push_str(&format!("\n\n[{}]", notes.join("; ")));
    }
    let refs: Vec<String> = hits
        .iter()
        .map(|h| file_ref(&WsPathLike(&h.path), h.start, h.end))
        .collect();
    Ok(ToolOutput {
        content,
        structured: json!({
            "results": hits.iter().map(|h| json!({"path": h.path, "score": h.score, "startLine": h.start, "endLine": h.end, "snippet": h.snippet, "ref": file_ref(&WsPathLike(&h.path), h.start, h.end), "sha256": h.sha256})).collect::<Vec<_>>(),
            "totalMatches": total, "filesScanned": scanned, "skippedBinary": binary, "skippedLarge": large, "truncated": stopped || list_truncated,
        }),
        refs,
    })
}

/// A listed path (already validated by the tree walk) displayed like a `WsPath`.
struct WsPathLike<'a>(&'a str);

impl std::fmt::Display for WsPathLike<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}
