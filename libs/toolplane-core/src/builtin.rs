//! toolplane's own tools, declared once, in code.
//!
//! Each builtin is a canonical `builtin:<name>` descriptor with a description written for the
//! calling model and a JSON Schema for its arguments. This module also says which service executes
//! each builtin and which ones the runtime treats specially (terminal tools, runtime-only tools,
//! tools a return-mode child loses). The catalog service publishes [`descriptors`]; the snapshot
//! compiler reads the classification.

use serde_json::{Value, json};

use crate::descriptor::{ToolAnnotations, ToolDescriptor};
use crate::id::ToolId;

pub const AGENT_LIST: &str = "agent.list";
pub const AGENT_DELEGATE: &str = "agent.delegate";
pub const AGENT_HANDOFF: &str = "agent.handoff";
pub const AGENT_AWAIT: &str = "agent.await";
pub const TASK_RETURN: &str = "task.return";
pub const CHAT_SEARCH: &str = "chat.search";
pub const CHAT_READ_MESSAGES: &str = "chat.read_messages";
pub const WORLDINFO_READ_ACTIVATED: &str = "worldinfo.read_activated";
pub const DICE_ROLL: &str = "dice.roll";
pub const ASK_USER: &str = "ask_user";
pub const SKILL_LIST: &str = "skill.list";
pub const SKILL_SEARCH: &str = "skill.search";
pub const SKILL_READ: &str = "skill.read";
pub const WORKSPACE_LIST_FILES: &str = "workspace.list_files";
pub const WORKSPACE_SEARCH_FILES: &str = "workspace.search_files";
pub const WORKSPACE_READ_FILE: &str = "workspace.read_file";
pub const WORKSPACE_WRITE_FILE: &str = "workspace.write_file";
pub const WORKSPACE_APPLY_PATCH: &str = "workspace.apply_patch";
pub const WORKSPACE_COMMIT: &str = "workspace.commit";
pub const WORKSPACE_FINISH: &str = "workspace.finish";
pub const TOOLS_SEARCH: &str = "tools.search";

/// Which service executes a builtin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinExecutor {
    /// The runtime itself: `agent.*`, `task.return`, `workspace.commit`, `workspace.finish`,
    /// `dice.roll`, `tools.search`, `ask_user`.
    RuntimeControl,
    /// The workspace service: the other `workspace.*`, `chat.*`, `skill.*`, `worldinfo.*`.
    Workspace,
}

/// The executor of a builtin native name; `None` for names that are not builtins.
pub fn executor_of(native: &str) -> Option<BuiltinExecutor> {
    match native {
        AGENT_LIST | AGENT_DELEGATE | AGENT_HANDOFF | AGENT_AWAIT | TASK_RETURN
        | WORKSPACE_COMMIT | WORKSPACE_FINISH | DICE_ROLL | TOOLS_SEARCH | ASK_USER => {
            Some(BuiltinExecutor::RuntimeControl)
        }
        CHAT_SEARCH
        | CHAT_READ_MESSAGES
        | WORLDINFO_READ_ACTIVATED
        | SKILL_LIST
        | SKILL_SEARCH
        | SKILL_READ
        | WORKSPACE_LIST_FILES
        | WORKSPACE_SEARCH_FILES
        | WORKSPACE_READ_FILE
        | WORKSPACE_WRITE_FILE
        | WORKSPACE_APPLY_PATCH => Some(BuiltinExecutor::Workspace),
        _ => None,
    }
}

/// Tools the runtime injects itself and no profile may allow: `task.return` into a return-mode
/// child, `tools.search` into an invocation whose profile turns tool search on.
pub fn is_runtime_only(id: &ToolId) -> bool {
    id.is_builtin(TASK_RETURN) || id.is_builtin(TOOLS_SEARCH)
}

