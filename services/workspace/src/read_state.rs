//! The read-state rules (docs/workspace.md, "Read-state"): what an invocation must have read of a
//! file before it may replace or patch it, and what it knows of the file afterwards. Pure: given
//! the recorded read-state of a path and the file's current version (the SHA-256 of its bytes) it
//! decides; the tools do the IO, under the path's lock, around these decisions. Must never allow
//! a replace or a patch of an existing file unless the invocation read it at its current version,
//! nor turn a partial read into a full one.

use crate::error::WsError;

/// Most fragments kept per file; older ones are dropped (the model can read again).
pub const MAX_FRAGMENTS: usize = 64;

/// What an invocation knows about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// SHA-256 of the file when it was last read or written by this invocation.
    pub version: String,
    /// The whole file is known at `version`.
    pub full: bool,
    /// Text fragments read at `version` (partial reads).
    pub fragments: Vec<String>,
    /// A patch based on a partial read failed: the next patch needs a full read.
    pub needs_full_read: bool,
}

impl FileRead {
    /// The whole file known at `version`.
    pub fn full(version: &str) -> FileRead {
        FileRead {
            version: version.to_owned(),
            full: true,
            fragments: Vec::new(),
            needs_full_read: false,
        }
    }
}

/// The read-state after a read of the file at `version` that returned `fragment` (`full`: the
/// window covered the whole file with no line cut). A full read replaces everything; a partial
/// read adds a fragment (or starts over when the version changed, keeping `needs_full_read`) and
/// never downgrades a full read of the same version.
pub fn record_read(state: Option<FileRead>, version: &str, full: bool, fragment: &str) -> FileRead {
    let mut entry = match state {
        Some(s) if s.version == version => s,
        Some(s) => FileRead {
            version: version.to_owned(),
            full: false,
            fragments: Vec::new(),
            needs_full_read: s.needs_full_read,
        },
        None => FileRead {
            version: version.to_owned(),
            full: false,
            fragments: Vec::new(),
            needs_full_read: false,
        },
    };
    if full {
        entry.full = true;
        entry.fragments.clear();
        entry.needs_full_read = false;
    } else if !entry.full && !fragment.is_empty() {
        if entry.fragments.len() >= MAX_FRAGMENTS {
            entry.fragments.remove(0);
        }
        entry.fragments.push(fragment.to_owned());
    }
    entry
}

/// Why a write or a patch is refused by the read-state rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The file exists and the invocation has not read it.
    ReadRequired,
    /// The file changed since the invocation last read or wrote it.
    Stale,
    /// A patch needs a full read: `replace_all`, or an earlier patch from a partial read failed.
    FullReadRequired { replace_all: bool },
    /// `old_string` is in no fragment the invocation read (it did not read the whole file).
    NotRead,
    /// `old_string` does not occur in the file.
    NoMatch,
    /// `old_string` occurs this many times and `replace_all` is not set.
    Ambiguous(usize),
}

/// Which tool a refusal answers (the advice in its message differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Write,
    Patch,
}

impl Refusal {
    /// The stable error code.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::ReadRequired => "workspace.read_required",
            Refusal::Stale => "workspace.stale_file",
            Refusal::FullReadRequired { .. } => "workspace.full_read_required",
            Refusal::NotRead => "workspace.patch_not_read",
            Refusal::NoMatch => "workspace.patch_no_match",
            Refusal::Ambiguous(_) => "workspace.patch_ambiguous",
        }
    }

    /// The recoverable tool error the model reads.
    pub fn to_error(self, path: &str, action: Action) -> WsError {
        let p = path;
        let message = match (self, action) {
            (Refusal::ReadRequired, Action::Write) => format!(
                "{p} exists and you have not read it in this run; read it with workspace_read_file before replacing it"
            ),
            (Refusal::ReadRequired, Action::Patch) => {
                format!("read {p} with workspace_read_file before patching it")
            }
            (Refusal::Stale, Action::Write) => {
                format!("{p} changed since you last read or wrote it; read it again, then write")
            }
            (Refusal::Stale, Action::Patch) => {
                format!("{p} changed since you last read or wrote it; read it again, then patch")
            }
            (Refusal::FullReadRequired { replace_all }, _) => {
                let why = if replace_all {
                    "replace_all may change places you have not read"
                } else {
                    "an earlier patch based on a partial read failed"
                };
                format!(
                    "{why}: read the whole of {p} (workspace_read_file without start_line/line_count) first"
                )
            }
            (Refusal::NotRead, _) => format!(
                "old_string is not in the parts of {p} you have read; read the part you want to change"
            ),
            (Refusal::NoMatch, _) => {
                format!("old_string does not occur in {p}; copy it exactly from what you read")
            }
            (Refusal::Ambiguous(count), _) => format!(
                "old_string occurs {count} times in {p}; include more surrounding text so it is unique, or set replace_all"
            ),
        };
        WsError::tool(self.code(), message)
    }
}

