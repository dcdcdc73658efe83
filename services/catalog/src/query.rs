//! Reading an assembled catalog: filters, cursor pages, and "what would this profile see".
//!
//! The profile view compiles the same `InvocationToolSnapshot` the runtime compiles (root exit
//! policy, the cell's platform policy, the actor's user policy), so a listing never disagrees
//! with what an invocation gets. This module never mutates a catalog and never does IO.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use toolplane_core::catalog::ToolSource;
use toolplane_core::category::Category;
use toolplane_core::error::{CoreError, REQUEST_INVALID_PAGE_TOKEN};
use toolplane_core::policy::{PlatformPolicy, PolicyLayers, UserPolicy};
use toolplane_core::profile::Profile;
use toolplane_core::selector::{ToolSelector, first_match};
use toolplane_core::snapshot::{CompileRequest, ExitPolicy, InvocationToolSnapshot};
use toolplane_proto::page_token;

use crate::assembly::{Assembled, ListedTool};
use crate::error::{CatalogError, diag};
use crate::listing::{Diagnostic, PolicyDecision, SourceStatus, ToolListing, ToolOmission};

/// Longest query text accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 256;
/// Most tool ids one describe request may name.
pub const MAX_TOOL_IDS: usize = 1000;

/// Which tools a listing keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Empty: every source.
    pub sources: Vec<ToolSource>,
    /// Empty: every category.
    pub categories: Vec<Category>,
    /// Also list tools their source cannot offer now (ignored in a profile view, which lists what
    /// the profile sees and reports the rest as omitted).
    pub include_unusable: bool,
    /// Exactly this provider, e.g. `builtin` or `mcp/<uuid>`.
    pub provider: Option<String>,
    /// Lowercase substring of id, title or description.
    pub query: Option<String>,
}

impl ListFilter {
    /// Validates and normalises the query and provider texts.
    pub fn new(
        sources: Vec<ToolSource>,
        categories: Vec<Category>,
        include_unusable: bool,
        provider: &str,
        query: &str,
    ) -> Result<ListFilter, CatalogError> {
        if query.len() > MAX_QUERY_BYTES {
            return Err(CatalogError::invalid_request(format!(
                "query is {} bytes, over {MAX_QUERY_BYTES}",
                query.len()
            )));
        }
        if !provider.is_empty() {
            toolplane_core::id::Provider::parse(provider).map_err(|e| {
                CatalogError::invalid_request(format!("provider filter: {}", e.message))
            })?;
        }
        if sources.len() > 16 || categories.len() > 16 {
            return Err(CatalogError::invalid_request(
                "too many source or category filters",
            ));
        }
        let query = query.trim().to_lowercase();
        Ok(ListFilter {
            sources,
            categories,
            include_unusable,
            provider: (!provider.is_empty()).then(|| provider.to_owned()),
            query: (!query.is_empty()).then_some(query),
        })
    }

    fn keeps(&self, listing: &ToolListing, provider: &str, search: &str) -> bool {
        (self.sources.is_empty() || self.sources.contains(&listing.source))
            && (self.categories.is_empty() || self.categories.contains(&listing.category))
            && self.provider.as_deref().is_none_or(|p| p == provider)
            && self.query.as_deref().is_none_or(|q| search.contains(q))
    }

    /// Whether a tool of the plain listing passes.
    pub fn keeps_tool(&self, tool: &ListedTool) -> bool {
        (self.include_unusable || tool.listing.usable)
            && self.keeps(&tool.listing, &tool.provider, &tool.search)
    }

    /// Whether a tool of a profile view passes.
    pub fn keeps_view(&self, listing: &ToolListing) -> bool {
        let provider = listing.id.split_once(':').map_or("", |(p, _)| p);
        let search = format!(
            "{}\n{}\n{}",
            listing.id,
            listing.title.as_deref().unwrap_or(""),
            listing.description
        )
        .to_lowercase();
        self.keeps(listing, provider, &search)
    }
}

/// A cursor: how far the previous page got, and the id it ended with (so a page still starts
/// in the right place when tools before it appeared or left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken {
    pub offset: usize,
    pub last_id: String,
}

