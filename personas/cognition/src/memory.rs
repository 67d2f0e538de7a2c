//! Working memory as plain data: entries per domain, retention scores, eviction and recall.
//! The `WorkingMemory` actor owns one and persists what changes.

use std::collections::BTreeMap;

use mindfleet_core::record::{EntryKind, Eviction, WmEntry};

const DAY_US: f64 = 86_400e6;

/// How much an entry is worth keeping:
/// importance + 0.3·exp(-age/7d) + 0.2·exp(-since_access/1d) + min(0.1·accesses, 0.5) + 0.2·relevance.
pub fn retention(e: &WmEntry, now_us: i64) -> f64 {
    let age = (now_us - e.created_us).max(0) as f64;
    let idle = (now_us - e.last_access_us).max(0) as f64;
    e.importance
        + 0.3 * (-age / (7.0 * DAY_US)).exp()
        + 0.2 * (-idle / DAY_US).exp()
        + (0.1 * e.access_count as f64).min(0.5)
        + 0.2 * e.relevance
}

/// A new thought, before it gets an id.
#[derive(Debug, Clone)]
pub struct Draft {
    pub domain: String,
    pub kind: EntryKind,
    pub text: String,
    pub importance: f64,
    pub event_id: Option<String>,
    pub relevance: f64,
}

#[derive(Debug, Clone)]
pub struct Memory {
    pub capacity_per_domain: usize,
    pub ttl_us: i64,
    pub entries: BTreeMap<u64, WmEntry>,
    next_id: u64,
}

impl Memory {
    pub fn new(capacity_per_domain: usize, ttl_us: i64, restored: Vec<WmEntry>) -> Self {
        let entries: BTreeMap<u64, WmEntry> = restored.into_iter().map(|e| (e.id, e)).collect();
        let next_id = entries.keys().next_back().map_or(1, |k| k + 1);
        Memory { capacity_per_domain, ttl_us, entries, next_id }
    }

    pub fn per_domain(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in self.entries.values() {
            *m.entry(e.domain.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Stores a thought; returns it and the evictions it caused (expired entries first,
    /// then the lowest retention score of its domain while over capacity).
    pub fn store(&mut self, d: Draft, now_us: i64) -> (WmEntry, Vec<Eviction>) {
        let mut evicted = self.expire(now_us);
        let e = WmEntry {
            id: self.next_id,
            domain: d.domain,
            kind: d.kind,
            text: d.text,
            importance: d.importance.clamp(0.0, 1.0),
            event_id: d.event_id,
            relevance: d.relevance.clamp(0.0, 1.0),
            created_us: now_us,
            last_access_us: now_us,
            access_count: 0,
            expires_us: now_us + self.ttl_us,
        };
        self.next_id += 1;
        self.entries.insert(e.id, e.clone());
        loop {
            let in_domain = self.entries.values().filter(|x| x.domain == e.domain);
            if in_domain.clone().count() <= self.capacity_per_domain {
                break;
            }
            let victim = in_domain
                .map(|x| (retention(x, now_us), x.id))
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                .expect("domain is over capacity, so not empty");
            let x = self.entries.remove(&victim.1).expect("victim exists");
            evicted.push(Eviction {
                entry_id: x.id,
                domain: x.domain,
                text: x.text,
                reason: format!("capacity: lowest retention score {:.3} in a full domain", victim.0),
                retention: victim.0,
                at_us: now_us,
            });
        }
        (e, evicted)
    }

    /// Removes expired entries.
    pub fn expire(&mut self, now_us: i64) -> Vec<Eviction> {
        let expired: Vec<u64> = self.entries.values().filter(|e| e.expires_us <= now_us).map(|e| e.id).collect();
        expired
            .into_iter()
            .filter_map(|id| self.entries.remove(&id))
            .map(|x| Eviction {
                entry_id: x.id,
                retention: retention(&x, now_us),
                domain: x.domain,
                text: x.text,
                reason: "expired".into(),
                at_us: now_us,
            })
            .collect()
    }

    /// The `limit` entries of `domain` most worth recalling for `query` (shared words, then
    /// retention), marked as accessed. Returns the touched entries (to persist).
    pub fn recall(&mut self, domain: &str, query: &str, limit: usize, now_us: i64) -> Vec<WmEntry> {
        let words: Vec<String> = tokens(query).collect();
        let mut scored: Vec<(f64, u64)> = self
            .entries
            .values()
            .filter(|e| e.domain == domain && e.expires_us > now_us)
            .map(|e| {
                let overlap = tokens(&e.text).filter(|t| words.contains(t)).count() as f64;
                (overlap + 0.1 * retention(e, now_us), e.id)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        scored
            .into_iter()
            .take(limit)
            .filter_map(|(_, id)| {
                let e = self.entries.get_mut(&id)?;
                e.last_access_us = now_us;
                e.access_count += 1;
                Some(e.clone())
            })
            .collect()
    }
}

/// Lower-cased words of three letters or more.
fn tokens(s: &str) -> impl Iterator<Item = String> + '_ {
    mindfleet_core::words::split(s).filter(|w| w.len() >= 3).map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(text: &str, importance: f64) -> Draft {
        Draft {
            domain: "chat".into(),
            kind: EntryKind::Observation,
            text: text.into(),
            importance,
            event_id: None,
            relevance: 0.0,
        }
    }

    #[test]
    fn retention_formula_matches_the_design() {
        let now = 10 * 86_400_000_000i64;
        let e = WmEntry {
            id: 1,
            domain: "chat".into(),
            kind: EntryKind::Observation,
            text: String::new(),
            importance: 0.5,
            event_id: None,
            relevance: 0.5,
            created_us: now - 7 * 86_400_000_000,
            last_access_us: now - 86_400_000_000,
            access_count: 7,
            expires_us: i64::MAX,
        };
        let want = 0.5 + 0.3 * (-1f64).exp() + 0.2 * (-1f64).exp() + 0.5 + 0.1;
        assert!((retention(&e, now) - want).abs() < 1e-12);
    }

    #[test]
    fn over_capacity_evicts_lowest_retention_with_reason() {
        let mut m = Memory::new(2, i64::MAX / 2, Vec::new());
        m.store(draft("keep important", 0.9), 0);
        m.store(draft("drop trivial", 0.1), 0);
        let (_, ev) = m.store(draft("keep medium", 0.5), 0);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].text, "drop trivial");
        assert!(ev[0].reason.starts_with("capacity"));
        assert_eq!(m.entries.len(), 2);
    }

    #[test]
    fn expired_entries_leave_first() {
        let mut m = Memory::new(10, 100, Vec::new());
        m.store(draft("old", 1.0), 0);
        let (_, ev) = m.store(draft("new", 0.1), 200);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].reason, "expired");
    }

    #[test]
    fn recall_prefers_shared_words_and_marks_access() {
        let mut m = Memory::new(10, i64::MAX / 2, Vec::new());
        m.store(draft("the auth module uses tokens", 0.1), 0);
        m.store(draft("lunch is at noon", 0.9), 0);
        let r = m.recall("chat", "review auth tokens", 1, 5);
        assert_eq!(r[0].text, "the auth module uses tokens");
        assert_eq!(r[0].access_count, 1);
        assert_eq!(r[0].last_access_us, 5);
    }

    #[test]
    fn restored_memory_continues_ids() {
        let mut m = Memory::new(10, 1000, Vec::new());
        let (a, _) = m.store(draft("a", 0.5), 0);
        let m2 = Memory::new(10, 1000, m.entries.values().cloned().collect());
        assert_eq!(m2.next_id, a.id + 1);
    }
}
