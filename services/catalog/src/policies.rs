//! The policy layers the catalog keeps: the platform policy of each cell (its
//! disabled tools and the denies no profile can override) and the user policy of each actor.
//!
//! Owns parsing them (the core's `PlatformPolicy` / `UserPolicy`, unknown fields rejected),
//! their limits, their versioned storage and the warnings a write gets. It never resolves a
//! decision itself: the core's policy resolution does, inside the snapshot compiler.

use serde::de::DeserializeOwned;
use toolplane_core::policy::{PlatformPolicy, UserPolicy};
use toolplane_core::selector::ToolSelector;

use crate::cell::{ActorId, CellId};
use crate::error::{CatalogCode, CatalogError};
use crate::listing::Diagnostic;
use crate::query;
use crate::records::{PolicyRecord, Update, now_unix_ms, platform_policy_key, user_policy_key};
use crate::state::Catalog;

/// Largest policy document accepted, in bytes.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;
/// Most selectors in one policy list.
pub const MAX_POLICY_SELECTORS: usize = 1000;

/// A policy as stored, parsed.
#[derive(Debug, Clone)]
pub struct Stored<T> {
    pub record: PolicyRecord,
    pub policy: T,
}

fn parse<T: DeserializeOwned>(text: &str) -> Result<T, CatalogError> {
    if text.len() > MAX_POLICY_BYTES {
        return Err(CatalogError::new(
            CatalogCode::PolicyInvalid,
            format!("policy is {} bytes, over {MAX_POLICY_BYTES}", text.len()),
        ));
    }
    let invalid = |m: String| CatalogError::new(CatalogCode::PolicyInvalid, m);
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    // serde would also read a struct from an array; a policy is an object.
    if !value.is_object() {
        return Err(invalid("a policy is a JSON object".to_owned()));
    }
    serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
}

/// Parses a platform policy document, with its limits.
pub fn parse_platform(text: &str) -> Result<PlatformPolicy, CatalogError> {
    let p: PlatformPolicy = parse(text)?;
    check_lists([&p.disabled_tools, &p.deny, &p.approval_required])?;
    Ok(p)
}

/// Parses a user policy document, with its limits.
pub fn parse_user(text: &str) -> Result<UserPolicy, CatalogError> {
    let p: UserPolicy = parse(text)?;
    check_lists([&p.deny, &p.approval_required])?;
    Ok(p)
}

fn check_lists<const N: usize>(lists: [&Vec<ToolSelector>; N]) -> Result<(), CatalogError> {
    match lists.iter().find(|l| l.len() > MAX_POLICY_SELECTORS) {
        Some(l) => Err(CatalogError::new(
            CatalogCode::PolicyInvalid,
            format!(
                "a selector list has {} entries, over {MAX_POLICY_SELECTORS}",
                l.len()
            ),
        )),
        None => Ok(()),
    }
}

/// The version check every versioned write makes: unset writes unconditionally, 0 means the
/// document must not exist yet, n means it must be at version n.
pub fn version_matches(expected: Option<u64>, current: Option<u64>) -> bool {
    match (expected, current) {
        (None, _) => true,
        (Some(0), None) => true,
        (Some(want), Some(have)) => want == have,
        (Some(_), None) => false,
    }
}

impl Catalog {
    pub async fn platform_policy(
        &self,
        cell: &CellId,
    ) -> Result<Option<Stored<PlatformPolicy>>, CatalogError> {
        let key = platform_policy_key(cell)?;
        match self.records.get::<PolicyRecord>(&key).await? {
            None => Ok(None),
            Some((_, record)) => {
                let policy = parse_platform(&record.policy_json).map_err(|e| {
                    CatalogError::new(CatalogCode::CorruptRecord, format!("{key}: {e}"))
                })?;
                Ok(Some(Stored { record, policy }))
            }
        }
    }

