//! The filesystem backend's listing: a walk of the store root's directories in key order.

use std::{io, path::Path};

use super::{FileKind, Inner, escape, io_at};
use crate::{Key, StoreError, key::is_valid_segment};

/// A depth-first walk that yields keys in byte order, skipping whole subtrees before
/// `start_after` and stopping once it has `want` keys.
pub(super) struct Walk<'a> {
    pub(super) start_after: Option<&'a str>,
    pub(super) want: usize,
}

impl Walk<'_> {
    pub(super) fn dir(
        &self,
        inner: &Inner,
        dir: &Path,
        key_prefix: &str,
        keys: &mut Vec<Key>,
    ) -> Result<(), StoreError> {
        let entries = match inner.fs.read_dir(dir) {
            Ok(entries) => entries,
            // Removed since we looked: nothing below it any more.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_at("read directory", dir, e)),
        };
        // Sort a directory `d` as `d/`: every key below it starts with `d/`, so this orders whole
        // subtrees among their siblings exactly as their keys order (`d-x` < `d/y` < `d0`).
        let mut children: Vec<(String, FileKind)> = Vec::with_capacity(entries.len());
        for entry in entries {
            // Names that can not be a key segment (the backend's own `.toolplane`, foreign
            // files with non-UTF-8 names) are not objects.
            let Some(name) = entry.name.to_str().filter(|name| is_valid_segment(name)) else {
                continue;
            };
            match entry.kind {
                FileKind::File => children.push((name.to_owned(), FileKind::File)),
                FileKind::Dir => children.push((format!("{name}/"), FileKind::Dir)),
                kind => return Err(escape(dir.join(name), kind)),
            }
        }
        children.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in children {
            if keys.len() >= self.want {
                return Ok(());
            }
            let full = format!("{key_prefix}{name}");
            match kind {
                FileKind::Dir => {
                    // Skip the subtree if every key in it sorts at or before `start_after`.
                    if let Some(after) = self.start_after
                        && after > full.as_str()
                        && !after.starts_with(&full)
                    {
                        continue;
                    }
                    let sub = dir.join(&name[..name.len() - 1]);
                    self.dir(inner, &sub, &full, keys)?;
                }
                _ => {
                    if self.start_after.is_some_and(|after| full.as_str() <= after) {
                        continue;
                    }
                    // Deep foreign paths can exceed the key length limit: not objects.
                    if let Ok(key) = Key::new(full) {
                        keys.push(key);
                    }
                }
            }
        }
        Ok(())
    }
}
