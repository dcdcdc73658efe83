//! External tool hosts: any process, in any language, that implements
//! `toolplane.v1.ToolExecutor` and registers its tools here with its endpoint. SDK tools,
//! plugins and extensions all arrive this way, as `ext/<host-id>:<name>`.
//!
//! Owns validating a registration (ids under the host's own provider, no reserved provider, no
//! duplicate ids inside it or against another source, endpoint and header limits), storing it
//! as one record so a re-registration replaces the host's whole tool set atomically, and the
//! generation check a caller can make. The catalog only stores and lists: the runtime calls the
//! host.

use std::collections::HashSet;

use toolplane_core::CoreError;
use toolplane_core::category::Category;
use toolplane_core::error::TOOL_DUPLICATE_ID;

use crate::cell::{CellId, parse_segment, shown};
use crate::error::{CatalogCode, CatalogError, diag};
use crate::listing::Diagnostic;
use crate::records::{
    Endpoint, HostRecord, RegisteredTool, Update, host_key, hosts_prefix, now_unix_ms,
};
use crate::state::Catalog;

/// Longest display name accepted, in bytes.
pub const MAX_DISPLAY_NAME: usize = 256;
/// Longest endpoint URL accepted, in bytes.
pub const MAX_URL: usize = 2048;
/// Most headers per endpoint, and the longest header value, in bytes.
pub const MAX_HEADERS: usize = 32;
pub const MAX_HEADER_VALUE: usize = 8192;
/// Longest per-call timeout a host may ask for: one hour.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// A registration to store.
#[derive(Debug, Clone)]
pub struct RegisterHost {
    pub cell: CellId,
    pub host_id: String,
    pub display_name: String,
    pub endpoint: Endpoint,
    pub tools: Vec<RegisteredTool>,
    pub expected_generation: Option<u64>,
}

/// A page of hosts.
#[derive(Debug, Clone)]
pub struct HostPage {
    pub hosts: Vec<HostRecord>,
    pub next: Option<String>,
}

fn invalid(message: String) -> CatalogError {
    CatalogError::new(CatalogCode::InvalidRegistration, message)
}

/// Checks an executor endpoint: an http(s) URL with a host, gRPC-safe headers, bounded values.
pub fn check_endpoint(e: &Endpoint) -> Result<(), CatalogError> {
    if e.url.len() > MAX_URL {
        return Err(invalid(format!("endpoint url is over {MAX_URL} bytes")));
    }
    let uri: http::Uri = e
        .url
        .parse()
        .map_err(|err| invalid(format!("endpoint url `{}`: {err}", shown(&e.url))))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(invalid(format!(
            "endpoint url `{}` must be http:// or https:// with a host",
            shown(&e.url)
        )));
    }
    if e.headers.len() > MAX_HEADERS {
        return Err(invalid(format!(
            "endpoint has {} headers, over {MAX_HEADERS}",
            e.headers.len()
        )));
    }
    for (name, value) in &e.headers {
        let key_ok = !name.is_empty()
            && !name.ends_with("-bin")
            && name.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
            });
        if !key_ok {
            return Err(invalid(format!(
                "header name `{}` must be lowercase ASCII letters, digits, `-`, `_` or `.` (binary `-bin` headers are not supported)",
                shown(name)
            )));
        }
        if value.len() > MAX_HEADER_VALUE || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(invalid(format!(
                "header `{name}` must be printable ASCII of at most {MAX_HEADER_VALUE} bytes"
            )));
        }
    }
    if e.timeout_ms > MAX_TIMEOUT_MS {
        return Err(invalid(format!(
            "timeout_ms {} is over {MAX_TIMEOUT_MS}",
            e.timeout_ms
        )));
    }
    Ok(())
}

/// Notes about accepted tools: a declared category that the `readOnlyHint` contradicts.
fn registration_warnings(tools: &[RegisteredTool]) -> Vec<Diagnostic> {
    tools
        .iter()
        .filter_map(|t| {
            let declared = t.category?;
            let hinted = match t.descriptor.annotations().read_only_hint {
                Some(true) => Category::Exploration,
                Some(false) => Category::Action,
                None => return None,
            };
            // An external tool has no built-in category, so its declaration (the fallback's
            // second level) decides over the hint (the third).
            (declared != hinted).then(|| {
                Diagnostic::new(
                    diag::CATEGORY_DISAGREES_WITH_HINT,
                    format!(
                        "declared {} although readOnlyHint says {}; the declaration wins",
                        declared.as_str(),
                        hinted.as_str()
                    ),
                    t.descriptor.id().to_string(),
                )
            })
        })
        .collect()
}

