//! `workspace.list_files`, `search_files`, `read_file`, `write_file` and `apply_patch` (seed 000
//! §7.2, FEATURES W2). Owns the read-state rules (full reads, observed fragments, CAS against the
//! read version, append's rule, `replace_all` after a full read, a failed patch from a partial
//! read requiring a full read) and the answers the model reads; must never write outside a
//! writable root or let a write to an existing file pass without a matching read-state.

use serde_json::json;
use toolplane_text::{Matcher, WindowRequest, check_text, line_count, normalize_query, window};

use super::{Call, ToolOutput, args::Args, search};
use crate::{
    engine::sha256_hex,
    error::WsError,
    paths::{self, Roots, WsPath},
    runs::FileRead,
    tree::Read,
};

fn not_found(path: &WsPath) -> WsError {
    WsError::tool(
        "workspace.file_not_found",
        format!("{path} does not exist; use workspace_list_files to see your files"),
    )
}

fn is_dir(path: &WsPath) -> WsError {
    WsError::tool(
        "workspace.path_is_directory",
        format!("{path} is a folder; use workspace_list_files to see its files"),
    )
}

fn not_text(path: &WsPath, why: impl std::fmt::Display) -> WsError {
    WsError::tool(
        "workspace.file_not_text",
        format!("{path} is not a UTF-8 text file ({why}); choose a text file"),
    )
}

fn too_large(path: &WsPath, size: u64, limit: u64) -> WsError {
    WsError::tool(
        "workspace.file_too_large",
        format!("{path} would be {size} bytes, over the limit of {limit} bytes"),
    )
}

fn roots_of(call: &Call<'_>) -> Roots {
    call.invocation.record().roots
}

fn file_ref(path: &impl std::fmt::Display, start: u64, end: u64) -> String {
    if end >= start && end > 0 {
        format!("workspace:{path}#L{start}-L{end}")
    } else {
        format!("workspace:{path}")
    }
}

fn run_base(call: &Call<'_>) -> std::path::PathBuf {
    call.ws.tree().run_dir(&call.ctx.cell, &call.ctx.run_id)
}

/// Reads a visible file's bytes (audit objects still in flight in the journal included).
async fn read_visible(call: &Call<'_>, path: &WsPath) -> Result<Read, WsError> {
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    if let Some(bytes) = call.ws.wal().object_bytes(&key, path.as_str()).await? {
        return Ok(Read::File(bytes.as_ref().clone()));
    }
    let base = run_base(call);
    let rel = path.as_str().to_owned();
    call.ws.blocking(move |tree| tree.read(&base, &rel)).await
}

pub async fn read_file(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let path = paths::parse(args.required_str("path")?, false)?;
    paths::require_visible(&roots_of(call), &path)?;
    call.ctx.guard.check(&path)?;
    let limits = call.ws.limits();
    let bytes = match read_visible(call, &path).await? {
        Read::Absent => return Err(not_found(&path)),
        Read::Dir => return Err(is_dir(&path)),
        Read::File(bytes) => bytes,
    };
    if bytes.len() as u64 > limits.max_file_bytes {
        return Err(too_large(&path, bytes.len() as u64, limits.max_file_bytes));
    }
    let text = check_text(&bytes).map_err(|e| not_text(&path, e))?;
    let version = sha256_hex(&bytes);
    let w = window(
        text,
        WindowRequest {
            start_line: args.u64("start_line"),
            line_count: args.u64("line_count"),
            max_chars: limits.max_read_chars,
            max_line_chars: limits.max_line_chars,
        },
    )
    .map_err(|e| WsError::tool("workspace.invalid_range", format!("{path}: {e}")))?;
    let full = w.start_line == 1 && w.end_line == w.total_lines && w.truncated_lines.is_empty();
    call.invocation
        .record_read(path.as_str(), &version, full, &w.content);
    let mut content = w.content.clone();
    let mut notes = Vec::new();
    for line in &w.truncated_lines {
        notes.push(format!(
            "line {line} is longer than {} characters and was cut",
            limits.max_line_chars
        ));
    }
    if w.total_lines == 0 {
        notes.push(format!("{path} is empty"));
    } else if !full || w.next_start_line.is_some() {
        let mut note = format!(
            "showing lines {}-{} of {}",
            w.start_line, w.end_line, w.total_lines
        );
        if let Some(next) = w
            .next_start_line
            .or((w.end_line < w.total_lines).then_some(w.end_line + 1))
        {
            note.push_str(&format!("; continue with start_line={next}"));
        }
        notes.push(note);
    }
    if !notes.is_empty() {
        if !content.is_empty() && !content.ends_with('\n') {
            content.push('\n');
        }
        content.push_str(&format!("[{}]", notes.join("; ")));
    }
    Ok(ToolOutput {
        content,
        structured: json!({
            "path": path.as_str(), "startLine": w.start_line, "endLine": w.end_line, "totalLines": w.total_lines,
            "nextStartLine": w.next_start_line, "truncatedLines": w.truncated_lines, "sha256": version, "fullRead": full,
        }),
        refs: vec![file_ref(&path, w.start_line, w.end_line)],
    })
}

