//! Hardline: the plane's configured rules that nothing overrides — paths no call may name and
//! argument patterns no call may send. Owns compiling the rules once (globs through `globset`,
//! patterns through `regex` with size limits) and finding a rule that a call's arguments break;
//! must never do IO.
//!
//! What is checked:
//! - **Paths.** Every candidate path is normalised first (`lexpath`: `a/../secret` is `secret`,
//!   `%2e%2e/` is read decoded too) and matched against the never-path globs (`*` within one
//!   segment, `**` across segments; linear-time matching, no backtracking). For builtin tools the
//!   candidates are the values of path-named keys (`path`, `file`, `dir`, …) at any depth. For every
//!   other tool (MCP servers, external hosts, sub-agents) every string at any depth is a candidate,
//!   and so is each word of it that looks like a path (holds `/` or starts with `~` or `.`), since
//!   such tools take paths inside commands and free-form fields (`cat /etc/shadow`). Relative
//!   candidates are also resolved against the run's working directory.
//! - **Argument patterns.** Every string value and every key at any depth is searched with the
//!   configured regular expressions (and the case-insensitive literal fragments). The regex engine
//!   runs in time linear in the input, and each pattern's compiled size is capped.
// Parses untrusted input: no indexing, slicing or arithmetic that can panic (docs/limits.md,
// "Numbers that cannot panic").
#![deny(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]

use std::sync::Arc;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use regex::{RegexSet, RegexSetBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::lexpath;

mod prefilter;
mod words;

use prefilter::GlobPrefilter;
use words::path_words;

/// Most rules, globs or patterns one configuration may hold.
pub const MAX_RULE_ENTRIES: usize = 1_000;
/// Longest glob or pattern, in bytes.
pub const MAX_RULE_TEXT: usize = 1_024;
/// Largest compiled size of all patterns together (the `regex` crate's size limit), in bytes.
pub const MAX_PATTERN_PROGRAM: usize = 8 * 1024 * 1024;

/// Hardline rules as configured (`hardline` in the runtime's configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HardlineSpec {
    /// Path globs no call may name, e.g. `/etc/**`, `**/.ssh/**`, `persist/secrets/**`. Each is a
    /// rule named after its glob.
    #[serde(default)]
    pub never_paths: Vec<String>,
    /// Literal fragments no string argument may contain, compared case-insensitively, e.g.
    /// `rm -rf /`. Each is a rule named after its fragment.
    #[serde(default)]
    pub never_argument_fragments: Vec<String>,
    /// Named rules, each with path globs and argument patterns (regular expressions).
    #[serde(default)]
    pub rules: Vec<NamedRule>,
}

/// One named rule: a call breaks it when it names a path matching one of `paths` or sends an
/// argument matching one of `argument_patterns`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamedRule {
    pub name: String,
    #[serde(default)]
    pub paths: Vec<String>,
    #[serde(default)]
    pub argument_patterns: Vec<String>,
}

/// The compiled rules. Deserialises from (and serialises to) a [`HardlineSpec`]; a glob or pattern
/// that does not compile, or rules over the limits, refuse the configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(try_from = "HardlineSpec", into = "HardlineSpec")]
pub struct HardlineRules {
    spec: HardlineSpec,
    compiled: Arc<Compiled>,
}

#[derive(Debug, Default)]
struct Compiled {
    globs: GlobSet,
    /// Rules a path form out cheaply when it holds none of the texts the globs require.
    prefilter: GlobPrefilter,
    /// The rule name of each glob, by index in `globs`.
    glob_rules: Vec<(String, String)>,
    /// Whether some glob could match a path starting with `/`; when none can, relative paths are
    /// not also matched against the working directory.
    globs_may_root: bool,
    patterns: Option<RegexSet>,
    /// The rule name and shown text of each pattern, by index in `patterns`.
    pattern_rules: Vec<(String, String)>,
}

/// A broken rule: its name and what in the call broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: String,
    pub reason: String,
}

