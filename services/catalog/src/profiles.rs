//! Agent profiles: put, get, list and delete, versioned with the store's
//! compare-and-swap, validated by the core's profile parser; and the start-up directory of
//! profile files.
//!
//! A profile naming tools that do not exist yet is accepted with warnings (tools may appear
//! later). Unknown fields, zero limits and `builtin:task.return` in `tools.allow` are refused by
//! the parser. This module never changes a profile's meaning: it stores the document exactly as
//! written.
//!
//! **Files and the API.** At start-up each file of the profile directory is upserted when the
//! stored profile is absent or the file changed since it was last loaded (its SHA-256 is kept in
//! the record). A profile edited through the API keeps that edit until its file changes again; a
//! profile deleted through the API comes back at the next start while its file exists.

use std::path::{Path, PathBuf};

use toolplane_core::error::PROFILE_INVALID;
use toolplane_core::{CoreError, Profile};
use toolplane_store::Key;

use crate::cell::{CellId, parse_segment};
use crate::error::{CatalogCode, CatalogError};
use crate::listing::Diagnostic;
use crate::policies::version_matches;
use crate::query;
use crate::records::{
    ProfileRecord, SourceFile, Update, now_unix_ms, profile_key, profiles_prefix, sha256_hex,
};
use crate::state::Catalog;

/// A stored profile, parsed.
#[derive(Debug, Clone)]
pub struct StoredProfile {
    pub record: ProfileRecord,
    pub profile: Profile,
}

/// What a profile write asks for.
#[derive(Debug, Clone)]
pub struct PutProfile<'a> {
    pub cell: &'a CellId,
    /// Empty: take the document's `id`.
    pub profile_id: &'a str,
    pub text: &'a str,
    pub expected_version: Option<u64>,
    pub validate_only: bool,
}

/// A page of profiles.
#[derive(Debug, Clone)]
pub struct ProfilePage {
    pub profiles: Vec<StoredProfile>,
    pub next: Option<String>,
}

fn parse_stored(key: &Key, record: ProfileRecord) -> Result<StoredProfile, CatalogError> {
    let profile = Profile::from_json(&record.profile_json)
        .map_err(|e| CatalogError::new(CatalogCode::CorruptRecord, format!("{key}: {e}")))?;
    Ok(StoredProfile { record, profile })
}

fn not_found(cell: &CellId, id: &str) -> CatalogError {
    CatalogError::new(
        CatalogCode::ProfileNotFound,
        format!("no profile `{id}` in cell `{cell}`"),
    )
}

impl Catalog {
    /// One stored profile; `profile.not_found` when absent.
    pub async fn profile(&self, cell: &CellId, id: &str) -> Result<StoredProfile, CatalogError> {
        let id = parse_segment("profile id", id)?;
        let key = profile_key(cell, &id)?;
        match self.records.get::<ProfileRecord>(&key).await? {
            Some((_, record)) => parse_stored(&key, record),
            None => Err(not_found(cell, &id)),
        }
    }