/// Whether `write_file` may write a file whose current version is `current` (`None`: it does not
/// exist). Creating a file and appending need no read-state; replacing an existing file needs a
/// read-state at its current version.
pub fn check_write(
    state: Option<&FileRead>,
    current: Option<&str>,
    append: bool,
) -> Result<(), Refusal> {
    match (current, append) {
        (None, _) | (Some(_), true) => Ok(()),
        (Some(current), false) => match state {
            None => Err(Refusal::ReadRequired),
            Some(s) if s.version != current => Err(Refusal::Stale),
            Some(_) => Ok(()),
        },
    }
}

/// The read-state after `write_file` wrote `written` over a file that was at `previous` (`None`:
/// it did not exist), or `None` to leave it as it was. A new file and a replaced one are fully
/// known; an append grants a full read-state only when the whole file was known, at the version
/// it extended (otherwise unread text would become patchable).
pub fn after_write(
    state: Option<&FileRead>,
    previous: Option<&str>,
    append: bool,
    written: &str,
) -> Option<FileRead> {
    let grants_full = match (previous, append) {
        (None, _) | (Some(_), false) => true,
        (Some(previous), true) => state.is_some_and(|s| s.full && s.version == previous),
    };
    grants_full.then(|| FileRead::full(written))
}

/// A patch the rules refused, and the read-state to keep for the file afterwards (`None`: leave
/// it as it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRefused {
    pub refusal: Refusal,
    pub remember: Option<FileRead>,
}

/// Whether `apply_patch` may replace `old` in `text`, the file's content at version `current`;
/// returns how many times `old` occurs. The checks, in order: a read-state exists
/// (`ReadRequired`), at the current version (`Stale`); without a full read, neither
/// `replace_all` nor an earlier failed partial-read patch (`FullReadRequired`), and `old` inside
/// a fragment read (`NotRead`); `old` occurs (`NoMatch`), once unless `replace_all`
/// (`Ambiguous`). A failure of the last three based on a partial read makes the next patch of
/// the file need a full read: the model's picture of the file is uncertain.
pub fn check_patch(
    state: Option<&FileRead>,
    current: &str,
    text: &str,
    old: &str,
    replace_all: bool,
) -> Result<usize, PatchRefused> {
    let refuse = |refusal| PatchRefused {
        refusal,
        remember: None,
    };
    let Some(state) = state else {
        return Err(refuse(Refusal::ReadRequired));
    };
    if state.version != current {
        return Err(refuse(Refusal::Stale));
    }
    if !state.full && (state.needs_full_read || replace_all) {
        return Err(refuse(Refusal::FullReadRequired { replace_all }));
    }
    let fail = |refusal| PatchRefused {
        refusal,
        remember: (!state.full).then(|| FileRead {
            needs_full_read: true,
            ..state.clone()
        }),
    };
    if !state.full && !state.fragments.iter().any(|f| f.contains(old)) {
        return Err(fail(Refusal::NotRead));
    }
    let count = text.matches(old).count();
    if count == 0 {
        return Err(fail(Refusal::NoMatch));
    }
    if count > 1 && !replace_all {
        return Err(fail(Refusal::Ambiguous(count)));
    }
    Ok(count)
}

/// The read-state after a patch replaced `old` with `new`, making the file version `written`: a
/// full read stays full; otherwise the fragments that held `old` hold `new` instead (once each, as
/// the patch replaced one occurrence), and the failed-patch mark is cleared.
pub fn after_patch(state: &FileRead, old: &str, new: &str, written: &str) -> FileRead {
    if state.full {
        return FileRead::full(written);
    }
    FileRead {
        version: written.to_owned(),
        full: false,
        fragments: state
            .fragments
            .iter()
            .map(|f| {
                if f.contains(old) {
                    f.replacen(old, new, 1)
                } else {
                    f.clone()
                }
            })
            .collect(),
        needs_full_read: false,
    }
}

#[cfg(test)]
#[path = "read_state_tests.rs"]
mod tests;