    pub async fn user_policy(
        &self,
        cell: &CellId,
        actor: &ActorId,
    ) -> Result<Option<Stored<UserPolicy>>, CatalogError> {
        let key = user_policy_key(cell, actor)?;
        match self.records.get::<PolicyRecord>(&key).await? {
            None => Ok(None),
            Some((_, record)) => {
                let policy = parse_user(&record.policy_json).map_err(|e| {
                    CatalogError::new(CatalogCode::CorruptRecord, format!("{key}: {e}"))
                })?;
                Ok(Some(Stored { record, policy }))
            }
        }
    }

    pub async fn put_platform_policy(
        &self,
        cell: &CellId,
        text: &str,
        expected: Option<u64>,
    ) -> Result<(PolicyRecord, Vec<Diagnostic>), CatalogError> {
        let policy = parse_platform(text)?;
        let key = platform_policy_key(cell)?;
        let record = self.write_policy(&key, text, expected, None).await?;
        let assembled = self.cell(cell).await?.assembled();
        let warnings = query::policy_warnings(
            &assembled,
            policy
                .disabled_tools
                .iter()
                .chain(&policy.deny)
                .chain(&policy.approval_required),
        );
        Ok((record, warnings))
    }

    pub async fn put_user_policy(
        &self,
        cell: &CellId,
        actor: &ActorId,
        text: &str,
        expected: Option<u64>,
    ) -> Result<(PolicyRecord, Vec<Diagnostic>), CatalogError> {
        let policy = parse_user(text)?;
        let key = user_policy_key(cell, actor)?;
        let record = self
            .write_policy(&key, text, expected, Some(actor.as_str().to_owned()))
            .await?;
        let assembled = self.cell(cell).await?.assembled();
        let warnings = query::policy_warnings(
            &assembled,
            policy.deny.iter().chain(&policy.approval_required),
        );
        Ok((record, warnings))
    }

    async fn write_policy(
        &self,
        key: &toolplane_store::Key,
        text: &str,
        expected: Option<u64>,
        actor_id: Option<String>,
    ) -> Result<PolicyRecord, CatalogError> {
        let written = self
            .records
            .update::<PolicyRecord, _>(key, |current| {
                let have = current.as_ref().map(|c| c.version);
                if !version_matches(expected, have) {
                    return Err(CatalogError::new(
                        CatalogCode::PolicyVersionConflict,
                        format!(
                            "expected version {}, stored version is {}",
                            expected.unwrap_or_default(),
                            have.unwrap_or_default()
                        ),
                    ));
                }
                Ok(Update::Write(PolicyRecord {
                    version: have.unwrap_or(0) + 1,
                    updated_at_unix_ms: now_unix_ms(),
                    policy_json: text.to_owned(),
                    actor_id: actor_id.clone(),
                }))
            })
            .await?;
        written.ok_or_else(|| {
            CatalogError::new(CatalogCode::CorruptRecord, format!("{key}: write lost"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_reject_unknown_fields_and_bad_selectors() {
        assert!(
            parse_platform(r#"{"disabledTools":["builtin:dice.roll"],"onDenied":"fail_run"}"#)
                .is_ok()
        );
        for bad in [
            r#"{"disabled":["builtin:dice.roll"]}"#,
            r#"{"deny":["nope"]}"#,
            "[]",
            "not json",
        ] {
            assert_eq!(
                parse_platform(bad).unwrap_err().code(),
                "policy.invalid",
                "{bad}"
            );
        }
        assert!(parse_user(r#"{"deny":["mcp:github/*"]}"#).is_ok());
        assert_eq!(
            parse_user(r#"{"disabledTools":[]}"#).unwrap_err().code(),
            "policy.invalid"
        );
    }

    #[test]
    fn version_rules() {
        assert!(version_matches(None, Some(3)));
        assert!(version_matches(Some(0), None));
        assert!(!version_matches(Some(0), Some(1)));
        assert!(version_matches(Some(2), Some(2)));
        assert!(!version_matches(Some(2), Some(3)));
        assert!(!version_matches(Some(2), None));
    }
}