/// Which strings of a call's arguments are candidate paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathScope {
    /// Values of path-named keys, at any depth (builtin tools, whose schemas name their paths).
    PathKeys,
    /// Every string and every path-like word in it (tools whose arguments toolplane cannot read).
    Everything,
}

/// Argument keys whose string values are paths.
pub const PATH_KEYS: [&str; 12] = [
    "path",
    "file",
    "filename",
    "file_path",
    "filepath",
    "dir",
    "directory",
    "source",
    "destination",
    "target",
    "cwd",
    "root",
];

impl TryFrom<HardlineSpec> for HardlineRules {
    type Error = String;

    fn try_from(spec: HardlineSpec) -> Result<Self, String> {
        HardlineRules::compile(spec)
    }
}

impl From<HardlineRules> for HardlineSpec {
    fn from(rules: HardlineRules) -> Self {
        rules.spec
    }
}

impl PartialEq for HardlineRules {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl HardlineRules {
    /// Compiles `spec`, or says which entry cannot be used.
    pub fn compile(spec: HardlineSpec) -> Result<Self, String> {
        let mut globs = Vec::new();
        let mut patterns = Vec::new();
        for g in &spec.never_paths {
            globs.push((g.clone(), g.clone()));
        }
        for f in &spec.never_argument_fragments {
            if !f.is_empty() {
                patterns.push((f.clone(), format!("(?i){}", regex::escape(f)), f.clone()));
            }
        }
        for rule in &spec.rules {
            if rule.name.trim().is_empty() {
                return Err("every hardline rule needs a name".into());
            }
            for g in &rule.paths {
                globs.push((rule.name.clone(), g.clone()));
            }
            for p in &rule.argument_patterns {
                patterns.push((rule.name.clone(), p.clone(), p.clone()));
            }
        }
        if globs
            .len()
            .saturating_add(patterns.len())
            .saturating_add(spec.rules.len())
            > MAX_RULE_ENTRIES
        {
            return Err(format!(
                "hardline holds more than {MAX_RULE_ENTRIES} rules, globs and patterns"
            ));
        }
        let mut set = GlobSetBuilder::new();
        for (_, g) in &globs {
            if g.len() > MAX_RULE_TEXT {
                return Err(format!("a hardline glob is over {MAX_RULE_TEXT} bytes"));
            }
            let glob = GlobBuilder::new(g)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("hardline glob `{g}`: {e}"))?;
            set.add(glob);
        }
        let globs_set = set.build().map_err(|e| format!("hardline globs: {e}"))?;
        let regexes = if patterns.is_empty() {
            None
        } else {
            if let Some((_, p, _)) = patterns.iter().find(|(_, p, _)| p.len() > MAX_RULE_TEXT) {
                return Err(format!(
                    "the hardline pattern `{}…` is over {MAX_RULE_TEXT} bytes",
                    p.chars().take(40).collect::<String>()
                ));
            }
            Some(
                RegexSetBuilder::new(patterns.iter().map(|(_, p, _)| p))
                    .size_limit(MAX_PATTERN_PROGRAM)
                    .dfa_size_limit(MAX_PATTERN_PROGRAM)
                    .build()
                    .map_err(|e| format!("hardline patterns: {e}"))?,
            )
        };
        Ok(HardlineRules {
            compiled: Arc::new(Compiled {
                globs: globs_set,
                prefilter: GlobPrefilter::new(globs.iter().map(|(_, g)| g.as_str())),
                globs_may_root: globs.iter().any(|(_, g)| may_root(g)),
                glob_rules: globs,
                patterns: regexes,
                pattern_rules: patterns
                    .into_iter()
                    .map(|(n, _, shown)| (n, shown))
                    .collect(),
            }),
            spec,
        })
    }

    /// The rules as configured.
    pub fn spec(&self) -> &HardlineSpec {
        &self.spec
    }

