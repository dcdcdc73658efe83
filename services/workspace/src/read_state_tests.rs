//! Invariants of the read-state rules over generated read histories, file versions and texts.

use proptest::prelude::*;

use super::*;

/// Versions from a small set, so that generated histories often meet the same version again.
fn version() -> impl Strategy<Value = String> {
    (0u8..4).prop_map(|n| format!("v{n}"))
}

/// A short fragment of text over a small alphabet (so fragments and `old_string`s overlap).
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[ab\\n]{{0,{max}}}")).unwrap()
}

/// One read: the version read, whether it was full, the text a partial read returned.
fn read() -> impl Strategy<Value = (String, bool, String)> {
    (version(), any::<bool>(), text(6))
}

/// A read-state as a history of reads and failed patches leaves it.
fn state() -> impl Strategy<Value = Option<FileRead>> {
    (
        proptest::collection::vec(read(), 0..12),
        proptest::collection::vec(any::<bool>(), 12),
    )
        .prop_map(|(reads, marks)| {
            let mut state = None;
            for ((version, full, fragment), mark) in reads.into_iter().zip(marks) {
                let mut s = record_read(state, &version, full, &fragment);
                if mark && !s.full {
                    s.needs_full_read = true;
                }
                state = Some(s);
            }
            state
        })
}

