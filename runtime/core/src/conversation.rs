//! Conversation memory: every chat message a persona takes in, recalled by meaning.
//!
//! A message is written to storage (table `conversation`) as the persona takes it in, so none
//! is lost, and embedded later by a `Background` task of the persona into the fleet's
//! conversation index (an [`IndexMsg`] actor of its own, under `<data>/conversation`), where
//! each persona has its own namespace: the path prefix `{persona}/`. Recall ranks what the
//! vectors find by similarity, recency, importance and the room, and says when it could not
//! use the vectors (`degraded`) instead of passing keyword guesses off as recall.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A message a persona took in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Said {
    /// The delivery's sequence number: its key, and its entry's path in the index.
    pub seq: u64,
    pub event_id: String,
    pub room: String,
    pub from: String,
    pub text: String,
    pub at_us: i64,
    /// The priority the persona gave it (0..=1).
    pub importance: f64,
    /// In the conversation index.
    pub embedded: bool,
    /// How often it was recalled, and when last.
    pub recalled: u32,
    pub last_recalled_us: i64,
}

impl Said {
    /// Its entry's path in the conversation index: the persona's namespace, then its key.
    pub fn path(persona: &str, seq: u64) -> String {
        format!("{persona}/{seq}")
    }

    /// What is embedded and searched.
    pub fn content(&self) -> String {
        format!("{} in #{}: {}", self.from, self.room, self.text)
    }
}

/// Marks on a persona's messages, gathered so that a message marked many times is rewritten
/// once ([`Storage::conversation_marks`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaidMarks {
    /// Now in the conversation index.
    pub embedded: Vec<u64>,
    /// Recalled: how many times, and when last (µs).
    pub recalled: BTreeMap<u64, (u32, i64)>,
}

impl SaidMarks {
    /// Marks `seqs` recalled at `at_us`.
    pub fn recall(&mut self, seqs: impl IntoIterator<Item = u64>, at_us: i64) {
        for seq in seqs {
            let m = self.recalled.entry(seq).or_default();
            (m.0, m.1) = (m.0 + 1, m.1.max(at_us));
        }
    }

    /// Messages with a mark.
    pub fn len(&self) -> usize {
        self.embedded.len() + self.recalled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How recall ranks (`[conversation]`): a weighted sum of the cosine similarity, the recency
/// (halved every `half_life`), the importance and being in the room asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecallWeights {
    pub similarity: f64,
    pub recency: f64,
    pub importance: f64,
    pub same_room: f64,
    pub half_life: Duration,
}

impl Default for RecallWeights {
    fn default() -> Self {
        RecallWeights {
            similarity: 0.6,
            recency: 0.2,
            importance: 0.1,
            same_room: 0.1,
            half_life: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// What to recall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecallQuery {
    pub persona: String,
    pub query: String,
    /// The room asked about (its messages rank higher, others are kept).
    #[serde(default)]
    pub room: Option<String>,
    /// Only what was said at or after this time (µs since the epoch).
    #[serde(default)]
    pub since_us: Option<i64>,
    pub limit: usize,
}

/// A recalled message, with its similarity to the query and its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    #[serde(flatten)]
    pub said: Said,
    pub similarity: f32,
    pub score: f64,
}

/// What recall found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Recall {
    pub items: Vec<Recalled>,
    /// Why the vectors could not be used: the items were then found by their words only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

/// The least cosine similarity of a recalled message: below it, a vector neighbour is not about
/// the query (all-MiniLM-L6-v2 puts unrelated short messages around 0 to 0.2).
pub const RECALL_SIMILARITY: f32 = 0.25;

/// `candidates` (each with its similarity) ranked by `w`, best first; those before
/// `q.since_us` or under [`RECALL_SIMILARITY`] left out.
pub fn rank(candidates: Vec<(Said, f32)>, q: &RecallQuery, w: &RecallWeights, now_us: i64) -> Vec<Recalled> {
    let half_life_us = w.half_life.as_micros().max(1) as f64;
    let mut out: Vec<Recalled> = candidates
        .into_iter()
        .filter(|(s, sim)| *sim >= RECALL_SIMILARITY && q.since_us.is_none_or(|t| s.at_us >= t))
        .map(|(said, similarity)| {
            let age = (now_us - said.at_us).max(0) as f64;
            let recency = 0.5f64.powf(age / half_life_us);
            let room = f64::from(u8::from(q.room.as_deref() == Some(said.room.as_str())));
            let score = w.similarity * f64::from(similarity)
                + w.recency * recency
                + w.importance * said.importance.clamp(0.0, 1.0)
                + w.same_room * room;
            Recalled { said, similarity, score }
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.said.seq.cmp(&a.said.seq)));
    out.truncate(q.limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(seq: u64, room: &str, at_us: i64, importance: f64) -> Said {
        Said {
            seq,
            event_id: format!("e{seq}"),
            room: room.into(),
            from: "alice".into(),
            text: format!("message {seq}"),
            at_us,
            importance,
            embedded: true,
            recalled: 0,
            last_recalled_us: 0,
        }
    }

    #[test]
    fn recall_ranks_by_similarity_recency_importance_and_room_and_drops_the_unrelated_and_the_old() {
        const DAY: i64 = 86_400_000_000;
        let now = 100 * DAY;
        let w = RecallWeights::default();
        let q = RecallQuery {
            persona: "p".into(),
            query: "deploys".into(),
            room: Some("ops".into()),
            since_us: Some(now - 30 * DAY),
            limit: 10,
        };
        let got = |c: Vec<(Said, f32)>| rank(c, &q, &w, now).iter().map(|r| r.said.seq).collect::<Vec<_>>();
        // Similarity first: a close match a week old beats a loose one from today.
        assert_eq!(got(vec![(said(1, "dev", now, 0.5), 0.35), (said(2, "dev", now - 7 * DAY, 0.5), 0.8)]), [2, 1]);
        // At equal similarity: newer, then more important, then in the room asked about.
        assert_eq!(got(vec![(said(1, "dev", now - 14 * DAY, 0.5), 0.6), (said(2, "dev", now, 0.5), 0.6)]), [2, 1]);
        assert_eq!(got(vec![(said(1, "dev", now, 0.2), 0.6), (said(2, "dev", now, 0.9), 0.6)]), [2, 1]);
        assert_eq!(got(vec![(said(1, "dev", now, 0.5), 0.6), (said(2, "ops", now, 0.5), 0.6)]), [2, 1]);
        // Unrelated (under the least similarity) and older than asked: left out, however recent
        // or important.
        assert_eq!(
            got(vec![(said(1, "ops", now, 1.0), 0.1), (said(2, "ops", now - 40 * DAY, 1.0), 0.9)]),
            Vec::<u64>::new()
        );
        // The limit keeps the best.
        let many: Vec<(Said, f32)> = (0..20).map(|i| (said(i, "dev", now, 0.5), 0.3 + i as f32 / 100.0)).collect();
        assert_eq!(rank(many, &RecallQuery { limit: 2, ..q.clone() }, &w, now).len(), 2);
    }
}
