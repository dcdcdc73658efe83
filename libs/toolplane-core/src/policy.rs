//! Policy resolution across layers.
//!
//! Inputs: the user (actor) policy and the platform (cell) policy kept by the catalog, the plan
//! node's policy from the run spec, the agent profile, and the source's own facts (an MCP tool's
//! permission and usability). Output per tool: visible, callable, approval required, the reason,
//! and the call budget.
//!
//! Rules, in the order they are checked:
//! 1. user deny is highest;
//! 2. platform deny (and the cell's disabled tools) cannot be overridden;
//! 3. plan node deny, then the plan node's allow list: when present, a tool must be in it too
//!    (a plan node narrows what the profile allows; it cannot widen it) and its budgets win over
//!    the profile's;
//! 4. profile deny beats profile allow;
//! 5. a tool the profile does not allow is invisible;
//! 6. a tool its source cannot offer (paused, off, not cached, bad schema) is invisible;
//! 7. approval is not deny: user, platform and source (MCP `Ask`) approval rules only mark the tool.

use serde::{Deserialize, Serialize};

use crate::catalog::{CatalogEntry, McpPermission, OmitReason, ToolOrigin};
use crate::profile::Profile;
use crate::selector::{ToolSelector, first_match};

/// What happens when governance denies a call at run time: a policy-denied tool result the
/// model can read (the default), or the run fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeniedCallMode {
    #[default]
    Result,
    FailRun,
}

/// The cell's policy: tools switched off for the whole cell, the platform's denies and approvals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlatformPolicy {
    /// Tools switched off for the whole cell.
    #[serde(default)]
    pub disabled_tools: Vec<ToolSelector>,
    /// Denies no profile can override.
    #[serde(default)]
    pub deny: Vec<ToolSelector>,
    /// Tools that need an approval before they run.
    #[serde(default)]
    pub approval_required: Vec<ToolSelector>,
    #[serde(default)]
    pub on_denied: Option<DeniedCallMode>,
}

/// One actor's policy; its denies are the highest of all layers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserPolicy {
    #[serde(default)]
    pub deny: Vec<ToolSelector>,
    #[serde(default)]
    pub approval_required: Vec<ToolSelector>,
    #[serde(default)]
    pub on_denied: Option<DeniedCallMode>,
}

/// The policy of the plan node a run executes, from the run spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanNodePolicy {
    /// When present, only tools matching one of these (and allowed by the profile) are visible.
    #[serde(default)]
    pub allow: Option<Vec<ToolSelector>>,
    #[serde(default)]
    pub deny: Vec<ToolSelector>,
    /// Overrides the profile's per-tool budget for every tool of this node.
    #[serde(default)]
    pub max_calls_per_tool: Option<u32>,
    /// Overrides the profile's total budget.
    #[serde(default)]
    pub max_calls_per_invocation: Option<u32>,
    #[serde(default)]
    pub on_denied: Option<DeniedCallMode>,
}

/// The layers around a profile.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyLayers<'a> {
    pub user: Option<&'a UserPolicy>,
    pub platform: Option<&'a PlatformPolicy>,
    pub plan_node: Option<&'a PlanNodePolicy>,
}

impl PolicyLayers<'_> {
    /// The denied-call mode: user over platform over plan node; default result.
    pub fn denied_call_mode(&self) -> DeniedCallMode {
        self.user
            .and_then(|u| u.on_denied)
            .or_else(|| self.platform.and_then(|p| p.on_denied))
            .or_else(|| self.plan_node.and_then(|p| p.on_denied))
            .unwrap_or_default()
    }

    /// The total budget: the plan node's when it sets one, else the profile's.
    pub fn max_calls_per_invocation(&self, profile: &Profile) -> u32 {
        self.plan_node
            .and_then(|p| p.max_calls_per_invocation)
            .unwrap_or(profile.tools.max_calls_per_invocation)
    }
}

/// The outcome of resolving one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDecision {
    pub visible: bool,
    /// Visible tools are callable; a separate flag so that a later "listed but not callable" state
    /// (e.g. awaiting configuration) does not change the shape.
    pub callable: bool,
    pub approval_required: bool,
    /// Which rule asked for approval, e.g. ``user policy `mcp:github/*` ``; `None` without one.
    pub approval_rule: Option<String>,
    /// Why the tool is invisible; `None` when visible.
    pub reason: Option<OmitReason>,
    /// Calls this tool may make per invocation; `None` = only the total applies.
    pub budget: Option<u32>,
}

impl ToolDecision {
    fn hidden(reason: OmitReason) -> Self {
        ToolDecision {
            visible: false,
            callable: false,
            approval_required: false,
            approval_rule: None,
            reason: Some(reason),
            budget: None,
        }
    }
}

fn denied(layer: &str, sel: &ToolSelector) -> OmitReason {
    OmitReason::Denied {
        layer: layer.to_owned(),
        selector: sel.to_string(),
    }
}

