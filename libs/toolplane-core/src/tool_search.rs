//! Tool search over one snapshot: the index `tools.search` reads, built once per invocation from
//! the snapshot's bindings (alias, canonical id, title, description and parameter names), ranked
//! by `toolplane_text::rank`. Pure: what a search found is the caller's to advertise.

use toolplane_text::{QueryError, ToolFields, ToolIndex};

use crate::builtin;
use crate::id::ToolId;
use crate::snapshot::InvocationToolSnapshot;

/// A snapshot's searchable tools.
#[derive(Debug)]
pub struct SnapshotToolSearch {
    index: ToolIndex,
    /// The tool of each indexed position.
    ids: Vec<ToolId>,
}

/// One tool a search found.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundTool {
    pub tool_id: ToolId,
    pub score: f32,
}

impl SnapshotToolSearch {
    /// Indexes every binding except the runtime's own tools (`tools.search`, `task.return`).
    pub fn build(snapshot: &InvocationToolSnapshot) -> SnapshotToolSearch {
        let mut names = Vec::new();
        let mut params = Vec::new();
        let mut ids = Vec::new();
        let bindings: Vec<_> = snapshot
            .bindings
            .iter()
            .filter(|b| !builtin::is_runtime_only(b.tool_id()))
            .collect();
        for b in &bindings {
            names.push(format!("{} {}", b.alias, b.tool_id()));
            let keys: Vec<&str> = b
                .descriptor
                .input_schema()
                .get("properties")
                .and_then(|p| p.as_object())
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            params.push(keys.join(" "));
            ids.push(b.tool_id().clone());
        }
        let index = ToolIndex::build(bindings.iter().zip(names.iter().zip(&params)).map(
            |(b, (name, params))| ToolFields {
                name,
                title: b.descriptor.title().unwrap_or(""),
                description: b.descriptor.description(),
                params,
            },
        ));
        SnapshotToolSearch { index, ids }
    }

    /// The `limit` best tools for `query` that `skip` does not exclude (tools already
    /// advertised), best first.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        skip: impl Fn(&ToolId) -> bool,
    ) -> Result<Vec<FoundTool>, QueryError> {
        let skipped = self.ids.iter().filter(|id| skip(id)).count();
        let hits = self.index.search(query, limit.saturating_add(skipped))?;
        Ok(hits
            .into_iter()
            .filter_map(|hit| {
                let id = self.ids.get(hit.index)?;
                (!skip(id)).then(|| FoundTool {
                    tool_id: id.clone(),
                    score: hit.score,
                })
            })
            .take(limit)
            .collect())
    }
}