impl PageToken {
    /// The listing tool pages belong to (`toolplane_proto::page_token`).
    pub const LISTING: &'static str = "catalog.tools";

    /// The opaque token: `offset:last_id` as a `toolplane_proto::page_token`.
    pub fn encode(&self) -> String {
        page_token::encode(Self::LISTING, &format!("{}:{}", self.offset, self.last_id))
    }

    pub fn decode(token: &str) -> Result<Option<PageToken>, CatalogError> {
        let Some(cursor) = page_token::decode(Self::LISTING, token).map_err(invalid_token)? else {
            return Ok(None);
        };
        let bad = || {
            invalid_token(page_token::InvalidPageToken {
                listing: Self::LISTING,
            })
        };
        let (offset, last_id) = cursor.split_once(':').ok_or_else(bad)?;
        Ok(Some(PageToken {
            offset: offset.parse().map_err(|_| bad())?,
            last_id: last_id.to_owned(),
        }))
    }

    /// Where the next page starts in `ids`.
    pub fn start<'a>(
        token: Option<&PageToken>,
        ids: impl Iterator<Item = &'a str> + Clone,
    ) -> usize {
        let Some(t) = token else { return 0 };
        if let Some(before) = t.offset.checked_sub(1)
            && ids.clone().nth(before) == Some(t.last_id.as_str())
        {
            return t.offset;
        }
        match ids.clone().position(|id| id == t.last_id) {
            Some(pos) => pos.saturating_add(1),
            None => t.offset.min(ids.count()),
        }
    }
}

/// A refused page token: `request.invalid_page_token`.
pub fn invalid_token(e: page_token::InvalidPageToken) -> CatalogError {
    CatalogError::Core(CoreError::new(REQUEST_INVALID_PAGE_TOKEN, e.to_string()))
}

/// The cursor (a store key's last segment) of a hosts' or profiles' page token; empty for the
/// first page.
pub fn cursor(listing: &'static str, token: &str) -> Result<String, CatalogError> {
    Ok(page_token::decode(listing, token)
        .map_err(invalid_token)?
        .unwrap_or_default())
}

/// The token of the page after `next`, a cursor [`cursor`] reads back; empty at the end.
pub fn next_token(listing: &str, next: Option<String>) -> String {
    next.map(|n| page_token::encode(listing, &n))
        .unwrap_or_default()
}

/// Clamps a requested page size: 0 selects `default`, larger than `max` is `max`.
pub fn page_size(requested: u32, default: usize, max: usize) -> usize {
    match usize::try_from(requested).unwrap_or(max) {
        0 => default,
        n => n.min(max),
    }
}

/// Takes items from `start` until `size` items or `budget` bytes (at least one item), and the
/// token of the next page when items remain.
pub fn take_page(
    count: usize,
    start: usize,
    size: usize,
    budget: usize,
    len_of: impl Fn(usize) -> usize,
    id_of: impl Fn(usize) -> String,
) -> (std::ops::Range<usize>, Option<PageToken>) {
    let start = start.min(count);
    let mut end = start;
    let mut bytes = 0usize;
    while end < count && end.saturating_sub(start) < size {
        let len = len_of(end);
        if end > start && bytes.saturating_add(len) > budget {
            break;
        }
        bytes = bytes.saturating_add(len);
        end = end.saturating_add(1);
    }
    let next = (end < count && end > start).then(|| PageToken {
        offset: end,
        last_id: id_of(end.saturating_sub(1)),
    });
    (start..end, next)
}

/// What a profile would see: its tools in advertisement order, each with its policy decision,
/// and what it names but would not see, with why.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileView {
    pub tools: Vec<ToolListing>,
    pub omitted: Vec<ToolOmission>,
    pub snapshot: InvocationToolSnapshot,
}

/// The invocation id used for the snapshots listings compile; nothing persists them.
const LISTING_INVOCATION: &str = "catalog-listing";

