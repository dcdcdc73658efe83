//! Limits on every input of the workspace service. Owns the numbers and their defaults; must never
//! be bypassed: every tool and RPC checks its inputs against these before doing any IO.

use serde::{Deserialize, Serialize};

/// Limits, configurable per deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest workspace file that is read, written or produced by a patch (bytes).
    pub max_file_bytes: u64,
    /// Most characters one read window returns (workspace, skill, world info).
    pub max_read_chars: usize,
    /// Longest line (characters) returned whole by a read; longer lines are cut and marked.
    pub max_line_chars: usize,
    /// Longest line (bytes) a write or patch may produce.
    pub max_write_line_bytes: usize,
    /// Most entries `workspace.list_files` returns.
    pub max_list_entries: usize,
    /// Most files one search scans before it stops (and says so).
    pub max_search_files: usize,
    /// Most bytes one search reads before it stops (and says so).
    pub max_search_bytes: u64,
    /// Most results a search returns.
    pub max_search_hits: usize,
    /// Most characters of one search snippet.
    pub max_snippet_chars: usize,
    /// Largest arguments JSON of one tool call (bytes).
    pub max_arguments_bytes: usize,
    /// Largest audit object or model response (bytes).
    pub max_audit_bytes: usize,
    /// Most characters `chat.read_messages` returns in all.
    pub max_chat_read_chars: usize,
    /// Largest chat message (bytes).
    pub max_chat_message_bytes: usize,
    /// Most messages one chat may hold.
    pub max_chat_messages: usize,
    /// Largest journal append (bytes over all its records).
    pub max_journal_append_bytes: usize,
    /// Most files of one skill package.
    pub max_skill_files: usize,
    /// Largest total size of one skill package's text files (bytes).
    pub max_skill_bytes: u64,
    /// Largest world-info activation document (bytes).
    pub max_worldinfo_bytes: usize,
    /// Size after which the journal log starts a new segment and checkpoints the closed one into
    /// run trees and journal files (bytes). Bounds the log on disk and the records kept in memory.
    pub journal_segment_bytes: u64,
    /// A journal segment holding at least 1/16 of `journal_segment_bytes` that sees no append for
    /// this long (milliseconds) is closed and checkpointed, and the next one made ready; 0 never
    /// closes a segment for quiet.
    pub journal_idle_close_ms: u64,
    /// Directories `ImportSkill` may read a skill folder from (compared after symlinks and `..`
    /// are resolved); unset, any path (the laptop posture). The workspace binary listening beyond
    /// loopback reads none unless this is set (docs/egress.md, "Host paths").
    pub skill_import_roots: Option<Vec<std::path::PathBuf>>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_file_bytes: 8 * 1024 * 1024,
            max_read_chars: 50_000,
            max_line_chars: 4_000,
            max_write_line_bytes: 1024 * 1024,
            max_list_entries: 1_000,
            max_search_files: 50_000,
            max_search_bytes: 512 * 1024 * 1024,
            max_search_hits: 100,
            max_snippet_chars: 1_500,
            max_arguments_bytes: 16 * 1024 * 1024,
            max_audit_bytes: 32 * 1024 * 1024,
            max_chat_read_chars: 20_000,
            max_chat_message_bytes: 1024 * 1024,
            max_chat_messages: 100_000,
            max_journal_append_bytes: 8 * 1024 * 1024,
            max_skill_files: 1_000,
            max_skill_bytes: 16 * 1024 * 1024,
            max_worldinfo_bytes: 8 * 1024 * 1024,
            journal_segment_bytes: 16 * 1024 * 1024,
            journal_idle_close_ms: 2_000,
            skill_import_roots: None,
        }
    }
}