fn check_write_limits(call: &Call<'_>, path: &WsPath, content: &str) -> Result<(), WsError> {
    let limits = call.ws.limits();
    if content.len() as u64 > limits.max_file_bytes {
        return Err(too_large(path, content.len() as u64, limits.max_file_bytes));
    }
    if content
        .split('\n')
        .any(|line| line.len() > limits.max_write_line_bytes)
    {
        return Err(WsError::tool(
            "workspace.limit_exceeded",
            format!(
                "a line of the content is longer than {} bytes; split it",
                limits.max_write_line_bytes
            ),
        ));
    }
    if content.contains('\0') {
        return Err(WsError::tool(
            "workspace.limit_exceeded",
            "content holds a NUL character; only text can be written",
        ));
    }
    Ok(())
}

struct Written {
    created: bool,
    bytes: usize,
    lines: u64,
    version: String,
}

/// Refuses a write to `summaries/<name>-result.md`, the name a returned task's summary is stored
/// under (`summaries/<child invocation>-result.md`), or below such a name. The names are reserved
/// whether or not the task has returned yet, so a model's file can neither block a child's
/// result nor be taken for one.
fn refuse_reserved(path: &WsPath) -> Result<(), WsError> {
    if let Some(ancestor) = paths::writable_audit_ancestor(path.as_str()) {
        return Err(WsError::tool(
            "workspace.path_not_writable",
            format!(
                "{ancestor} is kept for a returned task's result and cannot be a folder; write somewhere else"
            ),
        ));
    }
    if paths::is_writable_audit_path(path.as_str()) {
        return Err(WsError::tool(
            "workspace.path_not_writable",
            format!(
                "{path} is reserved: summaries/<name>-result.md is where a returned task's summary is kept; write to another name, such as summaries/<name>.md",
                path = path.as_str()
            ),
        ));
    }
    Ok(())
}