/// Compiles the profile's root snapshot against the cell's catalog and policy layers.
pub fn profile_view(
    assembled: &Assembled,
    profile: &Profile,
    platform: Option<&PlatformPolicy>,
    user: Option<&UserPolicy>,
) -> Result<ProfileView, CatalogError> {
    let effective = assembled.effective_profile(profile);
    let snapshot = InvocationToolSnapshot::compile(CompileRequest {
        run_id: LISTING_INVOCATION,
        invocation_id: LISTING_INVOCATION,
        profile: &effective,
        layers: PolicyLayers {
            user,
            platform,
            plan_node: None,
        },
        exit_policy: &ExitPolicy::Root,
        catalog: &assembled.catalog,
    })?;
    let allow = &profile.tools.allow;
    let mut tools = Vec::with_capacity(snapshot.bindings.len());
    for b in &snapshot.bindings {
        let Some(listed) = assembled.get(b.tool_id()) else {
            continue;
        };
        let selector = first_match(allow, &listed.tool.entry)
            .map(ToString::to_string)
            .unwrap_or_default();
        let mut listing = listed.listing.clone();
        listing.description = b.descriptor.description().to_owned();
        listing.category = b.category;
        listing.progress_aware = b.progress_aware;
        let mut reason = format!("allowed by `{selector}`");
        if b.approval_required {
            reason.push_str("; calls need approval");
        }
        listing.policy = Some(PolicyDecision {
            visible: true,
            callable: true,
            approval_required: b.approval_required,
            reason,
            max_calls: b.max_calls,
        });
        tools.push(listing);
    }

    let mut omitted = Vec::with_capacity(snapshot.omitted.len());
    for o in &snapshot.omitted {
        let selector = toolplane_core::id::ToolId::parse(&o.tool)
            .ok()
            .and_then(|id| assembled.get(&id))
            .and_then(|t| first_match(allow, &t.tool.entry))
            .map_or_else(|| o.tool.clone(), ToString::to_string);
        let mcp = selector.starts_with("mcp");
        omitted.push(ToolOmission {
            tool_id: o.tool.clone(),
            diagnostic: Diagnostic::from_reason(&o.reason, &o.tool, mcp),
            selector,
        });
    }
    // Selectors naming several tools that match none: the snapshot reports only single-tool
    // selectors as missing.
    for sel in allow {
        if matches!(sel, ToolSelector::All) || sel.is_single_tool() {
            continue;
        }
        if !assembled.catalog.entries().iter().any(|e| sel.matches(e)) {
            let text = sel.to_string();
            omitted.push(ToolOmission {
                tool_id: text.clone(),
                selector: text.clone(),
                diagnostic: Diagnostic::new(
                    diag::PROFILE_SELECTOR_MATCHES_NOTHING,
                    "matches no tool in the catalog yet",
                    text,
                ),
            });
        }
    }
    Ok(ProfileView {
        tools,
        omitted,
        snapshot,
    })
}

/// Warnings for a profile being written: selectors that match nothing yet (tools may appear
/// later, so these never refuse the profile) and named tools that exist but cannot be used.
pub fn profile_warnings(
    assembled: &Assembled,
    profile: &Profile,
    mcp: Option<&SourceStatus>,
) -> Result<Vec<Diagnostic>, CatalogError> {
    let mut out: Vec<Diagnostic> = profile
        .warnings(&assembled.catalog)
        .into_iter()
        .map(|w| {
            Diagnostic::new(
                diag::PROFILE_SELECTOR_MATCHES_NOTHING,
                w.message,
                w.selector,
            )
        })
        .collect();
    let view = profile_view(assembled, profile, None, None)?;
    for o in view.omitted {
        let missing = matches!(
            o.diagnostic.code.as_str(),
            diag::TOOL_MISSING | diag::MCP_TOOL_MISSING | diag::PROFILE_SELECTOR_MATCHES_NOTHING
        );
        if !missing {
            out.push(o.diagnostic);
        }
    }
    let names_mcp = profile
        .tools
        .allow
        .iter()
        .any(|s| s.to_string().starts_with("mcp"));
    if let Some(mcp) = mcp.filter(|m| names_mcp && !m.available) {
        let (code, why) = mcp
            .diagnostics
            .first()
            .map_or((diag::MCP_UNAVAILABLE, ""), |d| {
                (d.code.as_str(), d.message.as_str())
            });
        out.push(Diagnostic::new(
            code,
            format!("MCP selectors were checked against the last known MCP tools only: {why}"),
            "",
        ));
    }
    Ok(out)
}

