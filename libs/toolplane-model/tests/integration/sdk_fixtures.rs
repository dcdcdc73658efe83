//! Writes the SDK cross-check fixture set, `tests/provider-sdk/fixtures/<format>/<kind>__<case>.json`
//! at the workspace root: the tools, tool choices, result messages and histories we emit, and the
//! sample responses we decode. `tests/provider-sdk/check.py` validates every file against the
//! providers' own SDK types.
//!
//! The fixtures are committed. This test fails when what the code emits differs from what is on
//! disk (or a file is missing or stale), so a wire change cannot slip past the SDK check;
//! `UPDATE_FIXTURES=1 cargo test -p toolplane-model --test integration sdk_fixtures` rewrites them, after which
//! check.py must be run again.
// Test code: a panic with its message is the failure report, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use toolplane_model::ProviderFormat;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/provider-sdk/fixtures")
        .components()
        .collect()
}

/// Every fixture file, relative path → content, in a deterministic order.
fn expected_files() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for format in ProviderFormat::ALL {
        for output in common::outputs(format) {
            // What a turn decodes to is ours, not the provider's: the snapshot tables cover it.
            if output.kind == "decoded" {
                continue;
            }
            let text = serde_json::to_string_pretty(&output.value).unwrap() + "\n";
            let path = format!("{format}/{}.json", output.name());
            assert!(files.insert(path.clone(), text).is_none(), "{path} twice");
        }
    }
    files
}

fn files_on_disk(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let Ok(formats) = fs::read_dir(dir) else {
        return files;
    };
    for format in formats {
        let format = format.unwrap().path();
        if !format.is_dir() {
            continue;
        }
        for file in fs::read_dir(&format).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "json") {
                let rel = file
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(rel, fs::read_to_string(&file).unwrap());
            }
        }
    }
    files
}

#[test]
fn sdk_fixtures_match_what_the_code_emits() {
    let dir = fixtures_dir();
    let expected = expected_files();
    let on_disk = files_on_disk(&dir);
    if std::env::var_os("UPDATE_FIXTURES").is_some_and(|v| v == "1") {
        for stale in on_disk.keys().filter(|k| !expected.contains_key(*k)) {
            fs::remove_file(dir.join(stale)).unwrap();
        }
        for (rel, text) in &expected {
            let path = dir.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            if on_disk.get(rel) != Some(text) {
                fs::write(&path, text).unwrap();
            }
        }
        return;
    }
    let mut problems = Vec::new();
    for (rel, text) in &expected {
        match on_disk.get(rel) {
            None => problems.push(format!("missing: {rel}")),
            Some(have) if have != text => problems.push(format!("differs: {rel}")),
            Some(_) => {}
        }
    }
    for rel in on_disk.keys().filter(|k| !expected.contains_key(*k)) {
        problems.push(format!("stale: {rel}"));
    }
    assert!(
        problems.is_empty(),
        "the SDK fixtures in {} are out of date:\n  {}\nrun `UPDATE_FIXTURES=1 cargo test -p \
         toolplane-model --test integration sdk_fixtures`, then `python3 tests/provider-sdk/check.py`",
        dir.display(),
        problems.join("\n  ")
    );
}

#[test]
fn fixture_set_covers_every_kind_for_every_format() {
    let files = expected_files();
    for format in ProviderFormat::ALL {
        let (choice_kind, _) = common::choice_kind(format);
        for kind in [
            "tools",
            choice_kind,
            "input",
            "history",
            "results",
            "trimmed",
        ] {
            assert!(
                files
                    .keys()
                    .any(|k| k.starts_with(&format!("{format}/{kind}__"))),
                "{format} has no {kind} fixture"
            );
        }
    }
}
