//! Conversation memory: every chat message a persona takes in, recalled by its words and its
//! meaning.
//!
//! A message is written to storage (table `conversation`) as the persona takes it in, so none
//! is lost, and embedded later by a `Background` task of the persona into the fleet's
//! conversation index (an [`IndexMsg`] actor of its own, under `<data>/conversation`), where
//! each persona has its own namespace: the path prefix `{persona}/`. Each message is two things
//! there: its vector (of the message alone) and its keyword document (the message with the few
//! said just before it in its room, [`Said::document`]: an answer is found by the question it
//! answers). Recall fuses the keyword (BM25) and the vector ranks, then weighs the fused
//! relevance with recency, importance and the room; without the vectors it ranks by words and
//! says so (`degraded`).
//!
//! A message's time is its event's `ts`: when it was said, not when it arrived, so history
//! replayed or imported keeps its dates (recency, `since`, the `at` of a recalled message).

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
    /// When it was said: its event's `ts` (µs since the epoch).
    pub at_us: i64,
    /// When the persona took it in (µs): the embedding's lag counts from it.
    pub taken_us: i64,
    /// The priority the persona gave it (0..=1).
    pub importance: f64,
    /// In the conversation index.
    pub embedded: bool,
    /// Consolidated: the observations made of it are kept (see [`Observation`]).
    pub observed: bool,
    /// How often it was recalled, and when last.
    pub recalled: u32,
    pub last_recalled_us: i64,
}

impl Said {
    /// Its entry's path in the conversation index: the persona's namespace, then its key.
    pub fn path(persona: &str, seq: u64) -> String {
        format!("{persona}/{seq}")
    }

    /// Its sequence number, from the last part of an index path ([`Said::path`]); none for an
    /// observation's path or another's.
    pub fn seq_of(path: &str) -> Option<u64> {
        path.rsplit('/').next()?.parse().ok()
    }

    /// What is embedded: who said it, where, and what.
    pub fn content(&self) -> String {
        format!("{} in #{}: {}", self.from, self.room, self.text)
    }

    /// What the keyword side indexes: the messages said just before it in its room (`before`,
    /// oldest first), then its [`Said::content`]. A reply ("adoption agencies") is found by the
    /// words of the question it answers ("what did you research?").
    pub fn document<'a>(&self, before: impl IntoIterator<Item = &'a str>) -> String {
        let mut doc = String::new();
        for b in before {
            doc.push_str(b);
            doc.push('\n');
        }
        doc.push_str(&self.content());
        doc
    }
}

/// What the persona's background consolidation made of what was said: a fact about a speaker
/// (what happened, plans, preferences) or a summary of a session, each linked to the messages
/// it came from. Observations are searched with the messages; one recall ranks is returned as
/// its source messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Unique per persona: twice the sequence number of its first source, plus one for a
    /// summary (one fact per message and one summary per session at most, so made again after
    /// a crash it replaces itself).
    pub id: u64,
    pub kind: ObservationKind,
    /// Who it is about (a fact), or who talked (a summary, comma-separated).
    pub about: String,
    pub room: String,
    pub text: String,
    /// When its last source was said (µs).
    pub at_us: i64,
    /// The messages it came from (sequence numbers).
    pub sources: Vec<u64>,
    /// What made it: `rules` (extractive) or a model's name.
    pub by: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObservationKind {
    Fact,
    Summary,
}

impl Observation {
    /// The id of the fact made of message `seq`, or of the summary of the session it starts.
    pub fn id_of(kind: ObservationKind, first_source: u64) -> u64 {
        first_source * 2 + u64::from(kind == ObservationKind::Summary)
    }

    /// Its entry's path in the conversation index: the persona's namespace, then `o` and its id.
    pub fn path(persona: &str, id: u64) -> String {
        format!("{persona}/o{id}")
    }

    /// Its id, from its index path.
    pub fn id_of_path(path: &str) -> Option<u64> {
        path.rsplit('/').next()?.strip_prefix('o')?.parse().ok()
    }
}

/// What is said in a room in a row: a message joins the context of the next ones in its room
/// when they come within this of it (µs). A longer gap starts a new conversation.
pub const CONTEXT_GAP_US: i64 = 3600 * 1_000_000;

/// Marks on a persona's messages, gathered so that a message marked many times is rewritten
/// once (`Storage::conversation_marks`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaidMarks {
    /// Now in the conversation index.
    pub embedded: Vec<u64>,
    /// Consolidated: these observations are kept, and the messages they were made of (with
    /// those that gave none) marked observed.
    pub observed: Vec<u64>,
    pub observations: Vec<Observation>,
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

    /// Messages with a mark, and observations to keep.
    pub fn len(&self) -> usize {
        self.embedded.len() + self.observed.len() + self.recalled.len() + self.observations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How recall ranks (`[conversation]`): the keyword and the vector ranks fused by reciprocal
/// rank (`keyword` / (`rrf_k` + rank) + `vector` / (`rrf_k` + rank), scaled to 0..=1: the
/// relevance), then a weighted sum of the relevance, the recency (halved every `half_life`),
/// the importance and being in the room asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecallWeights {
    pub relevance: f64,
    pub recency: f64,
    pub importance: f64,
    pub same_room: f64,
    pub half_life: Duration,
    /// The fusion: each ranking's weight, and the constant that flattens the ranks.
    pub keyword: f64,
    pub vector: f64,
    pub rrf_k: f64,
    /// Messages said just before one in its room that its keyword document holds.
    pub context: usize,
}