    /// Validates, checks the expected version and stores a profile; returns it as stored with
    /// the warnings (selectors that match nothing yet, named tools that cannot be used now).
    pub async fn put_profile(
        &self,
        req: PutProfile<'_>,
    ) -> Result<(StoredProfile, Vec<Diagnostic>), CatalogError> {
        let profile = Profile::from_json(req.text)?;
        if !req.profile_id.is_empty() && req.profile_id != profile.id {
            return Err(CatalogError::Core(CoreError::new(
                PROFILE_INVALID,
                format!(
                    "profile_id `{}` differs from the document's id `{}`",
                    crate::cell::shown(req.profile_id),
                    profile.id
                ),
            )));
        }
        let cell = self.cell(req.cell).await?;
        let statuses = cell.statuses();
        let mcp = statuses
            .iter()
            .find(|s| s.source == toolplane_core::catalog::ToolSource::Mcp);
        let warnings = query::profile_warnings(&cell.assembled(), &profile, mcp)?;
        let key = profile_key(req.cell, &profile.id)?;
        let current = self.records.get::<ProfileRecord>(&key).await?;
        if current.is_none() {
            self.check_profile_count(req.cell).await?;
        }
        if req.validate_only {
            let have = current.as_ref().map(|(_, r)| r.version);
            if !version_matches(req.expected_version, have) {
                return Err(version_conflict(req.expected_version, have));
            }
            let record = ProfileRecord {
                cell_id: req.cell.to_string(),
                profile_id: profile.id.clone(),
                version: have.unwrap_or(0) + 1,
                updated_at_unix_ms: now_unix_ms(),
                profile_json: req.text.to_owned(),
                source_file: current.and_then(|(_, r)| r.source_file),
            };
            return Ok((StoredProfile { record, profile }, warnings));
        }
        let written = self
            .records
            .update::<ProfileRecord, _>(&key, |current| {
                let have = current.as_ref().map(|c| c.version);
                if !version_matches(req.expected_version, have) {
                    return Err(version_conflict(req.expected_version, have));
                }
                Ok(Update::Write(ProfileRecord {
                    cell_id: req.cell.to_string(),
                    profile_id: profile.id.clone(),
                    version: have.unwrap_or(0) + 1,
                    updated_at_unix_ms: now_unix_ms(),
                    profile_json: req.text.to_owned(),
                    // Kept so that an unchanged start-up file does not undo this edit.
                    source_file: current.and_then(|c| c.source_file),
                }))
            })
            .await?
            .ok_or_else(|| not_found(req.cell, &profile.id))?;
        tracing::info!(cell = %req.cell, profile = %profile.id, version = written.version, "profile written");
        self.refresh_stored(&cell).await;
        Ok((
            StoredProfile {
                record: written,
                profile,
            },
            warnings,
        ))
    }

    async fn check_profile_count(&self, cell: &CellId) -> Result<(), CatalogError> {
        let max = self.config.limits.max_profiles_per_cell;
        let keys = self.records.keys(&profiles_prefix(cell)?, max).await?;
        if keys.len() >= max {
            return Err(CatalogError::new(
                CatalogCode::LimitExceeded,
                format!("cell `{cell}` already has {max} profiles, its configured maximum"),
            ));
        }
        Ok(())
    }

    /// Deletes a profile; returns the version deleted.
    pub async fn delete_profile(
        &self,
        cell: &CellId,
        id: &str,
        expected: Option<u64>,
    ) -> Result<u64, CatalogError> {
        let id = parse_segment("profile id", id)?;
        let key = profile_key(cell, &id)?;
        let deleted = self
            .records
            .delete::<ProfileRecord, _>(&key, |current| {
                if version_matches(expected, Some(current.version)) {
                    Ok(true)
                } else {
                    Err(version_conflict(expected, Some(current.version)))
                }
            })
            .await?
            .ok_or_else(|| not_found(cell, &id))?;
        tracing::info!(cell = %cell, profile = %id, version = deleted.version, "profile deleted");
        let c = self.cell(cell).await?;
        self.refresh_stored(&c).await;
        Ok(deleted.version)
    }

    /// A page of profiles, ordered by id.
    pub async fn list_profiles(
        &self,
        cell: &CellId,
        page_size: usize,
        after: &str,
    ) -> Result<ProfilePage, CatalogError> {
        let prefix = profiles_prefix(cell)?;
        let start = if after.is_empty() {
            None
        } else {
            Some(profile_key(cell, &parse_segment("page token", after)?)?)
        };
        let (keys, next) = self
            .records
            .page(&prefix, start.as_ref(), page_size)
            .await?;
        let mut profiles = Vec::with_capacity(keys.len());
        for key in &keys {
            if let Some((_, record)) = self.records.get::<ProfileRecord>(key).await? {
                profiles.push(parse_stored(key, record)?);
            }
        }
        Ok(ProfilePage {
            profiles,
            next: next.map(|k| k.name().to_owned()),
        })
    }

    /// Upserts every profile file of a directory: `<id>.json` into the default cell,
    /// `<cell>/<id>.json` into that cell. A file that cannot be read or is not a valid profile
    /// stops the start-up with `profile.file_invalid`.
    pub async fn load_profile_dir(&self, dir: &Path) -> Result<Vec<String>, CatalogError> {
        let mut loaded = Vec::new();
        let root_files = json_files(dir).await?;
        for path in root_files {
            loaded.extend(
                self.load_profile_file(&CellId::default_cell(), &path)
                    .await?,
            );
        }
        for sub in subdirs(dir).await? {
            let name = sub.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let cell = CellId::parse(name).map_err(|e| {
                file_invalid(
                    &sub,
                    &format!("a subdirectory must be named by a cell id: {e}"),
                )
            })?;
            for path in json_files(&sub).await? {
                loaded.extend(self.load_profile_file(&cell, &path).await?);
            }
        }
        Ok(loaded)
    }

