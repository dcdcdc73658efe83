//! The verified-token cache: what [`crate::TokenStore::verify`] remembers between calls so that a
//! token presented again within a second costs a hash-map lookup instead of two store reads.
//! Owns the bound (oldest entries evicted first), the time an entry lives, and forgetting on
//! revocation; must never hold a secret (entries are keyed by the secret's SHA-256) and never
//! answer for a token past its expiry (checked on every hit, by the caller's clock).
//!
//! Revocation through the same store forgets the token's entry at once, and a verification that
//! read the store before a revocation finished never stores its (stale) answer: every revocation
//! bumps a generation, and an answer is kept only when the generation it started under is still
//! current. A revocation made by another process sharing the store is seen when the entry ages
//! out (docs/auth.md, "The verified-token cache").

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::{AuthError, Caller};

/// How long an entry lives by default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(1);
/// How many entries the cache holds by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 10_000;

/// The SHA-256 of a presented secret.
pub(crate) type SecretDigest = [u8; 32];

/// A bounded, short-lived map from a secret's SHA-256 to the caller it was verified as.
#[derive(Debug)]
pub(crate) struct VerifiedCache {
    ttl: Duration,
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<SecretDigest, Entry>,
    /// Insertion order, oldest first; a digest whose entry was replaced or removed is skipped by
    /// its sequence number.
    order: VecDeque<(SecretDigest, u64)>,
    next_seq: u64,
    /// Bumped by every revocation.
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    caller: Caller,
    expires_at_unix_ms: Option<u64>,
    stored_at: Instant,
    seq: u64,
}

/// What a lookup found.
pub(crate) enum Lookup {
    /// A live entry: the caller, or the refusal of an expired token.
    Hit(Result<Caller, AuthError>),
    /// Nothing usable: verify against the store, then [`VerifiedCache::insert`] with this
    /// generation.
    Miss { generation: u64 },
}

impl VerifiedCache {
    /// A cache whose entries live `ttl` and which holds at most `capacity` of them; either zero
    /// turns it off (every lookup misses, nothing is stored).
    pub(crate) fn new(ttl: Duration, capacity: usize) -> VerifiedCache {
        VerifiedCache {
            ttl,
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.capacity > 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the maps consistent, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for `digest`, refused when the token has expired at `now_unix_ms`.
    pub(crate) fn lookup(&self, digest: &SecretDigest, now_unix_ms: u64) -> Lookup {
        let mut inner = self.lock();
        let generation = inner.generation;
        if !self.enabled() {
            return Lookup::Miss { generation };
        }
        let Some(entry) = inner.entries.get(digest) else {
            return Lookup::Miss { generation };
        };
        if entry.stored_at.elapsed() >= self.ttl {
            inner.entries.remove(digest);
            return Lookup::Miss { generation };
        }
        if entry
            .expires_at_unix_ms
            .is_some_and(|expires| now_unix_ms >= expires)
        {
            return Lookup::Hit(Err(AuthError::Expired));
        }
        Lookup::Hit(Ok(entry.caller.clone()))
    }

    /// Remembers a successful verification that started under `generation`; dropped when a
    /// revocation happened since. Evicts the oldest entries beyond the bound.
    pub(crate) fn insert(
        &self,
        digest: SecretDigest,
        caller: &Caller,
        expires_at_unix_ms: Option<u64>,
        generation: u64,
    ) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return;
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.entries.insert(
            digest,
            Entry {
                caller: caller.clone(),
                expires_at_unix_ms,
                stored_at: Instant::now(),
                seq,
            },
        );
        inner.order.push_back((digest, seq));
        while inner.entries.len() > self.capacity {
            let Some((oldest, oldest_seq)) = inner.order.pop_front() else {
                break;
            };
            if inner
                .entries
                .get(&oldest)
                .is_some_and(|e| e.seq == oldest_seq)
            {
                inner.entries.remove(&oldest);
            }
        }
        // Keep the order queue from growing without bound through replaced entries.
        if inner.order.len() > self.capacity.saturating_mul(2) {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|(digest, seq)| entries.get(digest).is_some_and(|e| e.seq == *seq));
        }
    }

    /// Forgets every entry of token `token_id` and every verification still in flight.
    pub(crate) fn forget_token(&self, token_id: &str) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner
            .entries
            .retain(|_, entry| entry.caller.principal != token_id);
    }

    /// Entries held now (expired ones included until they are looked up or evicted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CallerKind, Role};

    fn caller(id: &str) -> Caller {
        Caller {
            cell: "c".into(),
            role: Role::Agent,
            principal: id.into(),
            kind: CallerKind::Token,
        }
    }

    fn generation(cache: &VerifiedCache, digest: &SecretDigest) -> u64 {
        match cache.lookup(digest, 0) {
            Lookup::Miss { generation } => generation,
            Lookup::Hit(_) => panic!("expected a miss"),
        }
    }

    #[test]
    fn the_bound_holds_and_the_oldest_entries_go_first() {
        let cache = VerifiedCache::new(Duration::from_secs(60), 3);
        for i in 0..10u8 {
            let g = generation(&cache, &[i; 32]);
            cache.insert([i; 32], &caller(&format!("tok_{i}")), None, g);
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.len(), 3);
        for i in 0..7u8 {
            assert!(matches!(cache.lookup(&[i; 32], 0), Lookup::Miss { .. }));
        }
        for i in 7..10u8 {
            assert!(matches!(cache.lookup(&[i; 32], 0), Lookup::Hit(Ok(_))));
        }
        // Re-verifying the same token many times neither grows the cache nor evicts others.
        for _ in 0..100 {
            cache.insert([9; 32], &caller("tok_9"), None, 0);
        }
        assert_eq!(cache.len(), 3);
        assert!(matches!(cache.lookup(&[7; 32], 0), Lookup::Hit(Ok(_))));
    }

    #[test]
    fn entries_age_out_and_a_zero_ttl_stores_nothing() {
        let cache = VerifiedCache::new(Duration::from_millis(20), 10);
        cache.insert([1; 32], &caller("tok_1"), None, 0);
        assert!(matches!(cache.lookup(&[1; 32], 0), Lookup::Hit(Ok(_))));
        std::thread::sleep(Duration::from_millis(30));
        assert!(matches!(cache.lookup(&[1; 32], 0), Lookup::Miss { .. }));
        let off = VerifiedCache::new(Duration::ZERO, 10);
        off.insert([1; 32], &caller("tok_1"), None, 0);
        assert_eq!(off.len(), 0);
    }

    #[test]
    fn a_verification_that_raced_a_revocation_is_not_kept() {
        let cache = VerifiedCache::new(Duration::from_secs(60), 10);
        let before = generation(&cache, &[1; 32]);
        cache.forget_token("tok_1");
        cache.insert([1; 32], &caller("tok_1"), None, before);
        assert_eq!(cache.len(), 0);
    }
}