    /// The first rule `args` break, looking at paths in `scope` (relative ones also against
    /// `work_dir` when given) and at every string and key for patterns.
    pub fn find_violation(
        &self,
        args: &Map<String, Value>,
        scope: PathScope,
        work_dir: &str,
    ) -> Option<Violation> {
        let c = &self.compiled;
        if c.glob_rules.is_empty() && c.patterns.is_none() {
            return None;
        }
        let mut strings = Vec::with_capacity(32);
        collect_object(args, scope, &mut strings);
        if let Some(set) = &c.patterns {
            for s in &strings {
                // `is_match` stops at the first match with the fast engines; which pattern matched
                // (a slower search for every pattern) is asked only then.
                if !set.is_match(s.text) {
                    continue;
                }
                let matched = set.matches(s.text).iter().next();
                if let Some((rule, shown)) = matched.and_then(|i| c.pattern_rules.get(i)) {
                    return Some(Violation {
                        rule: rule.clone(),
                        reason: format!("arguments contain the forbidden pattern `{shown}`"),
                    });
                }
            }
        }
        if c.glob_rules.is_empty() {
            return None;
        }
        let mut paths = PathMatcher::new(c, work_dir);
        strings
            .iter()
            .filter(|s| s.path)
            .flat_map(|s| path_words(s.text, scope))
            .find_map(|candidate| paths.violation(candidate))
    }
}

/// Matches path candidates against the never-path globs, building as few strings as it can: a
/// candidate already in normal form (`lexpath::is_normal`, no `%`) is matched as written, and its
/// absolutised form is built in one reused buffer from the working directory normalised once, and
/// only when some glob could match an absolute path. A form holding none of the texts the globs
/// require (`prefilter`) is not matched against the glob set at all.
struct PathMatcher<'a> {
    compiled: &'a Compiled,
    work_dir: &'a str,
    /// The working directory normalised, when it is absolute (the quick absolutisation); made
    /// when the first relative reading is absolutised.
    rooted_work_dir: Option<Option<String>>,
    buffer: String,
}

impl<'a> PathMatcher<'a> {
    fn new(compiled: &'a Compiled, work_dir: &'a str) -> Self {
        PathMatcher {
            compiled,
            work_dir,
            rooted_work_dir: None,
            buffer: String::new(),
        }
    }

    /// The first never-path rule `candidate` names, in any of its readings.
    fn violation(&mut self, candidate: &str) -> Option<Violation> {
        if !candidate.contains('%') && lexpath::is_normal(candidate) {
            return self.reading_violation(candidate, candidate);
        }
        lexpath::readings(candidate)
            .iter()
            .find_map(|reading| self.reading_violation(candidate, reading))
    }

    /// One normalised reading, as it is and (when relative) against the working directory.
    fn reading_violation(&mut self, candidate: &str, reading: &str) -> Option<Violation> {
        if let Some(v) = self.form_violation(candidate, reading) {
            return Some(v);
        }
        if self.work_dir.is_empty() || reading.starts_with('/') || !self.compiled.globs_may_root {
            return None;
        }
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        let work_dir = self.work_dir;
        let rooted_work_dir = self.rooted_work_dir.get_or_insert_with(|| {
            Some(lexpath::normalize(work_dir)).filter(|w| w.starts_with('/'))
        });
        match rooted_work_dir {
            // A normal relative reading without leading `..` appends to the normalised directory
            // as it is (what `absolutize` would make of it).
            Some(dir) if !reading.starts_with("..") => {
                buffer.push_str(dir);
                if !dir.ends_with('/') {
                    buffer.push('/');
                }
                buffer.push_str(reading);
            }
            _ => buffer.push_str(&lexpath::absolutize(reading, self.work_dir)),
        }
        let found = self.form_violation(candidate, &buffer);
        self.buffer = buffer;
        found
    }

    fn form_violation(&self, candidate: &str, form: &str) -> Option<Violation> {
        let c = self.compiled;
        if !c.prefilter.may_match(form) {
            return None;
        }
        let form = Candidate::new(form);
        if !c.globs.is_match_candidate(&form) {
            return None;
        }
        let matched = c.globs.matches_candidate(&form).first().copied();
        let (rule, glob) = matched.and_then(|i| c.glob_rules.get(i))?;
        Some(Violation {
            rule: rule.clone(),
            reason: format!(
                "`{}` names the never-allowed path `{glob}`",
                lexpath::shown(candidate)
            ),
        })
    }
}