/// A file text in which `old` occurs exactly `n` times (`old` is not in the filler).
fn text_with(old: &str, n: usize) -> String {
    let mut t = String::from("x\n");
    for _ in 0..n {
        t.push_str(old);
        t.push_str("\nx\n");
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Whatever was read before, a fresh full read of the current version allows a replace and
    /// a patch of a unique `old_string`, and `replace_all` of any number of occurrences.
    #[test]
    fn a_fresh_full_read_always_allows_writing(
        before in state(), v in version(), n in 1usize..5,
    ) {
        let s = record_read(before, &v, true, "");
        prop_assert!(s.full && !s.needs_full_read);
        prop_assert_eq!(check_write(Some(&s), Some(&v), false), Ok(()));
        prop_assert_eq!(check_patch(Some(&s), &v, &text_with("ab", 1), "ab", false), Ok(1));
        prop_assert_eq!(check_patch(Some(&s), &v, &text_with("ab", n), "ab", true), Ok(n));
    }

    /// Any change of the file after the invocation's last read (its version differs) is stale
    /// for a replace and for a patch, full read or not, and the refusal leaves the state as it
    /// was.
    #[test]
    fn any_change_after_the_read_is_stale(
        s in state().prop_filter("a read", Option::is_some), current in version(),
        append in any::<bool>(), replace_all in any::<bool>(),
    ) {
        let s = s.unwrap();
        prop_assume!(s.version != current);
        prop_assert_eq!(check_write(Some(&s), Some(&current), false), Err(Refusal::Stale));
        // Appending needs no read-state at all.
        prop_assert_eq!(check_write(Some(&s), Some(&current), append), if append { Ok(()) } else { Err(Refusal::Stale) });
        let text = text_with("ab", 1);
        prop_assert_eq!(
            check_patch(Some(&s), &current, &text, "ab", replace_all),
            Err(PatchRefused { refusal: Refusal::Stale, remember: None })
        );
    }

    /// Without a read-state an existing file can be neither replaced nor patched; creating a
    /// file and appending need none, whatever the state.
    #[test]
    fn existing_files_must_be_read_first(
        s in state(), current in version(), append in any::<bool>(), replace_all in any::<bool>(),
    ) {
        prop_assert_eq!(check_write(None, Some(&current), false), Err(Refusal::ReadRequired));
        prop_assert_eq!(
            check_patch(None, &current, &text_with("ab", 1), "ab", replace_all),
            Err(PatchRefused { refusal: Refusal::ReadRequired, remember: None })
        );
        prop_assert_eq!(check_write(s.as_ref(), None, append), Ok(()));
        prop_assert_eq!(check_write(s.as_ref(), Some(&current), true), Ok(()));
    }

    /// Partial reads never add up to a full read: `replace_all` stays refused, the fragments
    /// kept are bounded, and a partial read never downgrades a full read of the same version.
    #[test]
    fn partial_reads_never_make_a_full_read(
        v in version(), fragments in proptest::collection::vec(text(6), 1..(MAX_FRAGMENTS + 20)),
    ) {
        let mut s: Option<FileRead> = None;
        for f in &fragments {
            s = Some(record_read(s, &v, false, f));
        }
        let s = s.unwrap();
        prop_assert!(!s.full);
        prop_assert!(s.fragments.len() <= MAX_FRAGMENTS);
        let text = text_with("ab", 2);
        prop_assert_eq!(
            check_patch(Some(&s), &v, &text, "ab", true).map_err(|e| e.refusal),
            Err(Refusal::FullReadRequired { replace_all: true })
        );
        let mut full = record_read(None, &v, true, "");
        for f in &fragments {
            full = record_read(Some(full), &v, false, f);
        }
        prop_assert_eq!(full, FileRead::full(&v));
    }

    /// A patch from a partial read whose `old_string` was not read, does not occur or is not
    /// unique makes every later patch need a full read — even one of text it did read — until
    /// the whole file is read; a full read lifts it.
    #[test]
    fn a_failed_partial_patch_requires_a_full_read(
        v in version(), read_text in text(6), old in "[ab]{1,3}", n in 0usize..4,
    ) {
        let s = record_read(None, &v, false, &read_text);
        prop_assume!(!s.fragments.is_empty());
        let file = text_with(&old, n);
        let refused = match check_patch(Some(&s), &v, &file, &old, false) {
            Ok(count) => {
                prop_assert!(read_text.contains(&old) && count == 1);
                return Ok(());
            }
            Err(refused) => refused,
        };
        let marked = refused.remember.expect("a partial read is marked");
        prop_assert!(marked.needs_full_read);
        let fragment = marked.fragments[0].clone();
        let unique = text_with(&fragment, 1);
        prop_assert_eq!(
            check_patch(Some(&marked), &v, &unique, &fragment, false).map_err(|e| e.refusal),
            Err(Refusal::FullReadRequired { replace_all: false })
        );
        let again = record_read(Some(marked), &v, true, "");
        prop_assert!(check_patch(Some(&again), &v, &unique, &fragment, true).is_ok());
    }

    /// After `write_file` the invocation may write again exactly what it wrote: a create or a
    /// replace leaves a full read at the written version; an append to a file not fully read at
    /// the version it extended grants nothing, so the grown file is stale to that invocation.
    #[test]
    fn a_write_leaves_a_state_for_what_was_written(
        s in state(), previous in proptest::option::of(version()), written in version(),
        append in any::<bool>(),
    ) {
        let after = after_write(s.as_ref(), previous.as_deref(), append, &written);
        let knew_all = s.as_ref().zip(previous.as_ref()).is_some_and(|(s, p)| s.full && s.version == *p);
        match (&previous, append) {
            (Some(_), true) if !knew_all => prop_assert_eq!(after, None),
            _ => prop_assert_eq!(after, Some(FileRead::full(&written))),
        }
        let kept = after_write(s.as_ref(), previous.as_deref(), append, &written).or(s);
        if let Some(kept) = kept {
            let allowed = check_write(Some(&kept), Some(&written), false).is_ok();
            prop_assert_eq!(allowed, kept.version == written);
        }
    }

    /// After a patch the state is at the written version (so the next patch is not stale), a
    /// full read stays full, a partial one stays partial with the failed-patch mark cleared and
    /// every fragment that held `old_string` holding `new_string`.
    #[test]
    fn a_patch_leaves_a_state_for_what_was_written(
        s in state().prop_filter("a read", Option::is_some), old in "[ab]{1,3}", new in "[c]{1,3}",
        written in version(),
    ) {
        let s = s.unwrap();
        let after = after_patch(&s, &old, &new, &written);
        prop_assert_eq!(&after.version, &written);
        prop_assert_eq!(after.full, s.full);
        prop_assert!(!after.needs_full_read);
        prop_assert_eq!(after.fragments.len(), s.fragments.len());
        for (before, now) in s.fragments.iter().zip(&after.fragments) {
            if before.contains(&old) {
                prop_assert!(now.contains(&new));
            } else {
                prop_assert_eq!(before, now);
            }
        }
    }
}

/// Each refusal's code and the advice its message gives, per tool.
#[test]
fn refusals_name_their_code_and_what_to_do() {
    let cases = [
        (
            Refusal::ReadRequired,
            Action::Write,
            "workspace.read_required",
            "before replacing it",
        ),
        (
            Refusal::ReadRequired,
            Action::Patch,
            "workspace.read_required",
            "before patching it",
        ),
        (
            Refusal::Stale,
            Action::Write,
            "workspace.stale_file",
            "read it again, then write",
        ),
        (
            Refusal::Stale,
            Action::Patch,
            "workspace.stale_file",
            "read it again, then patch",
        ),
        (
            Refusal::FullReadRequired { replace_all: true },
            Action::Patch,
            "workspace.full_read_required",
            "replace_all may change places you have not read",
        ),
        (
            Refusal::FullReadRequired { replace_all: false },
            Action::Patch,
            "workspace.full_read_required",
            "an earlier patch based on a partial read failed",
        ),
        (
            Refusal::NotRead,
            Action::Patch,
            "workspace.patch_not_read",
            "parts of notes.md you have read",
        ),
        (
            Refusal::NoMatch,
            Action::Patch,
            "workspace.patch_no_match",
            "does not occur in notes.md",
        ),
        (
            Refusal::Ambiguous(3),
            Action::Patch,
            "workspace.patch_ambiguous",
            "occurs 3 times",
        ),
    ];
    for (refusal, action, code, advice) in cases {
        let error = refusal.to_error("notes.md", action);
        assert_eq!(error.code(), code);
        assert!(error.is_recoverable(), "{code}");
        assert!(
            error.message().contains(advice),
            "{code}: {}",
            error.message()
        );
    }
}
