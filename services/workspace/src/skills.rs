//! Installed skill packages: a folder with `SKILL.md` (YAML front matter `name`, `description`)
//! and other text files, imported into `cells/<cell>/skills/<name>.json` as one object (so a
//! re-import replaces a skill atomically). Owns import (symlinks refused, binaries skipped and
//! counted, limits), listing and loading; must never read outside the imported folder.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};
use toolplane_store::{Key, Precondition, Store, StoreError};

use crate::{
    engine::{now_ms, sha256_hex},
    error::WsError,
    limits::Limits,
    paths::valid_id,
};

/// An installed skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillPackage {
    pub name: String,
    pub description: String,
    pub version: String,
    pub imported_at_unix_ms: i64,
    /// Relative path → text.
    pub files: BTreeMap<String, String>,
    /// Files skipped at import (binary or over a limit).
    pub skipped: Vec<String>,
}

impl SkillPackage {
    pub fn total_bytes(&self) -> u64 {
        self.files.values().map(|t| t.len() as u64).sum()
    }
}

/// A non-fatal import finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportWarning {
    pub code: &'static str,
    pub message: String,
    pub subject: String,
}

/// The skills of every cell.
#[derive(Debug)]
pub struct Skills {
    store: Arc<dyn Store>,
    limits: Limits,
}

fn key(cell: &str, name: &str) -> Result<Key, WsError> {
    Ok(Key::new(format!("cells/{cell}/skills/{name}.json"))?)
}

fn import_failed(message: impl Into<String>) -> WsError {
    WsError::status("skill.import_failed", tonic::Code::InvalidArgument, message)
}

/// Refuses a skill folder outside `roots` (`skill.path_not_allowed`); `None` allows any path.
fn check_import_root(source: &Path, roots: Option<&[PathBuf]>) -> Result<(), WsError> {
    let Some(roots) = roots else { return Ok(()) };
    let refused = || {
        WsError::status(
            "skill.path_not_allowed",
            tonic::Code::PermissionDenied,
            "the folder is not under the workspace's skill_import_roots",
        )
    };
    let real = std::fs::canonicalize(source).map_err(|_| refused())?;
    let inside = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .any(|root| real.starts_with(root));
    if inside { Ok(()) } else { Err(refused()) }
}

/// The `name` and `description` of a `SKILL.md`'s front matter (`---` … `---`): plain, quoted and
/// block (`|`, `>`) scalars at the top level.
pub fn front_matter(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return out;
    }
    let body: Vec<&str> = lines.take_while(|l| l.trim_end() != "---").collect();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        i += 1;
        if line.starts_with(' ') || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        let value = if v == "|" || v == ">" || v == "|-" || v == ">-" {
            let mut block = Vec::new();
            while i < body.len() && (body[i].starts_with(' ') || body[i].trim().is_empty()) {
                block.push(body[i].trim());
                i += 1;
            }
            if v.starts_with('|') {
                block.join("\n")
            } else {
                block.join(" ")
            }
            .trim()
            .to_owned()
        } else if v.len() >= 2
            && ((v.starts_with('"') && v.ends_with('"'))
                || (v.starts_with('\'') && v.ends_with('\'')))
        {
            v[1..v.len() - 1].to_owned()
        } else {
            v.to_owned()
        };
        out.insert(k.trim().to_owned(), value);
    }
    out
}

impl Skills {
    pub fn new(store: Arc<dyn Store>, limits: Limits) -> Skills {
        Skills { store, limits }
    }

    /// Imports the folder `source` as a skill.
    pub async fn import(
        &self,
        cell: &str,
        source: &str,
        name: &str,
        replace: bool,
    ) -> Result<(SkillPackage, Vec<ImportWarning>), WsError> {
        let source = PathBuf::from(source);
        check_import_root(&source, self.limits.skill_import_roots.as_deref())?;
        let limits = self.limits.clone();
        let (files, skipped, warnings) =
            tokio::task::spawn_blocking(move || read_folder(&source, &limits))
                .await
                .map_err(|e| WsError::io(format!("import task failed: {e}")))??;
        let Some(skill_md) = files.get("SKILL.md") else {
            return Err(import_failed("the folder has no SKILL.md"));
        };
        let meta = front_matter(skill_md);
        let mut warnings = warnings;
        let name = if name.is_empty() {
            meta.get("name").cloned().unwrap_or_default()
        } else {
            name.to_owned()
        };
        if name.is_empty() {
            return Err(import_failed(
                "the skill has no name: set it in the SKILL.md front matter or in the request",
            ));
        }
        valid_id("skill name", &name).map_err(|e| import_failed(e.message().to_owned()))?;
        let description = meta.get("description").cloned().unwrap_or_default();
        if description.is_empty() {
            warnings.push(ImportWarning {
                code: "skill.missing_description",
                message: "SKILL.md front matter has no description".into(),
                subject: "SKILL.md".into(),
            });
        }
        let mut hasher_input = Vec::new();
        for (path, text) in &files {
            hasher_input.extend(path.as_bytes());
            hasher_input.push(0);
            hasher_input.extend(sha256_hex(text.as_bytes()).as_bytes());
        }
        let package = SkillPackage {
            name: name.clone(),
            description,
            version: sha256_hex(&hasher_input),
            imported_at_unix_ms: now_ms(),
            files,
            skipped,
        };
        let bytes = serde_json::to_vec(&package).map_err(|e| WsError::io(e.to_string()))?;
        self.install(cell, &name, bytes, replace).await?;
        Ok((package, warnings))
    }

