//! Model-based test of working-memory eviction: random stores (in a few domains, with
//! importances in and out of 0..=1), recalls and the passing of time, applied to
//! [`Memory`] and to a plain list of entries, compared after every step. The model keeps
//! the policy (expired entries leave first, then the lowest retention score of the full
//! domain, the oldest id among equals; recall marks what it returns); the score itself is
//! [`retention`], whose formula has its own test.

use mindfleet_core::record::{EntryKind, WmEntry};
use proptest::prelude::*;

use crate::memory::{Draft, Memory, retention};

const CAPACITY: usize = 3;
const TTL_US: i64 = 10_000;
const DOMAINS: [&str; 2] = ["chat", "code"];
const WORDS: [&str; 5] = ["auth", "tokens", "lunch", "deploy", "an"];

#[derive(Default)]
struct Model {
    entries: Vec<WmEntry>,
    next_id: u64,
}

impl Model {
    /// The ids evicted, in order, and whether each was for expiry.
    fn store(&mut self, d: &Draft, now: i64) -> Vec<(u64, bool)> {
        let mut evicted = Vec::new();
        for e in self.entries.iter().filter(|e| e.expires_us <= now) {
            evicted.push((e.id, true));
        }
        self.entries.retain(|e| e.expires_us > now);
        self.next_id += 1;
        self.entries.push(WmEntry {
            id: self.next_id,
            domain: d.domain.clone(),
            kind: d.kind,
            text: d.text.clone(),
            importance: d.importance.clamp(0.0, 1.0),
            event_id: None,
            relevance: d.relevance.clamp(0.0, 1.0),
            created_us: now,
            last_access_us: now,
            access_count: 0,
            expires_us: now + TTL_US,
        });
        while self.entries.iter().filter(|e| e.domain == d.domain).count() > CAPACITY {
            let victim = self
                .entries
                .iter()
                .filter(|e| e.domain == d.domain)
                .min_by(|a, b| retention(a, now).total_cmp(&retention(b, now)).then(a.id.cmp(&b.id)))
                .map(|e| e.id)
                .expect("over capacity");
            self.entries.retain(|e| e.id != victim);
            evicted.push((victim, false));
        }
        evicted
    }

    /// The ids recalled, best first: shared words, then a tenth of the retention score.
    fn recall(&mut self, domain: &str, query: &str, limit: usize, now: i64) -> Vec<u64> {
        let words: Vec<&str> = query.split(' ').filter(|w| w.len() >= 3).collect();
        let mut scored: Vec<(f64, u64)> = self
            .entries
            .iter()
            .filter(|e| e.domain == domain && e.expires_us > now)
            .map(|e| {
                let shared = e.text.split(' ').filter(|w| w.len() >= 3 && words.contains(w)).count();
                (shared as f64 + 0.1 * retention(e, now), e.id)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        scored.truncate(limit);
        for (_, id) in &scored {
            let e = self.entries.iter_mut().find(|e| e.id == *id).expect("scored");
            e.last_access_us = now;
            e.access_count += 1;
        }
        scored.into_iter().map(|(_, id)| id).collect()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Store { domain: usize, words: Vec<usize>, importance: f64, relevance: f64 },
    Recall { domain: usize, words: Vec<usize>, limit: usize },
    Wait { us: i64 },
}

fn text(words: &[usize]) -> String {
    words.iter().map(|w| WORDS[*w]).collect::<Vec<_>>().join(" ")
}

fn op() -> impl Strategy<Value = Op> {
    let words = proptest::collection::vec(0..WORDS.len(), 0..4);
    let level = prop_oneof![Just(-1.0), Just(0.0), Just(0.5), Just(1.0), Just(2.0), 0.0..1.0f64];
    prop_oneof![
        5 => (0..DOMAINS.len(), words.clone(), level.clone(), level)
            .prop_map(|(domain, words, importance, relevance)| Op::Store { domain, words, importance, relevance }),
        2 => (0..DOMAINS.len(), words, 0usize..5).prop_map(|(domain, words, limit)| Op::Recall { domain, words, limit }),
        2 => prop_oneof![0i64..3_000, Just(TTL_US)].prop_map(|us| Op::Wait { us }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn working_memory_evicts_as_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut real = Memory::new(CAPACITY, TTL_US, Vec::new());
        let mut model = Model::default();
        let mut now = 1_000_000i64;
        for op in ops {
            match op {
                Op::Store { domain, words, importance, relevance } => {
                    let d = Draft {
                        domain: DOMAINS[domain].into(),
                        kind: EntryKind::Observation,
                        text: text(&words),
                        importance,
                        event_id: None,
                        relevance,
                    };
                    let want = model.store(&d, now);
                    let (entry, evicted) = real.store(d, now);
                    prop_assert_eq!(entry.id, model.next_id);
                    let got: Vec<(u64, bool)> = evicted.iter().map(|e| (e.entry_id, e.reason == "expired")).collect();
                    prop_assert_eq!(got, want);
                    prop_assert!(evicted.iter().all(|e| e.reason == "expired" || e.reason.starts_with("capacity")));
                }
                Op::Recall { domain, words, limit } => {
                    let query = text(&words);
                    let want = model.recall(DOMAINS[domain], &query, limit, now);
                    let got: Vec<u64> = real.recall(DOMAINS[domain], &query, limit, now).iter().map(|e| e.id).collect();
                    prop_assert_eq!(got, want);
                }
                Op::Wait { us } => now += us,
            }
            let real_entries: Vec<&WmEntry> = real.entries.values().collect();
            let model_entries: Vec<&WmEntry> = model.entries.iter().collect();
            prop_assert_eq!(real_entries, model_entries);
            for domain in DOMAINS {
                prop_assert!(real.entries.values().filter(|e| e.domain == domain).count() <= CAPACITY);
            }
        }
    }
}
