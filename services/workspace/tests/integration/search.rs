//! The parallel scan of `workspace.search_files` answers exactly as the sequential one: the same
//! hunks in the same order (so the same ranking), the same counts of skipped files, the same
//! stopping point under the byte budget and the same error, whatever the number of threads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, path::Path, sync::Arc};

use toolplane_text::{Matcher, normalize_query};
use toolplane_workspace::{
    tools::search::{ScanOptions, ScanOutcome, scan},
    tree::{NoHooks, Tree},
    wal::LogObject,
};

struct Corpus {
    _dir: tempfile::TempDir,
    tree: Tree,
    base: std::path::PathBuf,
    files: Vec<String>,
    pending: BTreeMap<String, LogObject>,
    bytes: u64,
}

/// ~2,400 files in nested folders: text with and without the terms (in any case, on any line),
/// files with NUL bytes or invalid UTF-8, files over the size limit, and audit objects still
/// pending (one shadowing a file, one only pending).
fn corpus() -> Corpus {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    for d in ["tree", "tmp"] {
        std::fs::create_dir(root.join(d)).unwrap();
    }
    let tree = Tree::new(
        Arc::new(toolplane_store::fs::RealFs),
        root.join("tree"),
        root.join("tmp"),
        "t".into(),
        Arc::new(NoHooks),
    );
    let base = tree.create_run_dir("default", "r").unwrap();
    let words = ["alpha", "Beta", "GAMMA", "delta", "beta-gamma", "omega"];
    let mut seed: u64 = 0x2545f4914f6cdd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut files = Vec::new();
    let mut bytes = 0u64;
    for f in 0..2_400u32 {
        let rel = format!("output/d{}/e{}/f{f:04}.md", f % 7, f % 3);
        let path = base.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut content: Vec<u8> = Vec::new();
        let lines = 1 + next() % 60;
        for _ in 0..lines {
            for _ in 0..(next() % 12) {
                content.extend_from_slice(words[(next() % words.len() as u64) as usize].as_bytes());
                content.push(b' ');
            }
            content.push(b'\n');
        }
        match f % 97 {
            3 => content.push(0),
            5 => content.extend_from_slice(&[0xff, 0xfe]),
            7 => content.extend(std::iter::repeat_n(b'x', 5_000)),
            _ => {}
        }
        bytes += content.len() as u64;
        std::fs::write(&path, &content).unwrap();
        files.push(rel);
    }
    let mut pending = BTreeMap::new();
    for (path, bytes) in [
        (files[10].clone(), &b"pending beta gamma\nbeta\n"[..]),
        (
            "tool-results/i/only-pending.json".to_owned(),
            &b"{\"beta\": \"gamma\"}"[..],
        ),
    ] {
        pending.insert(
            path.clone(),
            LogObject::in_memory(path, Arc::new(bytes.to_vec()), 0),
        );
    }
    files.push("tool-results/i/only-pending.json".to_owned());
    // A listed file that disappeared before the scan is skipped, not counted.
    files.push("output/gone.md".to_owned());
    files.sort();
    Corpus {
        _dir: dir,
        tree,
        base,
        files,
        pending,
        bytes,
    }
}

fn run(c: &Corpus, query: &str, max_search_bytes: u64, threads: usize) -> ScanOutcome {
    let matcher = Matcher::new(normalize_query(query).unwrap());
    scan(
        &c.tree,
        &c.base,
        &c.files,
        &c.pending,
        &matcher,
        &ScanOptions {
            context: 1,
            max_file_bytes: 4_000,
            max_search_bytes,
            max_snippet_chars: 1_500,
            threads,
        },
    )
    .unwrap()
}

#[test]
fn parallel_and_sequential_scans_give_identical_results() {
    let c = corpus();
    for query in ["beta gamma", "OMEGA", "-", "nothing-here"] {
        for budget in [u64::MAX, c.bytes / 3, 1] {
            let sequential = run(&c, query, budget, 1);
            if query == "beta gamma" && budget == u64::MAX {
                assert!(sequential.hits.len() > 1_000, "{}", sequential.hits.len());
                assert!(sequential.binary >= 2 * 24 && sequential.large >= 24);
                assert!(!sequential.stopped);
                assert!(
                    sequential
                        .hits
                        .iter()
                        .any(|h| h.path == "tool-results/i/only-pending.json")
                );
            }
            if budget == c.bytes / 3 {
                assert!(sequential.stopped, "the budget stops the scan midway");
                assert!(sequential.scanned < c.files.len() * 2 / 3);
            }
            for threads in [2, 3, 8] {
                let parallel = run(&c, query, budget, threads);
                assert!(
                    parallel == sequential,
                    "{query} / budget {budget}: {threads} threads differ from one \
                     ({} vs {} hits, scanned {} vs {})",
                    parallel.hits.len(),
                    sequential.hits.len(),
                    parallel.scanned,
                    sequential.scanned
                );
            }
        }
    }
}

#[cfg(unix)]
#[test]
fn a_symlink_fails_the_scan_the_same_way_at_any_thread_count() {
    let c = corpus();
    let victim = Path::new(&c.files[1_500]);
    let target = c.base.join(victim);
    std::fs::remove_file(&target).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &target).unwrap();
    let matcher = Matcher::new(normalize_query("beta").unwrap());
    for threads in [1, 2, 8] {
        let e = scan(
            &c.tree,
            &c.base,
            &c.files,
            &c.pending,
            &matcher,
            &ScanOptions {
                context: 0,
                max_file_bytes: 4_000,
                max_search_bytes: u64::MAX,
                max_snippet_chars: 1_500,
                threads,
            },
        )
        .unwrap_err();
        assert_eq!(e.code(), "workspace.escape", "{threads} threads: {e}");
    }
}