/// One string of the arguments: a value or a key, and whether it is a path candidate.
struct Found<'a> {
    text: &'a str,
    path: bool,
}

fn collect<'a>(v: &'a Value, key: Option<&str>, scope: PathScope, out: &mut Vec<Found<'a>>) {
    match v {
        Value::String(s) => out.push(Found {
            text: s,
            path: match scope {
                PathScope::Everything => true,
                PathScope::PathKeys => key.is_some_and(is_path_key),
            },
        }),
        // Items of an array keep the key that holds them (`"paths": […]` is not a path key, but
        // `"file": ["a", "b"]` is).
        Value::Array(items) => items.iter().for_each(|i| collect(i, key, scope, out)),
        Value::Object(map) => collect_object(map, scope, out),
        _ => {}
    }
}

fn collect_object<'a>(map: &'a Map<String, Value>, scope: PathScope, out: &mut Vec<Found<'a>>) {
    for (k, v) in map {
        out.push(Found {
            text: k,
            path: false,
        });
        collect(v, Some(k), scope, out);
    }
}

/// Whether glob `g` could match a path that starts with `/`: all but those that start with a
/// literal character that is not `/` (`persist/secrets/**`, `.env`); `**/x`, `*.pem`, `{a,b}`, `\\x`
/// and `/etc/**` can.
fn may_root(g: &str) -> bool {
    !g.starts_with(|c: char| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '~' | ' '))
}