/// Warnings for a policy being written: selectors that match nothing yet.
pub fn policy_warnings<'a>(
    assembled: &Assembled,
    selectors: impl IntoIterator<Item = &'a ToolSelector>,
) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::new();
    for sel in selectors {
        if matches!(sel, ToolSelector::All) {
            continue;
        }
        let text = sel.to_string();
        if out.iter().any(|d| d.subject == text) {
            continue;
        }
        if !assembled.catalog.entries().iter().any(|e| sel.matches(e)) {
            out.push(Diagnostic::new(
                diag::POLICY_SELECTOR_MATCHES_NOTHING,
                "matches no tool in the catalog yet",
                text,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::string_slice
    )]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn tokens_round_trip_and_refuse_garbage() {
        let t = PageToken {
            offset: 1000,
            last_id: "mcp/0b6f3a52-6c1e-4f7a-9a7e-2f1d8c4b5e60:a:b".into(),
        };
        assert_eq!(PageToken::decode(&t.encode()).unwrap(), Some(t));
        assert_eq!(PageToken::decode("").unwrap(), None);
        for bad in ["zz", "abc", "3a", &"00".repeat(2000)] {
            assert_eq!(
                PageToken::decode(bad).unwrap_err().code(),
                "request.invalid_page_token"
            );
        }
    }

    #[test]
    fn a_page_resumes_after_its_last_id_when_earlier_items_leave() {
        let ids = ["a", "b", "c", "d", "e"];
        let token = PageToken {
            offset: 2,
            last_id: "b".into(),
        };
        assert_eq!(PageToken::start(Some(&token), ids.iter().copied()), 2);
        // "a" left: "b" is now at 0, the next page starts at "c".
        let fewer = ["b", "c", "d", "e"];
        assert_eq!(PageToken::start(Some(&token), fewer.iter().copied()), 1);
        // "b" left too: fall back to the offset.
        let gone = ["c", "d", "e"];
        assert_eq!(PageToken::start(Some(&token), gone.iter().copied()), 2);
    }

    #[test]
    fn a_token_that_is_not_ascii_is_refused_not_a_panic() {
        for bad in ["a\u{e9}b", "\u{e9}\u{e9}", "0\u{1f600}0", "zz"] {
            assert_eq!(
                PageToken::decode(bad).unwrap_err().code(),
                "request.invalid_page_token",
                "{bad:?}"
            );
        }
    }

    proptest! {
        /// No string, however it was made, panics the decoder; what it accepts encodes back to
        /// itself.
        #[test]
        fn any_token_decodes_or_is_refused(token in ".{0,64}") {
            if let Ok(Some(t)) = PageToken::decode(&token) {
                prop_assert_eq!(t.encode(), token.to_ascii_lowercase());
            }
        }

        /// Walking every page of a list returns each item exactly once, in order, whatever the
        /// page size and byte budget.
        #[test]
        fn pages_cover_everything_once(
            lens in proptest::collection::vec(1usize..50, 0..200),
            size in 1usize..40,
            budget in 1usize..400,
        ) {
            let ids: Vec<String> = (0..lens.len()).map(|i| format!("t{i}")).collect();
            let mut token: Option<PageToken> = None;
            let mut seen = Vec::new();
            loop {
                let start = PageToken::start(token.as_ref(), ids.iter().map(String::as_str));
                let (range, next) = take_page(ids.len(), start, size, budget, |i| lens[i], |i| ids[i].clone());
                prop_assert!(range.len() <= size);
                seen.extend(range.clone());
                match next {
                    Some(t) => {
                        prop_assert!(!range.is_empty());
                        token = Some(PageToken::decode(&t.encode()).unwrap().unwrap());
                    }
                    None => break,
                }
            }
            prop_assert_eq!(seen, (0..lens.len()).collect::<Vec<_>>());
        }
    }
}