    /// Upserts one file; returns the profile id if it was written.
    async fn load_profile_file(
        &self,
        cell: &CellId,
        path: &Path,
    ) -> Result<Option<String>, CatalogError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| file_invalid(path, &e.to_string()))?;
        let text =
            String::from_utf8(bytes).map_err(|_| file_invalid(path, "the file is not UTF-8"))?;
        let profile = Profile::from_json(&text).map_err(|e| file_invalid(path, &e.to_string()))?;
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if stem != profile.id {
            return Err(file_invalid(
                path,
                &format!(
                    "the file of profile `{}` must be named `{}.json`",
                    profile.id, profile.id
                ),
            ));
        }
        let sha = sha256_hex(text.as_bytes());
        let source = SourceFile {
            path: path.display().to_string(),
            sha256: sha.clone(),
        };
        let key = profile_key(cell, &profile.id)?;
        let written = self
            .records
            .update::<ProfileRecord, _>(&key, |current| {
                let unchanged = current
                    .as_ref()
                    .and_then(|c| c.source_file.as_ref())
                    .is_some_and(|f| f.sha256 == sha);
                if unchanged {
                    return Ok(Update::Keep(None));
                }
                Ok(Update::Write(ProfileRecord {
                    cell_id: cell.to_string(),
                    profile_id: profile.id.clone(),
                    version: current.map_or(0, |c| c.version) + 1,
                    updated_at_unix_ms: now_unix_ms(),
                    profile_json: text.clone(),
                    source_file: Some(source.clone()),
                }))
            })
            .await?;
        Ok(written.map(|r| {
            tracing::info!(cell = %cell, profile = %r.profile_id, version = r.version, file = %path.display(), "profile loaded from file");
            r.profile_id
        }))
    }
}

fn version_conflict(expected: Option<u64>, have: Option<u64>) -> CatalogError {
    let message = match (expected, have) {
        (Some(0), Some(v)) => format!("the profile already exists at version {v}"),
        (Some(e), Some(v)) => format!("expected version {e}, stored version is {v}"),
        (Some(e), None) => format!("expected version {e}, but the profile does not exist"),
        (None, _) => "the profile changed concurrently".to_owned(),
    };
    CatalogError::new(CatalogCode::ProfileVersionConflict, message)
}

fn file_invalid(path: &Path, why: &str) -> CatalogError {
    CatalogError::new(
        CatalogCode::ProfileFileInvalid,
        format!("{}: {why}", path.display()),
    )
}

async fn entries(dir: &Path) -> Result<Vec<(PathBuf, bool)>, CatalogError> {
    let mut read = tokio::fs::read_dir(dir)
        .await
        .map_err(|e| file_invalid(dir, &format!("cannot read the profile directory: {e}")))?;
    let mut out = Vec::new();
    while let Some(entry) = read
        .next_entry()
        .await
        .map_err(|e| file_invalid(dir, &e.to_string()))?
    {
        let kind = entry
            .file_type()
            .await
            .map_err(|e| file_invalid(&entry.path(), &e.to_string()))?;
        // Hidden entries (`.git`, editor swap files) are not profiles.
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        out.push((entry.path(), kind.is_dir()));
    }
    out.sort();
    Ok(out)
}

async fn json_files(dir: &Path) -> Result<Vec<PathBuf>, CatalogError> {
    Ok(entries(dir)
        .await?
        .into_iter()
        .filter(|(p, is_dir)| !is_dir && p.extension().is_some_and(|e| e == "json"))
        .map(|(p, _)| p)
        .collect())
}

async fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CatalogError> {
    Ok(entries(dir)
        .await?
        .into_iter()
        .filter(|(_, is_dir)| *is_dir)
        .map(|(p, _)| p)
        .collect())
}