/// Resolves one catalog entry. `allowed_by` is whether the profile's allow list selects it (the
/// compiler knows, since it expands the allow list in order).
pub fn resolve(
    entry: &CatalogEntry,
    profile: &Profile,
    layers: &PolicyLayers<'_>,
    allowed_by_profile: bool,
) -> ToolDecision {
    if let Some(sel) = layers.user.and_then(|u| first_match(&u.deny, entry)) {
        return ToolDecision::hidden(denied("user", sel));
    }
    if let Some(platform) = layers.platform {
        if let Some(sel) = first_match(&platform.disabled_tools, entry) {
            return ToolDecision::hidden(OmitReason::DisabledByPlatform {
                selector: sel.to_string(),
            });
        }
        if let Some(sel) = first_match(&platform.deny, entry) {
            return ToolDecision::hidden(denied("platform", sel));
        }
    }
    if let Some(plan) = layers.plan_node {
        if let Some(sel) = first_match(&plan.deny, entry) {
            return ToolDecision::hidden(denied("plan node", sel));
        }
        if let Some(allow) = &plan.allow
            && first_match(allow, entry).is_none()
        {
            return ToolDecision::hidden(OmitReason::NotInPlanNode);
        }
    }
    if let Some(sel) = first_match(&profile.tools.deny, entry) {
        return ToolDecision::hidden(denied("profile", sel));
    }
    if !allowed_by_profile {
        return ToolDecision::hidden(OmitReason::Denied {
            layer: "profile".into(),
            selector: "(not in tools.allow)".into(),
        });
    }
    if let Some(reason) = entry.unusable_reason() {
        return ToolDecision::hidden(reason.clone());
    }
    let source_asks = matches!(
        entry.origin(),
        ToolOrigin::Mcp {
            permission: McpPermission::Ask,
            ..
        }
    );
    let approval_rule = approval_rule(entry, profile, layers, source_asks);
    let budget = layers
        .plan_node
        .and_then(|p| p.max_calls_per_tool)
        .or_else(|| profile.override_for(entry).and_then(|o| o.max_calls))
        .or(profile.tools.max_calls_per_tool);
    ToolDecision {
        visible: true,
        callable: true,
        approval_required: approval_rule.is_some(),
        approval_rule,
        reason: None,
        budget,
    }
}