/// Tools that end an invocation's tool work: they must be the last call of their turn.
pub fn is_terminal(id: &ToolId) -> bool {
    id.is_builtin(WORKSPACE_FINISH) || id.is_builtin(AGENT_HANDOFF) || id.is_builtin(TASK_RETURN)
}

/// Tools a return-mode child loses: chat commit, run finish and delegation control,
/// including sub-agents offered as tools (they delegate under the hood).
pub fn removed_for_return_child(id: &ToolId) -> bool {
    [
        WORKSPACE_COMMIT,
        WORKSPACE_FINISH,
        AGENT_DELEGATE,
        AGENT_HANDOFF,
        AGENT_AWAIT,
        AGENT_LIST,
    ]
    .iter()
    .any(|n| id.is_builtin(n))
        || matches!(id.provider(), crate::id::Provider::Agent(_))
}

/// Tools whose changed arguments mean progress, not a loop.
/// Delegating a different task each time is a fan-out, not a loop.
pub fn is_progress_aware(id: &ToolId) -> bool {
    id.is_builtin(WORKSPACE_WRITE_FILE)
        || id.is_builtin(WORKSPACE_APPLY_PATCH)
        || id.is_builtin(AGENT_DELEGATE)
}

/// Every builtin descriptor, in the order the catalog lists them (built once per process).
fn all() -> &'static [ToolDescriptor] {
    static ALL: std::sync::OnceLock<Vec<ToolDescriptor>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| specs().into_iter().filter_map(|s| s.build()).collect())
}

/// Every builtin descriptor, in the order the catalog lists them.
pub fn descriptors() -> Vec<ToolDescriptor> {
    all().to_vec()
}

/// The descriptor of one builtin.
pub fn descriptor(native: &str) -> Option<&'static ToolDescriptor> {
    all().iter().find(|d| d.id().native() == native)
}

struct Spec {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    schema: Value,
    read_only: bool,
}

impl Spec {
    fn build(self) -> Option<ToolDescriptor> {
        // Builtin names and schemas are constants checked by `every_builtin_builds`; `None` would
        // only hide a tool, never misdescribe one.
        let id = ToolId::builtin(self.name).ok()?;
        let annotations = ToolAnnotations {
            read_only_hint: Some(self.read_only),
            destructive_hint: (!self.read_only).then_some(false),
            ..Default::default()
        };
        ToolDescriptor::new(id, self.description, self.schema)
            .ok()?
            .with_title(Some(self.title.to_owned()))
            .ok()
            .map(|d| d.with_annotations(annotations))
    }
}

fn lines() -> Value {
    json!({
        "start_line": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based. Omit to start at the top."},
        "line_count": {"type": "integer", "minimum": 1, "description": "How many lines to read. Omit to read to the end; long content comes back as a preview with the next start_line."}
    })
}

fn with_lines(mut props: Value) -> Value {
    if let (Some(obj), Value::Object(extra)) = (props.as_object_mut(), lines()) {
        obj.extend(extra);
    }
    props
}