pub(crate) fn is_path_key(key: &str) -> bool {
    PATH_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules(spec: serde_json::Value) -> HardlineRules {
        serde_json::from_value(spec).unwrap()
    }

    fn obj(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn relative_paths_are_matched_against_the_working_directory_however_spelled() {
        let r = rules(json!({"neverPaths": ["/srv/work/secret/**", "persist/secrets/**"]}));
        for (args, dir) in [
            (json!({"cmd": "cat secret/k"}), "/srv/work"),
            (json!({"cmd": "cat secret/k"}), "/srv/work/"),
            (json!({"cmd": "cat ./secret//k"}), "/srv/work"),
            (json!({"q": "work/secret/k"}), "/srv/x/.."),
            (json!({"q": "../secret/k"}), "/srv/work/sub"),
            (json!({"q": "secret%2Fk"}), "/srv/work"),
            (json!({"q": "persist/secrets/x"}), "/srv/work"),
        ] {
            let v = r.find_violation(&obj(args.clone()), PathScope::Everything, dir);
            assert!(v.is_some(), "{args} in {dir}");
        }
        for (args, dir) in [
            (json!({"cmd": "cat secret/k"}), "/srv/other"),
            (json!({"cmd": "cat secret/k"}), ""),
            (json!({"q": "/srv/persist/secrets/x"}), "/srv"),
        ] {
            let v = r.find_violation(&obj(args.clone()), PathScope::Everything, dir);
            assert_eq!(v, None, "{args} in {dir}");
        }
        assert!(may_root("/etc/**") && may_root("**/.ssh/**") && may_root("*.pem"));
        assert!(!may_root("persist/secrets/**") && !may_root(".env"));
    }

    #[test]
    fn paths_are_matched_as_they_resolve() {
        let r = rules(json!({"neverPaths": ["secret/**", "/etc/**", "**/.ssh/**"]}));
        for (args, scope) in [
            (json!({"path": "a/../secret/k"}), PathScope::PathKeys),
            (json!({"path": "./secret//k"}), PathScope::PathKeys),
            (
                json!({"opts": {"file": ["ok", "secret/x"]}}),
                PathScope::PathKeys,
            ),
            (json!({"path": "x/%2e%2e/secret/k"}), PathScope::PathKeys),
            (
                json!({"cmd": "cat /srv/../etc/shadow"}),
                PathScope::Everything,
            ),
            (
                json!({"argv": ["sh", "-c", "cp ~/x /home/a/.ssh/id_rsa"]}),
                PathScope::Everything,
            ),
            (json!({"q": "../../etc/passwd"}), PathScope::Everything),
        ] {
            let v = r.find_violation(&obj(args.clone()), scope, "/srv/work");
            assert!(v.is_some(), "{args}");
        }
        for (args, scope) in [
            (json!({"path": "secrets/k"}), PathScope::PathKeys),
            (json!({"content": "secret/k"}), PathScope::PathKeys),
            (
                json!({"note": "the /etc directory holds configuration"}),
                PathScope::PathKeys,
            ),
            (json!({"q": "etc/passwd"}), PathScope::Everything),
        ] {
            assert_eq!(
                r.find_violation(&obj(args.clone()), scope, ""),
                None,
                "{args}"
            );
        }
    }

    #[test]
    fn globs_keep_stars_within_a_segment() {
        let r = rules(json!({"neverPaths": ["persist/*.key"]}));
        let hit = |p: &str| {
            r.find_violation(&obj(json!({"path": p})), PathScope::PathKeys, "")
                .is_some()
        };
        assert!(hit("persist/a.key"));
        assert!(!hit("persist/x/a.key"));
    }

    #[test]
    fn patterns_and_fragments_name_their_rule() {
        let r = rules(json!({
            "neverArgumentFragments": ["RM -RF /"],
            "rules": [{"name": "no-private-keys", "argumentPatterns": ["-----BEGIN [A-Z ]*PRIVATE KEY"]}]
        }));
        let v = r
            .find_violation(
                &obj(json!({"cmd": ["sh", "-c", "rm -rf / --no-preserve-root"]})),
                PathScope::Everything,
                "",
            )
            .unwrap();
        assert_eq!(v.rule, "RM -RF /");
        let v = r
            .find_violation(
                &obj(json!({"deep": [{"x": "-----BEGIN RSA PRIVATE KEY-----"}]})),
                PathScope::PathKeys,
                "",
            )
            .unwrap();
        assert_eq!(v.rule, "no-private-keys");
        // Keys are arguments too.
        assert!(
            r.find_violation(&obj(json!({"rm -rf /": 1})), PathScope::PathKeys, "")
                .is_some()
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        for bad in [
            json!({"neverPaths": ["a/[b"]}),
            json!({"rules": [{"name": "x", "argumentPatterns": ["(unclosed"]}]}),
            json!({"rules": [{"name": " ", "paths": ["a"]}]}),
            json!({"rules": [{"name": "huge", "argumentPatterns": ["a{1000}{1000}{1000}"]}]}),
            json!({"neverPaths": ["a".repeat(MAX_RULE_TEXT + 1)]}),
            json!({"nevrPaths": []}),
        ] {
            assert!(
                serde_json::from_value::<HardlineRules>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let spec = json!({"neverPaths": ["/etc/**"], "neverArgumentFragments": [], "rules": []});
        assert_eq!(serde_json::to_value(rules(spec.clone())).unwrap(), spec);
    }

    #[test]
    fn a_pattern_bomb_is_linear() {
        let r = rules(json!({"rules": [{"name": "n", "argumentPatterns": ["(a+)+$", "(x|x)*y"]}]}));
        // A backtracking engine would not finish these; the regex crate's engines are linear.
        let input = format!("{}!", "a".repeat(200_000));
        assert!(
            r.find_violation(&obj(json!({"s": input})), PathScope::Everything, "")
                .is_none()
        );
        assert!(
            r.find_violation(
                &obj(json!({"s": "a".repeat(200_000)})),
                PathScope::Everything,
                ""
            )
            .is_some()
        );
        assert!(
            r.find_violation(
                &obj(json!({"s": "x".repeat(200_000)})),
                PathScope::Everything,
                ""
            )
            .is_none()
        );
    }
}
