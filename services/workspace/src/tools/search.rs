//! The scan behind `workspace.search_files`: reads the listed files, finds every match and builds
//! the hunks that are ranked. Owns the scan's limits (bytes read, file size) and its parallelism;
//! must never give an answer that depends on the number of threads or their timing.
//!
//! Files are examined by up to `threads` workers (the calling thread and scoped threads), which
//! claim them in file order in small chunks. The answer is then assembled by walking the files in
//! order with exactly the rules of a sequential scan — stop once more than `max_search_bytes`
//! were read before a file, count skipped files, fail on the first error — and any file a worker
//! did not examine (workers stop early once the byte budget or an error is seen) is examined right
//! there. So hits, counts, the stopping point and errors are those of a sequential scan. Worker
//! threads come from a process-wide budget (the machine's cores), so concurrent searches never
//! add up to more threads than cores, on top of their blocking callers.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
};

use toolplane_text::{Matcher, check_text, hunks, line_count, truncate_chars};

use crate::{
    engine::sha256_hex,
    error::WsError,
    tree::{CheckedDirs, Read, Tree},
    wal::LogObject,
};

/// Files a worker claims at once: small enough that the budget check stays close to the scan
/// front, large enough that claiming costs nothing.
const CHUNK: usize = 16;
/// Fewer files than this per extra thread are not worth a thread.
const FILES_PER_THREAD: usize = 64;
/// Characters of one snippet line.
const SNIPPET_LINE_CHARS: usize = 300;

/// One ranked unit of a search answer: a hunk of one file.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub path: String,
    pub score: f64,
    pub start: u64,
    pub end: u64,
    pub snippet: String,
    pub sha256: String,
}

/// What a scan is asked to do.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Context lines either side of a hit line.
    pub context: u64,
    /// Files over this size are skipped (and counted).
    pub max_file_bytes: u64,
    /// The scan stops before a file once more than this many bytes were read.
    pub max_search_bytes: u64,
    /// Most characters of one snippet.
    pub max_snippet_chars: usize,
    /// Workers, the calling thread included (1 = sequential).
    pub threads: usize,
}

/// A scan's answer: every hunk in file order, and what was skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanOutcome {
    pub hits: Vec<SearchHit>,
    pub scanned: usize,
    pub binary: usize,
    pub large: usize,
    /// The byte budget stopped the scan before the last file.
    pub stopped: bool,
}

/// What examining one file found.
enum Examined {
    /// Absent or a folder: not counted.
    Skip,
    Large(u64),
    Binary(u64),
    Plain(u64),
    Hits(u64, Vec<SearchHit>),
    Failed(WsError),
}

impl Examined {
    fn bytes(&self) -> u64 {
        match self {
            Examined::Large(n)
            | Examined::Binary(n)
            | Examined::Plain(n)
            | Examined::Hits(n, _) => *n,
            Examined::Skip | Examined::Failed(_) => 0,
        }
    }
}

struct Scan<'a> {
    tree: &'a Tree,
    base: &'a Path,
    files: &'a [String],
    logged: &'a BTreeMap<String, LogObject>,
    matcher: &'a Matcher,
    options: &'a ScanOptions,
}

