//! `workspace.read_file`, `write_file` and `apply_patch`: the IO of reads and writes under the
//! path's lock, around the decisions of the read-state rules ([`crate::read_state`]: full reads,
//! observed fragments, the check against the read version, append's rule, `replace_all` after a
//! full read, a failed patch from a partial read requiring a full read), and the answers the
//! model reads. Must never write outside a writable root or let a write to an existing file pass
//! without the read-state rules' consent.

use std::path::Path;

use serde_json::json;
use toolplane_text::{WindowRequest, check_text, line_count, window};

use super::{Call, ToolOutput, args::Args};
use crate::{
    engine::sha256_hex,
    error::WsError,
    paths::{self, Roots, WsPath},
    read_state::{self, Action},
    runs::Invocation,
    tree::{Read, Tree},
};

pub(super) fn not_found(path: &WsPath) -> WsError {
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

pub(super) fn roots_of(call: &Call<'_>) -> Roots {
    call.invocation.record().roots
}

pub(super) fn file_ref(path: &impl std::fmt::Display, start: u64, end: u64) -> String {
    if end >= start && end > 0 {
        format!("workspace:{path}#L{start}-L{end}")
    } else {
        format!("workspace:{path}")
    }
}

pub(super) fn run_base(call: &Call<'_>) -> std::path::PathBuf {
    call.ws.tree().run_dir(&call.ctx.cell, &call.ctx.run_id)
}

/// Reads a visible file's bytes (audit objects still in flight in the journal included).
async fn read_visible(call: &Call<'_>, path: &WsPath) -> Result<Read, WsError> {
    let key = (call.ctx.cell.clone(), call.ctx.run_id.clone());
    if let Some(bytes) = call.ws.log().object_bytes(&key, path.as_str()).await? {
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
    if longest_line(content.as_bytes()) > limits.max_write_line_bytes {
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
            "workspace.file_not_text",
            "content holds a NUL character; only text can be written",
        ));
    }
    Ok(())
}