impl Catalog {
    /// Stores a host's registration, replacing its previous tool set as a whole.
    pub async fn register_host(
        &self,
        req: RegisterHost,
    ) -> Result<(HostRecord, Vec<Diagnostic>), CatalogError> {
        let host_id = parse_segment("host id", &req.host_id)?;
        let display_name = if req.display_name.is_empty() {
            host_id.clone()
        } else {
            req.display_name.clone()
        };
        if display_name.len() > MAX_DISPLAY_NAME || display_name.chars().any(char::is_control) {
            return Err(invalid(format!(
                "display name is over {MAX_DISPLAY_NAME} bytes or has control characters"
            )));
        }
        check_endpoint(&req.endpoint)?;
        let max = self.config.limits.max_tools_per_host;
        if req.tools.len() > max {
            return Err(invalid(format!(
                "the registration has {} tools, over the {max} a host may register",
                req.tools.len()
            )));
        }
        let mut seen = HashSet::new();
        for t in &req.tools {
            if !seen.insert(t.descriptor.id()) {
                return Err(CatalogError::Core(CoreError::new(
                    TOOL_DUPLICATE_ID,
                    format!(
                        "`{}` is listed twice in the registration of external host `{host_id}`",
                        t.descriptor.id()
                    ),
                )));
            }
        }
        let warnings = registration_warnings(&req.tools);
        let cell = self.cell(&req.cell).await?;
        let candidate = HostRecord {
            cell_id: req.cell.to_string(),
            host_id: host_id.clone(),
            display_name,
            endpoint: req.endpoint,
            tools: req.tools,
            generation: 0,
            registered_at_unix_ms: 0,
        };
        self.check_host_ids(&cell, &candidate).await?;

        let key = host_key(&req.cell, &host_id)?;
        if self.records.head(&key).await?.is_none() {
            let max_hosts = self.config.limits.max_hosts_per_cell;
            let hosts = self
                .records
                .keys(&hosts_prefix(&req.cell)?, max_hosts)
                .await?;
            if hosts.len() >= max_hosts {
                return Err(CatalogError::new(
                    CatalogCode::LimitExceeded,
                    format!(
                        "cell `{}` already has {max_hosts} tool hosts, its configured maximum",
                        req.cell
                    ),
                ));
            }
        }
        let expected = req.expected_generation;
        let written = self
            .records
            .update::<HostRecord, _>(&key, |current| {
                let have = current.as_ref().map(|c| c.generation);
                if !crate::policies::version_matches(expected, have) {
                    return Err(CatalogError::new(
                        CatalogCode::GenerationConflict,
                        match have {
                            Some(g) => format!(
                                "host `{host_id}` is at generation {g}, not {}",
                                expected.unwrap_or_default()
                            ),
                            None => format!(
                                "host `{host_id}` is not registered, so it is not at generation {}",
                                expected.unwrap_or_default()
                            ),
                        },
                    ));
                }
                let mut next = candidate.clone();
                next.generation = have.unwrap_or(0) + 1;
                next.registered_at_unix_ms = now_unix_ms();
                Ok(Update::Write(next))
            })
            .await?
            .ok_or_else(|| invalid(format!("host `{host_id}` was not written")))?;
        tracing::info!(cell = %req.cell, host = %host_id, tools = written.tools.len(), generation = written.generation, "tool host registered");
        self.refresh_stored(&cell).await;
        Ok((written, warnings))
    }

    /// Removes a host and all its tools; returns the removed record.
    pub async fn deregister_host(
        &self,
        cell: &CellId,
        host_id: &str,
        expected: Option<u64>,
    ) -> Result<HostRecord, CatalogError> {
        let host_id = parse_segment("host id", host_id)?;
        let key = host_key(cell, &host_id)?;
        let removed = self
            .records
            .delete::<HostRecord, _>(&key, |current| {
                if crate::policies::version_matches(expected, Some(current.generation)) {
                    Ok(true)
                } else {
                    Err(CatalogError::new(
                        CatalogCode::GenerationConflict,
                        format!(
                            "host `{host_id}` is at generation {}, not {}",
                            current.generation,
                            expected.unwrap_or_default()
                        ),
                    ))
                }
            })
            .await?
            .ok_or_else(|| {
                CatalogError::new(
                    CatalogCode::HostNotFound,
                    format!("no tool host `{host_id}` in cell `{cell}`"),
                )
            })?;
        tracing::info!(cell = %cell, host = %host_id, "tool host deregistered");
        let c = self.cell(cell).await?;
        self.refresh_stored(&c).await;
        Ok(removed)
    }

    /// A page of hosts, ordered by host id, read from the store.
    pub async fn list_hosts(
        &self,
        cell: &CellId,
        page_size: usize,
        after: &str,
    ) -> Result<HostPage, CatalogError> {
        let start = if after.is_empty() {
            None
        } else {
            Some(host_key(cell, &parse_segment("page token", after)?)?)
        };
        let (keys, next) = self
            .records
            .page(&hosts_prefix(cell)?, start.as_ref(), page_size)
            .await?;
        let mut hosts = Vec::with_capacity(keys.len());
        for key in &keys {
            if let Some((_, h)) = self.records.get::<HostRecord>(key).await? {
                hosts.push(h);
            }
        }
        Ok(HostPage {
            hosts,
            next: next.map(|k| k.name().to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn endpoint(url: &str, headers: &[(&str, &str)]) -> Endpoint {
        Endpoint {
            url: url.into(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            timeout_ms: 0,
            max_concurrent_calls: 0,
        }
    }

    #[test]
    fn endpoints_are_checked() {
        assert!(
            check_endpoint(&endpoint(
                "http://127.0.0.1:7001",
                &[("authorization", "Bearer x")]
            ))
            .is_ok()
        );
        for bad in [
            endpoint("127.0.0.1:7001", &[]),
            endpoint("ftp://host", &[]),
            endpoint("http://", &[]),
            endpoint("http://h", &[("Authorization", "x")]),
            endpoint("http://h", &[("trace-bin", "x")]),
            endpoint("http://h", &[("a", "line\nbreak")]),
        ] {
            assert_eq!(
                check_endpoint(&bad).unwrap_err().code(),
                "catalog.invalid_registration",
                "{bad:?}"
            );
        }
    }
}