impl Default for RecallWeights {
    fn default() -> Self {
        // The fusion's and the context's defaults: the best on the LoCoMo dev split
        // (docs/BENCHMARKS.md, "Conversation memory on long conversations").
        RecallWeights {
            relevance: 0.6,
            recency: 0.2,
            importance: 0.1,
            same_room: 0.1,
            half_life: Duration::from_secs(7 * 24 * 3600),
            keyword: 1.0,
            vector: 1.0,
            rrf_k: 20.0,
            context: 2,
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

/// A recalled message: when it was said (`at`, RFC 3339, from its `at_us`), its fused
/// relevance, its cosine similarity to the query (none when only its words matched), the
/// observation that brought it (`via`, when one did) and its score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    #[serde(flatten)]
    pub said: Said,
    pub at: String,
    pub relevance: f32,
    pub similarity: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    pub score: f64,
}

/// The observation that brought a recalled message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Via {
    pub observation: u64,
    pub kind: ObservationKind,
    pub text: String,
}

/// A message the index found for a query, itself or through observations: its fused relevance
/// (0..=1; a message found both ways adds them up), its cosine similarity when the vectors
/// found it, whether its words matched, and the observation that brought it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Found {
    pub relevance: f32,
    pub similarity: Option<f32>,
    pub by_words: bool,
    pub via: Option<Via>,
}

/// What recall found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Recall {
    pub items: Vec<Recalled>,
    /// Why the vectors could not be used: the items were then found by their words only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

impl Found {
    /// Whether it is about the query: its words matched, or its similarity is at least
    /// [`RECALL_SIMILARITY`].
    pub fn related(&self) -> bool {
        self.by_words || self.similarity.is_some_and(|sim| sim >= RECALL_SIMILARITY)
    }
}

/// The least cosine similarity of a message the vectors alone found: below it, a vector
/// neighbour is not about the query (all-MiniLM-L6-v2 puts unrelated short messages around 0
/// to 0.2). A message whose words matched is kept whatever its similarity.
pub const RECALL_SIMILARITY: f32 = 0.25;

/// `candidates` ranked by `w`, best first; those said before `q.since_us`, and those not
/// [`Found::related`] to the query (nor brought by an observation that was), left out.
pub fn rank(candidates: Vec<(Said, Found)>, q: &RecallQuery, w: &RecallWeights, now_us: i64) -> Vec<Recalled> {
    let half_life_us = w.half_life.as_micros().max(1) as f64;
    let mut out: Vec<Recalled> = candidates
        .into_iter()
        // A message an observation brought is related: the observation was.
        .filter(|(s, f)| (f.related() || f.via.is_some()) && q.since_us.is_none_or(|t| s.at_us >= t))
        .map(|(said, f)| {
            let age = (now_us - said.at_us).max(0) as f64;
            let recency = 0.5f64.powf(age / half_life_us);
            let room = f64::from(u8::from(q.room.as_deref() == Some(said.room.as_str())));
            let score = w.relevance * f64::from(f.relevance)
                + w.recency * recency
                + w.importance * said.importance.clamp(0.0, 1.0)
                + w.same_room * room;
            let at = crate::time::rfc3339(said.at_us);
            Recalled { said, at, relevance: f.relevance, similarity: f.similarity, via: f.via, score }
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
            taken_us: at_us,
            importance,
            embedded: true,
            observed: false,
            recalled: 0,
            last_recalled_us: 0,
        }
    }

    /// Found by the vectors alone, with this similarity (and as relevant).
    fn meant(similarity: f32) -> Found {
        Found { relevance: similarity, similarity: Some(similarity), ..Found::default() }
    }

    #[test]
    fn recall_ranks_by_relevance_recency_importance_and_room_and_drops_the_unrelated_and_the_old() {
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
        let got = |c: Vec<(Said, f32)>| {
            let c = c.into_iter().map(|(s, sim)| (s, meant(sim))).collect();
            rank(c, &q, &w, now).iter().map(|r| r.said.seq).collect::<Vec<_>>()
        };
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
        let many: Vec<(Said, Found)> =
            (0..20).map(|i| (said(i, "dev", now, 0.5), meant(0.3 + i as f32 / 100.0))).collect();
        assert_eq!(rank(many, &RecallQuery { limit: 2, ..q.clone() }, &w, now).len(), 2);
    }

    #[test]
    fn a_message_whose_words_matched_is_recalled_whatever_its_similarity_and_says_when_it_was_said() {
        const DAY: i64 = 86_400_000_000;
        let q = RecallQuery { persona: "p".into(), query: "q".into(), room: None, since_us: None, limit: 10 };
        let words = Found { relevance: 0.5, similarity: None, by_words: true, via: None };
        let both = Found { relevance: 0.9, similarity: Some(0.1), by_words: true, via: None };
        let got = rank(
            vec![(said(1, "dev", DAY, 0.5), words), (said(2, "dev", DAY, 0.5), both)],
            &q,
            &RecallWeights::default(),
            2 * DAY,
        );
        assert_eq!(got.iter().map(|r| r.said.seq).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(got[1].similarity, None);
        assert_eq!(got[1].at, "1970-01-02T00:00:00Z");
    }

    #[test]
    fn a_keyword_document_holds_the_messages_before_it_then_the_message() {
        let s = said(3, "dev", 0, 0.5);
        assert_eq!(
            s.document(["bob in #dev: what did you research?"]),
            "bob in #dev: what did you research?\nalice in #dev: message 3"
        );
        assert_eq!(s.document([]), s.content());
    }
}