    /// Stores a skill's package under its name: replacing whatever is there when `replace`,
    /// else only when no skill has that name (`skill.exists`).
    async fn install(
        &self,
        cell: &str,
        name: &str,
        bytes: Vec<u8>,
        replace: bool,
    ) -> Result<(), WsError> {
        let key = key(cell, name)?;
        if !replace {
            return match self.store.put_cas(&key, bytes, Precondition::Absent).await {
                Ok(_) => Ok(()),
                Err(StoreError::Conflict { .. }) => Err(WsError::status(
                    "skill.exists",
                    tonic::Code::AlreadyExists,
                    format!("skill {name} is installed; set replace to replace it"),
                )),
                Err(e) => Err(e.into()),
            };
        }
        loop {
            let expected = match self.store.head(&key).await? {
                Some(v) => Precondition::Version(v),
                None => Precondition::Absent,
            };
            match self.store.put_cas(&key, bytes.clone(), expected).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Every installed skill of a cell, by name.
    pub async fn list(&self, cell: &str) -> Result<Vec<SkillPackage>, WsError> {
        let prefix = Key::new(format!("cells/{cell}/skills"))?;
        let mut out = Vec::new();
        let mut after: Option<Key> = None;
        loop {
            let page = self.store.list(Some(&prefix), after.as_ref(), 1000).await?;
            for k in &page.keys {
                if let Some(object) = self.store.get(k).await? {
                    out.push(
                        serde_json::from_slice(&object.bytes)
                            .map_err(|e| WsError::io(format!("corrupt skill {k}: {e}")))?,
                    );
                }
            }
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(out)
    }

    pub async fn get(&self, cell: &str, name: &str) -> Result<Option<SkillPackage>, WsError> {
        if valid_id("skill name", name).is_err() {
            return Ok(None);
        }
        match self.store.get(&key(cell, name)?).await? {
            None => Ok(None),
            Some(object) => Ok(Some(
                serde_json::from_slice(&object.bytes)
                    .map_err(|e| WsError::io(format!("corrupt skill {name}: {e}")))?,
            )),
        }
    }

    pub async fn delete(&self, cell: &str, name: &str) -> Result<bool, WsError> {
        valid_id("skill name", name)?;
        Ok(self.store.delete(&key(cell, name)?, None).await?)
    }
}

type Folder = (BTreeMap<String, String>, Vec<String>, Vec<ImportWarning>);

// Long: one walk of the folder with every import limit checked in place, kept in one piece.
fn read_folder(root: &Path, limits: &Limits) -> Result<Folder, WsError> {
    let meta = std::fs::symlink_metadata(root)
        .map_err(|e| import_failed(format!("cannot read {}: {e}", root.display())))?;
    if !meta.is_dir() {
        return Err(import_failed(format!("{} is not a folder", root.display())));
    }
    let mut files = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut warnings = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&dir)
        };
        let entries = std::fs::read_dir(&path)
            .map_err(|e| import_failed(format!("cannot list {}: {e}", path.display())))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| import_failed(format!("cannot list {}: {e}", path.display())))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                warnings.push(ImportWarning {
                    code: "skill.invalid_name",
                    message: "a file name is not utf-8; skipped".into(),
                    subject: dir.clone(),
                });
                continue;
            };
            let rel = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            if name.starts_with('.') {
                continue;
            }
            let kind = entry
                .file_type()
                .map_err(|e| import_failed(format!("cannot inspect {rel}: {e}")))?;
            if kind.is_symlink() {
                warnings.push(ImportWarning {
                    code: "skill.symlink_refused",
                    message: "symlinks are never followed; skipped".into(),
                    subject: rel,
                });
                continue;
            }
            if kind.is_dir() {
                stack.push(rel);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            if files.len() + skipped.len() >= limits.max_skill_files {
                return Err(import_failed(format!(
                    "the skill has more than {} files",
                    limits.max_skill_files
                )));
            }
            // Never more than the text budget left (and one byte to see that it is over): a
            // large file is not read whole to learn that it cannot be taken.
            let budget = limits.max_skill_bytes.saturating_sub(total);
            let bytes = read_at_most(&entry.path(), budget.saturating_add(1))
                .map_err(|e| import_failed(format!("cannot read {rel}: {e}")))?;
            let over_budget = bytes.len() as u64 > budget;
            if shows_binary(&bytes, over_budget) {
                warnings.push(ImportWarning {
                    code: "skill.binary_skipped",
                    message: "not a utf-8 text file; skipped".into(),
                    subject: rel.clone(),
                });
                skipped.push(rel);
                continue;
            }
            if over_budget {
                return Err(import_failed(format!(
                    "the skill's text files exceed {} bytes",
                    limits.max_skill_bytes
                )));
            }
            total += bytes.len() as u64;
            let text = String::from_utf8(bytes)
                .map_err(|_| import_failed(format!("{rel} changed while it was read")))?;
            files.insert(rel, text);
        }
    }
    skipped.sort();
    Ok((files, skipped, warnings))
}

