//! Tool categories: exploration or action, resolved by a four-level fallback.
//!
//! 1. the built-in map of toolplane's own tools (reading, searching and
//!    listing are exploration; writing, patching and delegating are action);
//! 2. the consumer's extra categories (a profile's `extraCategories`);
//! 3. the descriptor's `readOnlyHint` annotation (`true` → exploration);
//! 4. action.
//!
//! Planning is exploration; in toolplane a plan is a file under `plan/`, so a write or patch whose
//! `path` is under `plan/` is exploration when arguments are known.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::descriptor::ToolAnnotations;
use crate::id::ToolId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Read-only exploration: reading, searching, listing, planning.
    Exploration,
    /// Anything with side effects (the default).
    Action,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Exploration => "exploration",
            Category::Action => "action",
        }
    }

    pub fn parse(s: &str) -> Option<Category> {
        match s {
            "exploration" => Some(Category::Exploration),
            "action" => Some(Category::Action),
            _ => None,
        }
    }
}

/// Level 1: toolplane's own tools.
pub fn builtin_category(id: &ToolId) -> Option<Category> {
    if !matches!(id.provider(), crate::id::Provider::Builtin) {
        return None;
    }
    use Category::{Action, Exploration};
    Some(match id.native() {
        "workspace.read_file" | "workspace.search_files" | "workspace.list_files" => Exploration,
        "chat.search" | "chat.read_messages" | "skill.list" | "skill.search" | "skill.read" => {
            Exploration
        }
        "worldinfo.read_activated" | "agent.list" | "agent.await" | "dice.roll" => Exploration,
        "workspace.write_file"
        | "workspace.apply_patch"
        | "workspace.commit"
        | "workspace.finish" => Action,
        "agent.delegate" | "agent.handoff" | "task.return" => Action,
        _ => return None,
    })
}

/// Resolves a tool's category through the four levels.
pub fn resolve(
    id: &ToolId,
    annotations: &ToolAnnotations,
    extra: &BTreeMap<ToolId, Category>,
) -> Category {
    builtin_category(id)
        .or_else(|| extra.get(id).copied())
        .or_else(|| (annotations.read_only_hint == Some(true)).then_some(Category::Exploration))
        .unwrap_or(Category::Action)
}

/// The category of one call: like [`resolve`], except that a write or patch under `plan/` counts as
/// exploration (writing a plan is planning, not acting).
pub fn resolve_call(
    id: &ToolId,
    annotations: &ToolAnnotations,
    extra: &BTreeMap<ToolId, Category>,
    arguments: Option<&Value>,
) -> Category {
    let writes_plan = (id.is_builtin("workspace.write_file")
        || id.is_builtin("workspace.apply_patch"))
        && arguments
            .and_then(|a| a.get("path"))
            .and_then(Value::as_str)
            .is_some_and(|p| p.starts_with("plan/"));
    if writes_plan {
        Category::Exploration
    } else {
        resolve(id, annotations, extra)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn id(s: &str) -> ToolId {
        ToolId::parse(s).unwrap()
    }

    #[test]
    fn four_level_fallback() {
        let ro = ToolAnnotations {
            read_only_hint: Some(true),
            ..Default::default()
        };
        let none = ToolAnnotations::default();
        let mut extra = BTreeMap::new();
        extra.insert(id("ext/h:grep"), Category::Exploration);
        extra.insert(id("builtin:workspace.read_file"), Category::Action);
        extra.insert(id("ext/h:ro_but_action"), Category::Action);

        // Level 1 beats level 2.
        assert_eq!(
            resolve(&id("builtin:workspace.read_file"), &none, &extra),
            Category::Exploration
        );
        assert_eq!(
            resolve(&id("builtin:workspace.write_file"), &ro, &extra),
            Category::Action
        );
        // Level 2 beats level 3.
        assert_eq!(
            resolve(&id("ext/h:grep"), &none, &extra),
            Category::Exploration
        );
        assert_eq!(
            resolve(&id("ext/h:ro_but_action"), &ro, &extra),
            Category::Action
        );
        // Level 3.
        assert_eq!(
            resolve(&id("ext/h:lookup"), &ro, &extra),
            Category::Exploration
        );
        // Level 4.
        assert_eq!(
            resolve(&id("ext/h:lookup"), &none, &extra),
            Category::Action
        );
    }

    #[test]
    fn writes_under_plan_are_exploration() {
        let none = ToolAnnotations::default();
        let extra = BTreeMap::new();
        let w = id("builtin:workspace.write_file");
        assert_eq!(
            resolve_call(&w, &none, &extra, Some(&json!({"path": "plan/steps.md"}))),
            Category::Exploration
        );
        assert_eq!(
            resolve_call(&w, &none, &extra, Some(&json!({"path": "output/main.md"}))),
            Category::Action
        );
        assert_eq!(resolve_call(&w, &none, &extra, None), Category::Action);
    }
}