/// The first rule that asks for approval of `entry`: the MCP server's permission, the user
/// policy, the platform policy, then the profile.
fn approval_rule(
    entry: &CatalogEntry,
    profile: &Profile,
    layers: &PolicyLayers<'_>,
    source_asks: bool,
) -> Option<String> {
    if source_asks {
        return Some("MCP permission ask".to_owned());
    }
    if let Some(sel) = layers
        .user
        .and_then(|u| first_match(&u.approval_required, entry))
    {
        return Some(format!("user policy `{sel}`"));
    }
    if let Some(sel) = layers
        .platform
        .and_then(|p| first_match(&p.approval_required, entry))
    {
        return Some(format!("platform policy `{sel}`"));
    }
    first_match(&profile.tools.approval_required, entry).map(|sel| format!("profile `{sel}`"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::descriptor::ToolDescriptor;
    use crate::id::ToolId;

    const UUID: &str = "0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60";

    fn sel(s: &str) -> ToolSelector {
        ToolSelector::parse(s).unwrap()
    }

    fn mcp(permission: McpPermission) -> CatalogEntry {
        let id = ToolId::parse(&format!("mcp/{UUID}:search")).unwrap();
        let d = ToolDescriptor::new(id, "d", json!({"type": "object"})).unwrap();
        CatalogEntry::usable(
            ToolOrigin::Mcp {
                registration_id: UUID.into(),
                server_name: "docs".into(),
                permission,
            },
            d,
        )
        .unwrap()
    }

    fn profile(text: &str) -> Profile {
        Profile::from_json(text).unwrap()
    }

    #[test]
    fn layer_precedence_table() {
        let entry = mcp(McpPermission::Allow);
        let p = profile(r#"{"id":"a","tools":{"allow":["*"],"maxCallsPerTool":7}}"#);
        let p_deny = profile(r#"{"id":"a","tools":{"allow":["*"],"deny":["mcp:docs/*"]}}"#);
        let user_deny = UserPolicy {
            deny: vec![sel("mcp:docs/search")],
            ..Default::default()
        };
        let user_approve = UserPolicy {
            approval_required: vec![sel("*")],
            ..Default::default()
        };
        let platform_deny = PlatformPolicy {
            deny: vec![sel("mcp:docs/*")],
            ..Default::default()
        };
        let platform_disabled = PlatformPolicy {
            disabled_tools: vec![sel("mcp:docs/search")],
            ..Default::default()
        };
        let plan_allow_other = PlanNodePolicy {
            allow: Some(vec![sel("builtin:*")]),
            ..Default::default()
        };
        let plan_budget = PlanNodePolicy {
            allow: Some(vec![sel("*")]),
            max_calls_per_tool: Some(2),
            ..Default::default()
        };

        struct Case<'a> {
            name: &'a str,
            profile: &'a Profile,
            layers: PolicyLayers<'a>,
            allowed: bool,
            visible: bool,
            reason: Option<&'a str>,
            approval: bool,
            budget: Option<u32>,
        }
        let none = PolicyLayers::default();
        let cases = [
            Case {
                name: "plain allow",
                profile: &p,
                layers: none,
                allowed: true,
                visible: true,
                reason: None,
                approval: false,
                budget: Some(7),
            },
            Case {
                name: "not allowed is invisible",
                profile: &p,
                layers: none,
                allowed: false,
                visible: false,
                reason: Some("denied"),
                approval: false,
                budget: None,
            },
            Case {
                name: "profile deny beats allow",
                profile: &p_deny,
                layers: none,
                allowed: true,
                visible: false,
                reason: Some("denied"),
                approval: false,
                budget: None,
            },
            Case {
                name: "user deny highest",
                profile: &p,
                layers: PolicyLayers {
                    user: Some(&user_deny),
                    ..none
                },
                allowed: true,
                visible: false,
                reason: Some("denied"),
                approval: false,
                budget: None,
            },
            Case {
                name: "platform deny",
                profile: &p,
                layers: PolicyLayers {
                    platform: Some(&platform_deny),
                    ..none
                },
                allowed: true,
                visible: false,
                reason: Some("denied"),
                approval: false,
                budget: None,
            },
            Case {
                name: "platform disabled",
                profile: &p,
                layers: PolicyLayers {
                    platform: Some(&platform_disabled),
                    ..none
                },
                allowed: true,
                visible: false,
                reason: Some("disabled_by_platform"),
                approval: false,
                budget: None,
            },
            Case {
                name: "plan node narrows",
                profile: &p,
                layers: PolicyLayers {
                    plan_node: Some(&plan_allow_other),
                    ..none
                },
                allowed: true,
                visible: false,
                reason: Some("not_in_plan_node"),
                approval: false,
                budget: None,
            },
            Case {
                name: "plan node budget over profile",
                profile: &p,
                layers: PolicyLayers {
                    plan_node: Some(&plan_budget),
                    ..none
                },
                allowed: true,
                visible: true,
                reason: None,
                approval: false,
                budget: Some(2),
            },
            Case {
                name: "approval is not deny",
                profile: &p,
                layers: PolicyLayers {
                    user: Some(&user_approve),
                    ..none
                },
                allowed: true,
                visible: true,
                reason: None,
                approval: true,
                budget: Some(7),
            },
        ];
        for c in cases {
            let d = resolve(&entry, c.profile, &c.layers, c.allowed);
            assert_eq!(d.visible, c.visible, "{}", c.name);
            assert_eq!(d.callable, c.visible, "{}", c.name);
            assert_eq!(
                d.reason.as_ref().map(OmitReason::kind),
                c.reason,
                "{}",
                c.name
            );
            assert_eq!(d.approval_required, c.approval, "{}", c.name);
            assert_eq!(d.budget, c.budget, "{}", c.name);
        }
    }

    #[test]
    fn user_deny_reported_before_platform() {
        let entry = mcp(McpPermission::Allow);
        let p = profile(r#"{"id":"a","tools":{"allow":["*"]}}"#);
        let user = UserPolicy {
            deny: vec![sel("*")],
            ..Default::default()
        };
        let platform = PlatformPolicy {
            deny: vec![sel("*")],
            ..Default::default()
        };
        let d = resolve(
            &entry,
            &p,
            &PolicyLayers {
                user: Some(&user),
                platform: Some(&platform),
                plan_node: None,
            },
            true,
        );
        assert_eq!(
            d.reason,
            Some(OmitReason::Denied {
                layer: "user".into(),
                selector: "*".into()
            })
        );
    }

    #[test]
    fn mcp_ask_marks_approval_and_unusable_is_hidden() {
        let p = profile(r#"{"id":"a","tools":{"allow":["*"]}}"#);
        let d = resolve(&mcp(McpPermission::Ask), &p, &PolicyLayers::default(), true);
        assert!(d.visible && d.approval_required);
        let id = ToolId::parse(&format!("mcp/{UUID}:search")).unwrap();
        let paused = CatalogEntry::unusable(
            id,
            ToolOrigin::Mcp {
                registration_id: UUID.into(),
                server_name: "docs".into(),
                permission: McpPermission::Allow,
            },
            OmitReason::ServerPaused,
            None,
        )
        .unwrap();
        let d = resolve(&paused, &p, &PolicyLayers::default(), true);
        assert_eq!(d.reason, Some(OmitReason::ServerPaused));
    }

    #[test]
    fn denied_call_mode_precedence() {
        let user = UserPolicy {
            on_denied: Some(DeniedCallMode::FailRun),
            ..Default::default()
        };
        let platform = PlatformPolicy {
            on_denied: Some(DeniedCallMode::Result),
            ..Default::default()
        };
        assert_eq!(
            PolicyLayers::default().denied_call_mode(),
            DeniedCallMode::Result
        );
        assert_eq!(
            PolicyLayers {
                user: Some(&user),
                platform: Some(&platform),
                plan_node: None
            }
            .denied_call_mode(),
            DeniedCallMode::FailRun
        );
    }
}