/// The length in bytes of the longest `\n`-separated line of `text`.
fn longest_line(text: &[u8]) -> usize {
    text.split(|b| *b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

/// Refuses a file an append or a patch would leave with a line over the limit: each piece may be
/// within it while the line they make together is not.
fn check_result_lines(path: &WsPath, text: &[u8], max_line: usize) -> Result<(), WsError> {
    if longest_line(text) > max_line {
        return Err(WsError::tool(
            "workspace.limit_exceeded",
            format!(
                "{path} would have a line longer than {max_line} bytes; add line breaks to the new text"
            ),
        ));
    }
    Ok(())
}

/// The size limits a write or patch checks its result against.
#[derive(Debug, Clone, Copy)]
struct Caps {
    file_bytes: u64,
    line_bytes: usize,
}

impl Caps {
    fn of(call: &Call<'_>) -> Caps {
        let limits = call.ws.limits();
        Caps {
            file_bytes: limits.max_file_bytes,
            line_bytes: limits.max_write_line_bytes,
        }
    }
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

/// `write_file` under the path's lock: the read-state rules checked against the file as it is,
/// the new content written durably, the read-state updated.
fn write_locked(
    tree: &Tree,
    base: &Path,
    p: &WsPath,
    content: String,
    append: bool,
    invocation: &Invocation,
    caps: Caps,
) -> Result<Written, WsError> {
    let target = base.join(p.as_str());
    let _guard = tree.lock_path(&target);
    let current = match tree.read(base, p.as_str())? {
        Read::Dir => return Err(is_dir(p)),
        Read::Absent => None,
        Read::File(bytes) => Some(bytes),
    };
    let state = invocation.read_state(p.as_str());
    let previous = current.as_deref().map(sha256_hex);
    read_state::check_write(state.as_ref(), previous.as_deref(), append)
        .map_err(|refusal| refusal.to_error(p.as_str(), Action::Write))?;
    // The result's size is known before it is built: an append never allocates past the cap.
    let kept = match &current {
        Some(old) if append => old.len(),
        _ => 0,
    };
    let size = (kept as u64).saturating_add(content.len() as u64);
    if size > caps.file_bytes {
        return Err(too_large(p, size, caps.file_bytes));
    }
    let new_bytes: Vec<u8> = match &current {
        Some(old) if append => {
            let mut next = Vec::with_capacity(old.len() + content.len());
            next.extend_from_slice(old);
            next.extend_from_slice(content.as_bytes());
            next
        }
        _ => content.into_bytes(),
    };
    if let Some(old) = &current
        && append
    {
        check_text(old).map_err(|e| not_text(p, e))?;
        check_result_lines(p, &new_bytes, caps.line_bytes)?;
    }
    tree.write_durable(base, p.as_str(), &new_bytes)?;
    let version = sha256_hex(&new_bytes);
    if let Some(next) =
        read_state::after_write(state.as_ref(), previous.as_deref(), append, &version)
    {
        invocation.set_read_state(p.as_str(), next);
    }
    let lines = std::str::from_utf8(&new_bytes).map(line_count).unwrap_or(0);
    Ok(Written {
        created: current.is_none(),
        bytes: new_bytes.len(),
        lines,
        version,
    })
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
    let _fence = call
        .ws
        .runs()
        .fenced(&call.run, call.ctx.epoch, false)
        .await?;
    let base = run_base(call);
    let invocation = std::sync::Arc::clone(&call.invocation);
    let caps = Caps::of(call);
    let p = path.clone();
    let written = call
        .ws
        .blocking(move |tree| write_locked(tree, &base, &p, content, append, &invocation, caps))
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

/// What `apply_patch` replaces.
struct Edit {
    old: String,
    new: String,
    replace_all: bool,
}

/// `apply_patch` under the path's lock: the read-state rules checked against the file as it is
/// (a refusal may update the read-state), the patched text written durably, the read-state
/// updated.
fn patch_locked(
    tree: &Tree,
    base: &Path,
    p: &WsPath,
    edit: &Edit,
    invocation: &Invocation,
    caps: Caps,
) -> Result<Patched, WsError> {
    let (old, new, replace_all) = (edit.old.as_str(), edit.new.as_str(), edit.replace_all);
    let target = base.join(p.as_str());
    let _guard = tree.lock_path(&target);
    let bytes = match tree.read(base, p.as_str())? {
        Read::Dir => return Err(is_dir(p)),
        Read::Absent => return Err(not_found(p)),
        Read::File(bytes) => bytes,
    };
    let text = check_text(&bytes).map_err(|e| not_text(p, e))?.to_owned();
    let version = sha256_hex(&bytes);
    let state = invocation.read_state(p.as_str());
    let count = match read_state::check_patch(state.as_ref(), &version, &text, old, replace_all) {
        Ok(count) => count,
        Err(refused) => {
            if let Some(remember) = refused.remember {
                invocation.set_read_state(p.as_str(), remember);
            }
            return Err(refused.refusal.to_error(p.as_str(), Action::Patch));
        }
    };
    // The result's size is known before it is built: a replace-all of a short `old` by a long
    // `new` could otherwise allocate many times the limit before being refused.
    let replaced = if replace_all { count } else { 1 };
    let size = patched_size(text.len(), old.len(), new.len(), replaced);
    if size > caps.file_bytes {
        return Err(too_large(p, size, caps.file_bytes));
    }
    let first_at = text.find(old).unwrap_or(0);
    let first_line = text[..first_at].matches('\n').count() as u64 + 1;
    let next = if replace_all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    };
    check_result_lines(p, next.as_bytes(), caps.line_bytes)?;
    tree.write_durable(base, p.as_str(), next.as_bytes())?;
    let new_version = sha256_hex(next.as_bytes());
    // `check_patch` allowed the patch only with a read-state.
    if let Some(state) = &state {
        let next_state = read_state::after_patch(state, old, new, &new_version);
        invocation.set_read_state(p.as_str(), next_state);
    }
    let last_line = first_line + line_count(new).max(1) - 1;
    Ok(Patched {
        replacements: if replace_all { count } else { 1 },
        first_line,
        last_line,
        lines: line_count(&next),
        version: new_version,
    })
}

/// The size in bytes of `text` after `replaced` occurrences of `old` become `new`, saturating
/// rather than overflowing.
fn patched_size(text: usize, old: usize, new: usize, replaced: usize) -> u64 {
    let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    as_u64(text)
        .saturating_sub(as_u64(old).saturating_mul(as_u64(replaced)))
        .saturating_add(as_u64(new).saturating_mul(as_u64(replaced)))
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
    let _fence = call
        .ws
        .runs()
        .fenced(&call.run, call.ctx.epoch, false)
        .await?;
    let base = run_base(call);
    let invocation = std::sync::Arc::clone(&call.invocation);
    let caps = Caps::of(call);
    let p = path.clone();
    let edit = Edit {
        old,
        new,
        replace_all,
    };
    let patched = call
        .ws
        .blocking(move |tree| patch_locked(tree, &base, &p, &edit, &invocation, caps))
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

#[cfg(test)]
mod tests {
    use super::patched_size;

    #[test]
    fn a_patch_result_is_measured_before_it_is_built() {
        assert_eq!(
            patched_size(2_000, 1, 900 * 1024, 2_000),
            2_000 * 900 * 1024
        );
        assert_eq!(patched_size(10, 3, 1, 2), 6);
        assert_eq!(patched_size(5, 5, 0, 1), 0);
        assert_eq!(
            patched_size(usize::MAX, 1, usize::MAX, usize::MAX),
            u64::MAX
        );
    }
}