pub async fn write_file(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let path = paths::parse(args.required_str("path")?, false)?;
    let content = args.required_str("content")?.to_owned();
    let append = match args.str("mode") {
        None | Some("replace") => false,
        Some("append") => true,
        Some(other) => {
            return Err(WsError::tool(
                "tool.invalid_arguments",
                format!("mode must be replace or append, not {other:?}"),
            ));
        }
    };
    paths::require_writable(&roots_of(call), &path)?;
    call.ctx.guard.check(&path)?;
    refuse_reserved(&path)?;
    check_write_limits(call, &path, &content)?;
    call.ws
        .runs()
        .check_epoch(&call.run, call.ctx.epoch, false)
        .await?;
    let base = run_base(call);
    let invocation = std::sync::Arc::clone(&call.invocation);
    let max = call.ws.limits().max_file_bytes;
    let p = path.clone();
    let written = call
        .ws
        .blocking(move |tree| {
            let target = base.join(p.as_str());
            let _guard = tree.lock_path(&target);
            let current = match tree.read(&base, p.as_str())? {
                Read::Dir => return Err(is_dir(&p)),
                Read::Absent => None,
                Read::File(bytes) => Some(bytes),
            };
            let state = invocation.read_state(p.as_str());
            let new_bytes: Vec<u8> = match (&current, append) {
                (None, _) => content.into_bytes(),
                (Some(old), false) => {
                    let old_version = sha256_hex(old);
                    match &state {
                        None => return Err(WsError::tool("workspace.read_required", format!("{p} exists and you have not read it in this run; read it with workspace_read_file before replacing it"))),
                        Some(s) if s.version != old_version => return Err(WsError::tool("workspace.stale_file", format!("{p} changed since you last read or wrote it; read it again, then write"))),
                        Some(_) => content.into_bytes(),
                    }
                }
                (Some(old), true) => {
                    let mut next = old.clone();
                    next.extend_from_slice(content.as_bytes());
                    next
                }
            };
            if new_bytes.len() as u64 > max {
                return Err(too_large(&p, new_bytes.len() as u64, max));
            }
            if let Some(old) = &current
                && append
            {
                check_text(old).map_err(|e| not_text(&p, e))?;
            }
            tree.write_durable(&base, p.as_str(), &new_bytes)?;
            let version = sha256_hex(&new_bytes);
            // Append grants a full read-state only when the whole file is known: a new file, or
            // one fully read at the version the append extended.
            let grants_full = match (&current, append) {
                (None, _) | (Some(_), false) => true,
                (Some(old), true) => state.as_ref().is_some_and(|s| s.full && s.version == sha256_hex(old)),
            };
            if grants_full {
                invocation.set_read_state(p.as_str(), FileRead { version: version.clone(), full: true, fragments: Vec::new(), needs_full_read: false });
            }
            let lines = std::str::from_utf8(&new_bytes).map(line_count).unwrap_or(0);
            Ok(Written { created: current.is_none(), bytes: new_bytes.len(), lines, version })
        })
        .await?;
    let appended = args.required_str("content")?.len();
    let summary = match (written.created, append) {
        (true, _) => format!(
            "Created {path} ({} lines, {} bytes).",
            written.lines, written.bytes
        ),
        (false, false) => format!(
            "Replaced {path} ({} lines, {} bytes).",
            written.lines, written.bytes
        ),
        (false, true) => format!(
            "Appended {appended} bytes to {path} (now {} lines, {} bytes).",
            written.lines, written.bytes
        ),
    };
    Ok(ToolOutput {
        content: summary,
        structured: json!({"path": path.as_str(), "mode": if append {"append"} else {"replace"}, "created": written.created, "bytes": written.bytes, "lines": written.lines, "sha256": written.version}),
        refs: vec![file_ref(&path, 1, written.lines)],
    })
}

struct Patched {
    replacements: usize,
    first_line: u64,
    last_line: u64,
    lines: u64,
    version: String,
}

