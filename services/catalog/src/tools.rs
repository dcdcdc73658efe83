//! The listing operations gRPC and HTTP share: list (plain or for a profile), get, describe,
//! and the runtime's resolve.
//!
//! A plain listing is served from the listings prepared at assembly (a page is a range of them);
//! a profile listing compiles the profile's snapshot per request. Both are paged with the same
//! cursor and stop before the response byte budget. This module never formats the wire: it
//! hands back rows that the gRPC and HTTP layers turn into their own bytes.

use std::sync::Arc;

use toolplane_core::builtin;
use toolplane_core::category;
use toolplane_core::id::ToolId;

use crate::assembly::Assembled;
use crate::cell::{ActorId, CellId};
use crate::describe::{self, Describe};
use crate::error::{CatalogCode, CatalogError};
use crate::listing::{SourceStatus, ToolListing, ToolOmission};
use crate::profiles::StoredProfile;
use crate::query::{self, ListFilter, PageToken, ProfileView};
use crate::records::{Endpoint, PolicyRecord};
use crate::state::Catalog;

/// Which encoding a page's byte budget is measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Proto,
    Json,
}

/// A listing request.
#[derive(Debug, Clone)]
pub struct ListRequest {
    pub cell: CellId,
    pub filter: ListFilter,
    pub profile_id: Option<String>,
    pub actor: Option<ActorId>,
    pub page_size: usize,
    pub token: Option<PageToken>,
    pub budget: usize,
    pub measure: Measure,
}

/// One row of a page: a prepared listing of the assembled catalog, or a listing built for a
/// profile view.
#[derive(Debug, Clone)]
pub enum Row {
    Prepared(usize),
    View(Box<ToolListing>),
}

/// A page of listings.
#[derive(Debug, Clone)]
pub struct ListPage {
    pub assembled: Arc<Assembled>,
    pub rows: Vec<Row>,
    pub next: Option<PageToken>,
    /// For a profile: on the first page only.
    pub omitted: Vec<ToolOmission>,
    pub sources: Vec<SourceStatus>,
}

/// Plain-text descriptions.
#[derive(Debug, Clone)]
pub struct Descriptions {
    /// `(tool id, title, text)` per tool.
    pub tools: Vec<(String, String, String)>,
    pub text: String,
}

fn json_len(l: &ToolListing) -> usize {
    serde_json::to_vec(l).map_or(0, |v| v.len() + 1)
}

impl Catalog {
    /// Compiles what a profile would see, under the cell's platform policy and, when an actor
    /// is named, that actor's user policy.
    pub async fn view_for_profile(
        &self,
        cell: &CellId,
        profile_id: &str,
        actor: Option<&ActorId>,
    ) -> Result<(Arc<Assembled>, ProfileView), CatalogError> {
        let stored = self.profile(cell, profile_id).await?;
        let platform = self.platform_policy(cell).await?;
        let user = match actor {
            Some(a) => self.user_policy(cell, a).await?,
            None => None,
        };
        let assembled = self.cell(cell).await?.assembled();
        let view = query::profile_view(
            &assembled,
            &stored.profile,
            platform.as_ref().map(|p| &p.policy),
            user.as_ref().map(|u| &u.policy),
        )?;
        Ok((assembled, view))
    }

    /// A page of listings.
    pub async fn list_tools(&self, req: ListRequest) -> Result<ListPage, CatalogError> {
        let cell = self.cell(&req.cell).await?;
        let sources = cell.statuses();
        if let Some(profile_id) = &req.profile_id {
            let (assembled, view) = self
                .view_for_profile(&req.cell, profile_id, req.actor.as_ref())
                .await?;
            let kept: Vec<ToolListing> = view
                .tools
                .into_iter()
                .filter(|l| req.filter.keeps_view(l))
                .collect();
            let start = PageToken::start(req.token.as_ref(), kept.iter().map(|l| l.id.as_str()));
            let lens: Vec<usize> = kept
                .iter()
                .map(|l| match req.measure {
                    Measure::Proto => {
                        prost::Message::encoded_len(&crate::convert::listing_to_proto(l, None))
                    }
                    Measure::Json => json_len(l),
                })
                .collect();
            let (range, next) = query::take_page(
                kept.len(),
                start,
                req.page_size,
                req.budget,
                |i| lens[i],
                |i| kept[i].id.clone(),
            );
            let first = req.token.is_none();
            let rows = kept[range]
                .iter()
                .cloned()
                .map(|l| Row::View(Box::new(l)))
                .collect();
            return Ok(ListPage {
                assembled,
                rows,
                next,
                omitted: if first { view.omitted } else { Vec::new() },
                sources,
            });
        }
        let assembled = cell.assembled();
        let kept: Vec<usize> = (0..assembled.tools.len())
            .filter(|&i| req.filter.keeps_tool(&assembled.tools[i]))
            .collect();
        let start = PageToken::start(
            req.token.as_ref(),
            kept.iter().map(|&i| assembled.tools[i].listing.id.as_str()),
        );
        let (range, next) = query::take_page(
            kept.len(),
            start,
            req.page_size,
            req.budget,
            |k| {
                let t = &assembled.tools[kept[k]];
                match req.measure {
                    Measure::Proto => t.proto_len,
                    Measure::Json => t.json.len() + 1,
                }
            },
            |k| assembled.tools[kept[k]].listing.id.clone(),
        );
        let rows = kept[range].iter().map(|&i| Row::Prepared(i)).collect();
        Ok(ListPage {
            assembled,
            rows,
            next,
            omitted: Vec::new(),
            sources,
        })
    }