impl Scan<'_> {
    fn examine(&self, file: &str, checked: &mut CheckedDirs) -> Examined {
        let read;
        let logged;
        let bytes: &[u8] = match self.logged.get(file) {
            Some(o) if o.size > self.options.max_file_bytes => return Examined::Large(o.size),
            Some(o) => match o.read() {
                Ok(b) => {
                    logged = b;
                    logged.as_slice()
                }
                Err(e) => return Examined::Failed(e),
            },
            None => match self.tree.read_scanned(self.base, file, checked) {
                Ok(Read::File(b)) => {
                    read = b;
                    &read
                }
                Ok(Read::Absent | Read::Dir) => return Examined::Skip,
                Err(e) => return Examined::Failed(e),
            },
        };
        let n = bytes.len() as u64;
        if n > self.options.max_file_bytes {
            return Examined::Large(n);
        }
        // The prefilter runs on the raw bytes; a file is still checked for being text (the answer
        // counts skipped binary files whether or not they would match).
        let matched = self.matcher.is_match_bytes(bytes);
        let Ok(text) = check_text(bytes) else {
            return Examined::Binary(n);
        };
        if !matched {
            return Examined::Plain(n);
        }
        Examined::Hits(n, self.hunks(file, bytes, text))
    }

    fn hunks(&self, file: &str, bytes: &[u8], text: &str) -> Vec<SearchHit> {
        let line_hits = self.matcher.line_hits(text);
        let total = line_count(text);
        let lines: Vec<&str> = text.lines().collect();
        let sha = sha256_hex(bytes);
        let mut out = Vec::new();
        for hunk in hunks(
            &line_hits,
            self.options.context,
            total,
            self.matcher.query().terms.len(),
        ) {
            let mut snippet = String::new();
            for n in hunk.start_line..=hunk.end_line {
                let line = lines.get((n - 1) as usize).copied().unwrap_or("");
                let (cut, was_cut) = truncate_chars(line, SNIPPET_LINE_CHARS);
                snippet.push_str(&format!("L{n}: {cut}{}\n", if was_cut { "…" } else { "" }));
            }
            let (snippet, _) = truncate_chars(&snippet, self.options.max_snippet_chars);
            out.push(SearchHit {
                path: file.to_owned(),
                score: hunk.score,
                start: hunk.start_line,
                end: hunk.end_line,
                snippet: snippet.trim_end().to_owned(),
                sha256: sha.clone(),
            });
        }
        out
    }

    /// One worker: claims chunks in file order until the files, the byte budget or an error end
    /// the scan.
    fn work(
        &self,
        next: &AtomicUsize,
        read: &AtomicU64,
        failed: &AtomicBool,
    ) -> Vec<(usize, Examined)> {
        let mut out = Vec::new();
        let mut checked = CheckedDirs::default();
        let over = || {
            failed.load(Ordering::Relaxed)
                || read.load(Ordering::Relaxed) > self.options.max_search_bytes
        };
        'claim: while !over() {
            let start = next.fetch_add(CHUNK, Ordering::Relaxed);
            if start >= self.files.len() {
                break;
            }
            let end = (start + CHUNK).min(self.files.len());
            for (i, file) in self.files.iter().enumerate().take(end).skip(start) {
                if over() {
                    break 'claim;
                }
                let examined = self.examine(file, &mut checked);
                read.fetch_add(examined.bytes(), Ordering::Relaxed);
                if matches!(examined, Examined::Failed(_)) {
                    failed.store(true, Ordering::Relaxed);
                }
                out.push((i, examined));
            }
        }
        out
    }

    fn run(&self) -> Result<ScanOutcome, WsError> {
        let threads = self
            .options
            .threads
            .min(self.files.len() / FILES_PER_THREAD)
            .max(1);
        let mut examined: Vec<Option<Examined>> = Vec::new();
        if threads > 1 {
            examined.resize_with(self.files.len(), || None);
            let next = AtomicUsize::new(0);
            let read = AtomicU64::new(0);
            let failed = AtomicBool::new(false);
            std::thread::scope(|scope| {
                let helpers: Vec<_> = (1..threads)
                    .filter_map(|i| {
                        std::thread::Builder::new()
                            .name(format!("workspace-search-{i}"))
                            .spawn_scoped(scope, || self.work(&next, &read, &failed))
                            .ok()
                    })
                    .collect();
                let mut parts = vec![self.work(&next, &read, &failed)];
                // A helper that died leaves its files unexamined; the ordered walk below
                // examines them.
                parts.extend(helpers.into_iter().filter_map(|h| h.join().ok()));
                for (i, e) in parts.into_iter().flatten() {
                    if let Some(slot) = examined.get_mut(i) {
                        *slot = Some(e);
                    }
                }
            });
        }
        let mut out = ScanOutcome::default();
        let mut read = 0u64;
        let mut checked = CheckedDirs::default();
        for (i, file) in self.files.iter().enumerate() {
            if read > self.options.max_search_bytes {
                out.stopped = true;
                break;
            }
            let e = match examined.get_mut(i).and_then(Option::take) {
                Some(e) => e,
                None => self.examine(file, &mut checked),
            };
            read += e.bytes();
            match e {
                Examined::Skip => continue,
                Examined::Failed(error) => return Err(error),
                Examined::Large(_) => out.large += 1,
                Examined::Binary(_) => out.binary += 1,
                Examined::Plain(_) => {}
                Examined::Hits(_, hits) => out.hits.extend(hits),
            }
            out.scanned += 1;
        }
        Ok(out)
    }
}

/// Scans `files` (run-relative paths under `base`; `logged` holds the audit objects the log keeps,
/// which are not in the tree) for `matcher`'s terms.
pub fn scan(
    tree: &Tree,
    base: &Path,
    files: &[String],
    logged: &BTreeMap<String, LogObject>,
    matcher: &Matcher,
    options: &ScanOptions,
) -> Result<ScanOutcome, WsError> {
    Scan {
        tree,
        base,
        files,
        logged,
        matcher,
        options,
    }
    .run()
}

/// Extra search threads in use in this process.
static EXTRA_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Extra worker threads a search may use, taken from the process-wide budget (cores − 1) and
/// returned on drop.
#[derive(Debug)]
pub struct ThreadBudget {
    extra: usize,
}

impl ThreadBudget {
    /// Takes as many extra threads as are free, at most cores − 1.
    pub fn acquire() -> ThreadBudget {
        let cap = std::thread::available_parallelism()
            .map(std::num::NonZeroUsize::get)
            .unwrap_or(1)
            .saturating_sub(1);
        let mut extra = 0;
        let _ = EXTRA_THREADS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            extra = cap.saturating_sub(used);
            Some(used + extra)
        });
        ThreadBudget { extra }
    }

    /// Workers this search may run, its own thread included.
    pub fn threads(&self) -> usize {
        1 + self.extra
    }
}

impl Drop for ThreadBudget {
    fn drop(&mut self) {
        EXTRA_THREADS.fetch_sub(self.extra, Ordering::AcqRel);
    }
}