pub async fn apply_patch(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let path = paths::parse(args.required_str("path")?, false)?;
    let old = args.required_str("old_string")?.to_owned();
    let new = args.required_str("new_string")?.to_owned();
    let replace_all = args.bool("replace_all").unwrap_or(false);
    paths::require_writable(&roots_of(call), &path)?;
    call.ctx.guard.check(&path)?;
    refuse_reserved(&path)?;
    if old.is_empty() {
        return Err(WsError::tool(
            "workspace.patch_invalid",
            "old_string is empty; copy the exact text to replace from what you read",
        ));
    }
    if old == new {
        return Err(WsError::tool(
            "workspace.patch_invalid",
            "old_string and new_string are the same; nothing would change",
        ));
    }
    check_write_limits(call, &path, &new)?;
    call.ws
        .runs()
        .check_epoch(&call.run, call.ctx.epoch, false)
        .await?;
    let base = run_base(call);
    let invocation = std::sync::Arc::clone(&call.invocation);
    let max = call.ws.limits().max_file_bytes;
    let p = path.clone();
    let patched = call
        .ws
        .blocking(move |tree| {
            let target = base.join(p.as_str());
            let _guard = tree.lock_path(&target);
            let bytes = match tree.read(&base, p.as_str())? {
                Read::Dir => return Err(is_dir(&p)),
                Read::Absent => return Err(not_found(&p)),
                Read::File(bytes) => bytes,
            };
            let text = check_text(&bytes).map_err(|e| not_text(&p, e))?.to_owned();
            let version = sha256_hex(&bytes);
            let Some(mut state) = invocation.read_state(p.as_str()) else {
                return Err(WsError::tool("workspace.read_required", format!("read {p} with workspace_read_file before patching it")));
            };
            if state.version != version {
                return Err(WsError::tool("workspace.stale_file", format!("{p} changed since you last read or wrote it; read it again, then patch")));
            }
            if !state.full && (state.needs_full_read || replace_all) {
                let why = if replace_all { "replace_all may change places you have not read" } else { "an earlier patch based on a partial read failed" };
                return Err(WsError::tool("workspace.full_read_required", format!("{why}: read the whole of {p} (workspace_read_file without start_line/line_count) first")));
            }
            // A failure based on a partial read means the model's picture of the file is
            // uncertain: from now on it must read the whole file before patching again.
            let fail = |state: &mut FileRead, error: WsError| -> Result<Patched, WsError> {
                if !state.full {
                    state.needs_full_read = true;
                    invocation.set_read_state(p.as_str(), state.clone());
                }
                Err(error)
            };
            if !state.full && !state.fragments.iter().any(|f| f.contains(&old)) {
                return fail(&mut state, WsError::tool("workspace.patch_not_read", format!("old_string is not in the parts of {p} you have read; read the part you want to change")));
            }
            let count = text.matches(&old).count();
            if count == 0 {
                return fail(&mut state, WsError::tool("workspace.patch_no_match", format!("old_string does not occur in {p}; copy it exactly from what you read")));
            }
            if count > 1 && !replace_all {
                return fail(&mut state, WsError::tool("workspace.patch_ambiguous", format!("old_string occurs {count} times in {p}; include more surrounding text so it is unique, or set replace_all")));
            }
            let first_at = text.find(&old).unwrap_or(0);
            let first_line = text[..first_at].matches('\n').count() as u64 + 1;
            let next = if replace_all { text.replace(&old, &new) } else { text.replacen(&old, &new, 1) };
            if next.len() as u64 > max {
                return Err(too_large(&p, next.len() as u64, max));
            }
            tree.write_durable(&base, p.as_str(), next.as_bytes())?;
            let new_version = sha256_hex(next.as_bytes());
            let next_state = if state.full {
                FileRead { version: new_version.clone(), full: true, fragments: Vec::new(), needs_full_read: false }
            } else {
                FileRead {
                    version: new_version.clone(),
                    full: false,
                    fragments: state.fragments.iter().map(|f| if f.contains(&old) { f.replacen(&old, &new, 1) } else { f.clone() }).collect(),
                    needs_full_read: false,
                }
            };
            invocation.set_read_state(p.as_str(), next_state);
            let last_line = first_line + line_count(&new).max(1) - 1;
            Ok(Patched { replacements: if replace_all { count } else { 1 }, first_line, last_line, lines: line_count(&next), version: new_version })
        })
        .await?;
    let summary = if patched.replacements == 1 {
        format!(
            "Patched {path}: replaced 1 occurrence at line {} (now {} lines).",
            patched.first_line, patched.lines
        )
    } else {
        format!(
            "Patched {path}: replaced {} occurrences (now {} lines).",
            patched.replacements, patched.lines
        )
    };
    Ok(ToolOutput {
        content: summary,
        structured: json!({"path": path.as_str(), "replacements": patched.replacements, "startLine": patched.first_line, "endLine": patched.last_line, "lines": patched.lines, "sha256": patched.version}),
        refs: vec![file_ref(&path, patched.first_line, patched.last_line)],
    })
}

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
) -> Result<(Vec<String>, bool), WsError> {
    let base = run_base(call);
    let guard = call.ctx.guard.clone();
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    let mut logged: Vec<String> = Vec::new();
    for scope in &scopes {
        let below = format!("{scope}/");
        logged.extend(
            call.ws
                .wal()
                .objects_under(&key, scope)
                .await?
                .into_keys()
                .filter(|p| p == scope || p.starts_with(&below)),
        );
    }
    let (mut files, truncated) = call
        .ws
        .blocking(move |tree| {
            let mut out = Vec::new();
            let mut truncated = false;
            for scope in &scopes {
                match tree.probe(&base, scope)? {
                    crate::tree::Entry::File => out.push(scope.clone()),
                    crate::tree::Entry::Dir => {
                        let (found, cut) =
                            tree.list_files(&base, scope, max.saturating_sub(out.len()))?;
                        out.extend(found);
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
            Ok((out, truncated))
        })
        .await?;
    if files.len() > max {
        files.truncate(max);
        return Ok((files, true));
    }
    Ok((files, truncated))
}

pub async fn list_files(call: &Call<'_>, args: Args) -> Result<ToolOutput, WsError> {
    let raw = args.str("path");
    let named = raw.is_some_and(|r| !r.is_empty() && r != "/" && r != "." && r != "./");
    let scopes = scopes(call, raw)?;
    let max = call.ws.limits().max_list_entries;
    let (files, truncated) = files_under(call, scopes, max, named).await?;
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
    Ok(ToolOutput {
        content,
        structured: json!({"files": files, "truncated": truncated}),
        refs: Vec::new(),
    })
}

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
    let (files, list_truncated) = files_under(call, scopes, limits.max_search_files, named).await?;
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    let logged = call.ws.wal().objects_under(&key, "").await?;
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