    /// One tool's listing, usable or not.
    pub async fn get_tool(
        &self,
        cell: &CellId,
        tool_id: &str,
    ) -> Result<(Arc<Assembled>, usize), CatalogError> {
        let id = ToolId::parse(tool_id)?;
        let assembled = self.cell(cell).await?.assembled();
        let index = assembled
            .position(&id)
            .ok_or_else(|| tool_not_found(cell, tool_id))?;
        Ok((assembled, index))
    }

    /// Plain-text descriptions: the named tools in the given order (usable or not), or else the
    /// profile's tools (with its description overrides), or else every usable tool passing the
    /// filter.
    pub async fn describe_tools(
        &self,
        cell: &CellId,
        tool_ids: &[String],
        profile_id: Option<&str>,
        actor: Option<&ActorId>,
        filter: &ListFilter,
    ) -> Result<Descriptions, CatalogError> {
        if tool_ids.len() > query::MAX_TOOL_IDS {
            return Err(CatalogError::invalid_request(format!(
                "{} tool ids, over {}",
                tool_ids.len(),
                query::MAX_TOOL_IDS
            )));
        }
        let wanted: Vec<ToolId> = tool_ids
            .iter()
            .map(|s| ToolId::parse(s))
            .collect::<Result<_, _>>()?;
        let listings: Vec<ToolListing> = match profile_id {
            Some(profile_id) => {
                let (_, view) = self.view_for_profile(cell, profile_id, actor).await?;
                let kept: Vec<ToolListing> = view
                    .tools
                    .into_iter()
                    .filter(|l| filter.keeps_view(l))
                    .collect();
                if wanted.is_empty() {
                    kept
                } else {
                    wanted
                        .iter()
                        .map(|id| {
                            let id = id.to_string();
                            kept.iter()
                                .find(|l| l.id == id)
                                .cloned()
                                .ok_or_else(|| tool_not_found(cell, &id))
                        })
                        .collect::<Result<_, _>>()?
                }
            }
            None => {
                let assembled = self.cell(cell).await?.assembled();
                if wanted.is_empty() {
                    assembled
                        .tools
                        .iter()
                        .filter(|t| filter.keeps_tool(t))
                        .map(|t| t.listing.clone())
                        .collect()
                } else {
                    wanted
                        .iter()
                        .map(|id| {
                            assembled
                                .get(id)
                                .map(|t| t.listing.clone())
                                .ok_or_else(|| tool_not_found(cell, &id.to_string()))
                        })
                        .collect::<Result<_, _>>()?
                }
            }
        };
        let items: Vec<Describe<'_>> = listings
            .iter()
            .map(|l| Describe {
                id: &l.id,
                title: l.title.as_deref(),
                description: &l.description,
                input_schema: &l.input_schema,
            })
            .collect();
        let text = describe::render(&items);
        if text.len() > self.config.limits.max_response_bytes {
            return Err(CatalogError::new(
                CatalogCode::LimitExceeded,
                format!(
                    "the descriptions are {} bytes, over {}; narrow them with sources or tool ids",
                    text.len(),
                    self.config.limits.max_response_bytes
                ),
            ));
        }
        let tools = items
            .iter()
            .map(|d| {
                (
                    d.id.to_owned(),
                    d.title.map(str::to_owned).unwrap_or_else(|| {
                        d.id.split_once(':').map_or(d.id, |(_, n)| n).to_owned()
                    }),
                    describe::tool_text(d),
                )
            })
            .collect();
        Ok(Descriptions { tools, text })
    }
}

/// Everything the runtime reads to compile a snapshot (`ResolveProfile`).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub profile: StoredProfile,
    pub platform: Option<PolicyRecord>,
    pub user: Option<PolicyRecord>,
    /// Every tool an allow selector matches, usable or not, in catalog order, with the full
    /// endpoint of external and adapter tools.
    pub tools: Vec<(ToolListing, Option<Endpoint>)>,
    pub sources: Vec<SourceStatus>,
}

impl Catalog {
    /// The profile, its policy layers and the tools its allow list selects.
    pub async fn resolve_profile(
        &self,
        cell: &CellId,
        profile_id: &str,
        actor: Option<&ActorId>,
    ) -> Result<Resolved, CatalogError> {
        let profile = self.profile(cell, profile_id).await?;
        let platform = self.platform_policy(cell).await?.map(|p| p.record);
        let user = match actor {
            Some(a) => self.user_policy(cell, a).await?.map(|u| u.record),
            None => None,
        };
        let c = self.cell(cell).await?;
        let assembled = c.assembled();
        let effective = assembled.effective_profile(&profile.profile);
        let tools = assembled
            .tools
            .iter()
            .filter(|t| {
                effective
                    .tools
                    .allow
                    .iter()
                    .any(|s| s.matches(&t.tool.entry))
            })
            .map(|t| {
                let mut listing = t.listing.clone();
                let id = t.tool.id();
                listing.category =
                    category::resolve(id, &listing.annotations, &effective.tools.extra_categories);
                listing.progress_aware = builtin::is_progress_aware(id)
                    || effective.tools.extra_progress_aware.contains(id);
                (listing, t.tool.endpoint.clone())
            })
            .collect();
        Ok(Resolved {
            profile,
            platform,
            user,
            tools,
            sources: c.statuses(),
        })
    }
}

fn tool_not_found(cell: &CellId, id: &str) -> CatalogError {
    CatalogError::new(
        CatalogCode::ToolNotFound,
        format!("no tool `{}` in cell `{cell}`", crate::cell::shown(id)),
    )
}