/// The first `limit` bytes of the file at `path` (all of it when shorter).
fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether `bytes` — a whole file, or its first bytes when `cut` — show that the file is not
/// text: a NUL byte, or bytes that are not UTF-8 (a character cut by the end of a prefix does not
/// count).
fn shows_binary(bytes: &[u8], cut: bool) -> bool {
    if bytes.contains(&0) {
        return true;
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => false,
        Err(e) => !cut || e.error_len().is_some(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn imports_read_only_under_the_configured_roots() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        for dir in [root.path(), outside.path()] {
            std::fs::create_dir_all(dir.join("skill")).unwrap();
            std::fs::write(
                dir.join("skill/SKILL.md"),
                "---\nname: s\ndescription: d\n---\nbody\n",
            )
            .unwrap();
        }
        let link = root.path().join("link");
        std::os::unix::fs::symlink(outside.path().join("skill"), &link).unwrap();
        let limits = Limits {
            skill_import_roots: Some(vec![root.path().to_owned()]),
            ..Limits::default()
        };
        let store: Arc<dyn Store> = Arc::new(toolplane_store::MemoryStore::new(Default::default()));
        let skills = Skills::new(store, limits);
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        skills
            .import("default", &path(root.path().join("skill")), "", false)
            .await
            .unwrap();
        let dotted = root.path().join("..").join(outside.path()).join("skill");
        for bad in [
            outside.path().join("skill"),
            link,
            dotted,
            PathBuf::from("/etc"),
        ] {
            let err = skills
                .import("default", &path(bad.clone()), "x", true)
                .await
                .unwrap_err();
            assert!(
                err.to_string().starts_with("skill.path_not_allowed: "),
                "{bad:?}: {err}"
            );
        }
    }

    /// A file larger than the text budget is never read whole: a huge binary file is skipped
    /// (the import goes on), a huge text file refuses the import.
    #[tokio::test]
    async fn a_huge_file_is_judged_from_its_first_bytes() {
        let root = tempfile::tempdir().unwrap();
        let skill = root.path().join("skill");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            "---\nname: s\ndescription: d\n---\nbody\n",
        )
        .unwrap();
        // A sparse terabyte of NUL bytes: reading it whole cannot even be attempted.
        let weights = std::fs::File::create(skill.join("weights.bin")).unwrap();
        weights.set_len(1 << 40).unwrap();
        let limits = Limits {
            max_skill_bytes: 4096,
            ..Limits::default()
        };
        let store: Arc<dyn Store> = Arc::new(toolplane_store::MemoryStore::new(Default::default()));
        let skills = Skills::new(store, limits);
        let path = skill.to_string_lossy().into_owned();
        skills.import("default", &path, "", false).await.unwrap();
        let (files, skipped, warnings) = read_folder(&skill, &skills_limits(4096)).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["SKILL.md"]);
        assert_eq!(skipped, ["weights.bin"]);
        assert!(warnings.iter().any(|w| w.code == "skill.binary_skipped"));
        std::fs::write(skill.join("long.md"), "é".repeat(3000)).unwrap();
        let err = read_folder(&skill, &skills_limits(4096)).unwrap_err();
        assert!(err.to_string().contains("exceed 4096 bytes"), "{err}");
        assert!(!shows_binary("é".as_bytes().get(..1).unwrap(), true));
        assert!(shows_binary("é".as_bytes().get(..1).unwrap(), false));
    }

    fn skills_limits(max_skill_bytes: u64) -> Limits {
        Limits {
            max_skill_bytes,
            ..Limits::default()
        }
    }

    #[test]
    fn reads_front_matter() {
        let meta = front_matter(
            "---\nname: pdf-tools\ndescription: \"Work with PDFs\"\nnotes: |\n  a\n  b\n---\n# body\n",
        );
        assert_eq!(meta.get("name").map(String::as_str), Some("pdf-tools"));
        assert_eq!(
            meta.get("description").map(String::as_str),
            Some("Work with PDFs")
        );
        assert_eq!(meta.get("notes").map(String::as_str), Some("a\nb"));
        assert!(front_matter("# no front matter").is_empty());
    }
}