fn specs() -> Vec<Spec> {
    vec![
        Spec {
            name: WORKSPACE_LIST_FILES,
            title: "List workspace files",
            description: "List the files you can see in this run's workspace. Pass a folder such as \"output/\" to list only that folder. Tool results too long to show in full are kept under tool-results/.",
            schema: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Folder or path prefix to list, e.g. \"output/\". Omit to list everything visible."}
            }, "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: WORKSPACE_SEARCH_FILES,
            title: "Search workspace files",
            description: "Search the text files of your workspace for words or a literal fragment. Returns matching files with line ranges, snippets and refs like workspace:output/notes.md#L3-L5; open a hit with workspace_read_file. Finding nothing is a normal answer, not an error.",
            schema: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Words or a literal fragment to look for."},
                "path": {"type": "string", "description": "Only search under this folder or file."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Most results to return (default 20)."},
                "context_lines": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Lines of context around each hit (default 1)."}
            }, "required": ["query"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: WORKSPACE_READ_FILE,
            title: "Read a workspace file",
            description: "Read a UTF-8 text file from your workspace, whole or as a 1-based line window. Read a file before you rewrite or patch it. A long file comes back as a preview that tells you the start_line to continue from.",
            schema: json!({"type": "object", "properties": with_lines(json!({
                "path": {"type": "string", "description": "Workspace path, e.g. \"output/main.md\"."}
            })), "required": ["path"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: WORKSPACE_WRITE_FILE,
            title: "Write a workspace file",
            description: "Create or replace a text file in a writable workspace folder, or add to its end with mode \"append\" (nothing is inserted between the old and new text: start content with a newline if you want one). Read an existing file before you replace it; if it changed since you read it, read it again and retry.",
            schema: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Workspace path to write, e.g. \"output/main.md\"."},
                "content": {"type": "string", "description": "The full new text (replace) or the text to add at the end (append)."},
                "mode": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) or append."}
            }, "required": ["path", "content"], "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: WORKSPACE_APPLY_PATCH,
            title: "Patch a workspace file",
            description: "Replace an exact piece of text in one workspace file. Copy old_string from what you read in this run, with enough surrounding text that it occurs exactly once; replace_all changes every occurrence and needs a full read of the file first. If a patch fails after you read only part of the file, read the whole file before you patch it again.",
            schema: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Workspace path of the file to change."},
                "old_string": {"type": "string", "description": "The exact text to replace, copied from what you read."},
                "new_string": {"type": "string", "description": "The text to put in its place."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
            }, "required": ["path", "old_string", "new_string"], "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: WORKSPACE_COMMIT,
            title: "Commit to the chat",
            description: "Publish a workspace file as your answer in the chat. Without arguments it publishes output/main.md and replaces the message; mode \"append\" adds to the message instead. You can commit again after more edits. When everything is done, call workspace_finish.",
            schema: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File to publish (default \"output/main.md\")."},
                "mode": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) or append."}
            }, "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: WORKSPACE_FINISH,
            title: "Finish the run",
            description: "End your work in this run. Commit your answer with workspace_commit first: finishing without a commit is refused when someone is waiting for the answer. Make this the last tool call of your turn, and call it rather than ending with a plain-text reply.",
            schema: json!({"type": "object", "properties": {
                "summary": {"type": "string", "description": "One or two sentences on what you did (optional)."}
            }, "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: CHAT_SEARCH,
            title: "Search this chat",
            description: "Search the messages of the chat this run belongs to. Returns message indexes, roles, scores, snippets and refs like chat:current#12; read a whole message with chat_read_messages. Finding nothing is a normal answer, not an error.",
            schema: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Words or a literal fragment to look for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most results (default 10)."},
                "role": {"type": "string", "enum": ["user", "assistant", "system"], "description": "Only messages of this role."},
                "start_message": {"type": "integer", "minimum": 0, "description": "First message index to search (0-based)."},
                "end_message": {"type": "integer", "minimum": 0, "description": "Last message index to search."},
                "scan_limit": {"type": "integer", "minimum": 1, "description": "Most messages to scan, newest first."}
            }, "required": ["query"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: CHAT_READ_MESSAGES,
            title: "Read chat messages",
            description: "Read up to 20 messages of this chat by 0-based index, whole or as 1-based line windows. A long message comes back as a preview that tells you the start_line to continue from.",
            schema: json!({"type": "object", "properties": {
                "messages": {"type": "array", "minItems": 1, "maxItems": 20, "items": {"type": "object", "properties": with_lines(json!({
                    "index": {"type": "integer", "minimum": 0, "description": "Message index, 0-based."}
                })), "required": ["index"], "additionalProperties": false}}
            }, "required": ["messages"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: WORLDINFO_READ_ACTIVATED,
            title: "Read activated world info",
            description: "Read the world-info entries activated for this run. Call it without arguments for an index of the entries and their refs, then pass entries with those refs to read their text.",
            schema: json!({"type": "object", "properties": {
                "entries": {"type": "array", "maxItems": 20, "items": {"type": "object", "properties": with_lines(json!({
                    "ref": {"type": "string", "description": "An entry ref from the index."}
                })), "required": ["ref"], "additionalProperties": false}}
            }, "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: DICE_ROLL,
            title: "Roll dice",
            description: "Roll dice in common notation: \"d6\", \"1d20\", \"3d6+4\", \"2d10-1\". Returns each die and the total.",
            schema: json!({"type": "object", "properties": {
                "notation": {"type": "string", "description": "Dice notation, e.g. \"3d6+4\"."}
            }, "required": ["notation"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: ASK_USER,
            title: "Ask the user",
            description: "Ask the person you work for a question and wait for the answer. Offer choices when the answer is one of a few options. Use it only when you cannot go on without them.",
            schema: json!({"type": "object", "properties": {
                "question": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "The question, complete enough to answer without context."},
                "choices": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 200}, "description": "Answers to pick from, if the answer is one of a few."}
            }, "required": ["question"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: SKILL_LIST,
            title: "List skills",
            description: "List the skills available to you, with their names and one-line summaries. Read a skill's instructions with skill_read.",
            schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: SKILL_SEARCH,
            title: "Search a skill",
            description: "Search the text files of one skill for words or a literal fragment. Returns snippets and refs, not whole files; snippets count against your skill reading budget.",
            schema: json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "Skill name from skill_list."},
                "query": {"type": "string", "description": "Words or a literal fragment to look for."},
                "path": {"type": "string", "description": "Only search under this path inside the skill."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most results (default 10)."},
                "context_lines": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Lines of context around each hit (default 1)."}
            }, "required": ["name", "query"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: SKILL_READ,
            title: "Read a skill file",
            description: "Read a text file of a skill, SKILL.md by default, whole or as a 1-based line window. Skills are read-only: to keep or change something, write it into your workspace.",
            schema: json!({"type": "object", "properties": with_lines(json!({
                "name": {"type": "string", "description": "Skill name from skill_list."},
                "path": {"type": "string", "description": "Path inside the skill (default \"SKILL.md\")."}
            })), "required": ["name"], "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: AGENT_LIST,
            title: "List agents",
            description: "List the agents you can delegate tasks to or hand the run off to, with what each one is for. Use it to find the agentId for agent_delegate or agent_handoff.",
            schema: json!({"type": "object", "properties": {
                "purpose": {"type": "string", "enum": ["any", "delegate", "handoff"], "description": "Which agents to list (default any)."},
                "query": {"type": "string", "description": "Only agents whose name or description matches."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Most agents to list (default 20)."}
            }, "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: AGENT_DELEGATE,
            title: "Delegate a task",
            description: "Start another agent on a task in the background while you keep working. Write a self-contained brief: the goal, the workspace paths that matter, and the artifact you expect back. Its result reaches you when it finishes; call agent_await if you need to wait for it.",
            schema: json!({"type": "object", "properties": {
                "agentId": {"type": "string", "description": "Agent id from agent_list."},
                "task": {"type": "string", "description": "The task brief."}
            }, "required": ["agentId", "task"], "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: AGENT_AWAIT,
            title: "Wait for delegated tasks",
            description: "Wait for tasks you delegated and read their results. Omit taskIds to wait for all of your unfinished tasks. Results of finished tasks also reach you on their own, so call this only when you need to wait.",
            schema: json!({"type": "object", "properties": {
                "taskIds": {"type": "array", "items": {"type": "string"}, "maxItems": 64, "description": "Task ids returned by agent_delegate."}
            }, "additionalProperties": false}),
            read_only: true,
        },
        Spec {
            name: AGENT_HANDOFF,
            title: "Hand off the run",
            description: "Hand the rest of this run to another agent. Give a brief with the objective, the workspace paths that matter, context, constraints and what counts as done. Wait for your delegated tasks to finish first. You stop after this call, so make it the last one of your turn.",
            schema: json!({"type": "object", "properties": {
                "agentId": {"type": "string", "description": "Agent id from agent_list."},
                "brief": {"type": "string", "description": "The handoff brief."}
            }, "required": ["agentId", "brief"], "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: TASK_RETURN,
            title: "Return your result",
            description: "Return the result of the task you were given and end your work. Put the answer in summary and list the workspace files you produced in artifacts; if you could not do the task, say why and set status to \"failed\". Make this the last tool call of your turn.",
            schema: json!({"type": "object", "properties": {
                "summary": {"type": "string", "description": "The result, in Markdown."},
                "artifacts": {"type": "array", "items": {"type": "string"}, "maxItems": 50, "description": "Workspace paths you produced."},
                "status": {"type": "string", "enum": ["completed", "failed"], "description": "completed (default) or failed."}
            }, "required": ["summary"], "additionalProperties": false}),
            read_only: false,
        },
        Spec {
            name: TOOLS_SEARCH,
            title: "Find more tools",
            description: "Search the tools you may use but have not been shown yet. Describe the task in a few words; the best matches are listed with what they do, and you can call them from your next turn on.",
            schema: json!({"type": "object", "properties": {
                "query": {"type": "string", "maxLength": 1024, "description": "What you want to do, e.g. \"open an issue on GitHub\"."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Most tools to return (default 5)."}
            }, "required": ["query"], "additionalProperties": false}),
            read_only: true,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_builds_and_has_an_executor() {
        let specs = specs();
        let descriptors = descriptors();
        assert_eq!(
            descriptors.len(),
            specs.len(),
            "every spec builds a valid descriptor"
        );
        assert_eq!(descriptors.len(), 21);
        for d in &descriptors {
            assert!(executor_of(d.id().native()).is_some(), "{}", d.id());
            assert!(d.title().is_some());
        }
    }

    /// Descriptions are product text for the calling model: short, and every other tool they
    /// point the model to is named by the alias it will actually see (`workspace_read_file`),
    /// never by a canonical id or a name that does not exist.
    #[test]
    fn descriptions_are_short_and_name_real_tools() {
        let names: Vec<&str> = specs().iter().map(|s| s.name).collect();
        for d in descriptors() {
            let text = d.description();
            assert!(text.len() <= 400, "{} is {} bytes", d.id(), text.len());
            assert!(
                !text.contains("builtin:"),
                "{} names a canonical id",
                d.id()
            );
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')) {
                let word = word.trim_end_matches('.');
                for family in [
                    "workspace",
                    "chat",
                    "skill",
                    "agent",
                    "task",
                    "worldinfo",
                    "dice",
                    "tools",
                ] {
                    if let Some(rest) = word.strip_prefix(&format!("{family}_")) {
                        let name = format!("{family}.{rest}");
                        assert!(
                            names.contains(&name.as_str()),
                            "{} mentions `{word}`, which is no builtin's alias",
                            d.id()
                        );
                    }
                    assert!(
                        !word.starts_with(&format!("{family}.")),
                        "{} names `{word}` by its canonical name instead of its alias",
                        d.id()
                    );
                }
            }
        }
    }

    #[test]
    fn classification() {
        let id = |n: &str| ToolId::builtin(n).unwrap();
        assert!(is_runtime_only(&id(TASK_RETURN)) && is_runtime_only(&id(TOOLS_SEARCH)));
        assert!(!is_runtime_only(&id(WORKSPACE_FINISH)));
        assert!(is_terminal(&id(AGENT_HANDOFF)) && is_terminal(&id(WORKSPACE_FINISH)));
        assert!(removed_for_return_child(&id(WORKSPACE_COMMIT)));
        assert!(removed_for_return_child(
            &ToolId::parse("agent/x:run").unwrap()
        ));
        assert!(!removed_for_return_child(&id(WORKSPACE_WRITE_FILE)));
    }
}
