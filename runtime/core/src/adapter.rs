//! Adapters as memory: what a LoRA adapter trained on a persona's study data is, how it was
//! judged, and which one answers a request. The runs' files, under the data dir, are
//! `mindfleet_store::adapters`.

#[cfg(feature = "actors")]
use ractor::RpcReplyPort;
#[cfg(feature = "actors")]
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

#[cfg(feature = "actors")]
use crate::task::{Grant, TaskId};

/// How well a model answers the held-out questions: the perplexity of their reference answers
/// (lower is better) and the mean grade of the answers it writes (0..=1, higher is better).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    pub perplexity: f64,
    pub grade: f64,
}

/// Whether an adapter is kept, and why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "reason")]
pub enum Verdict {
    Kept,
    Discarded(String),
}

/// The verdict on an adapter from the held-out scores of the base model (`before`) and of the
/// base model with the adapter (`after`): kept only when it beats the base model, its
/// perplexity lower and its grade no lower.
pub fn judge(before: &Scores, after: &Scores, held_out: usize) -> Verdict {
    if held_out == 0 {
        return Verdict::Discarded("no held-out questions to judge it on".into());
    }
    if after.perplexity.is_nan() || after.perplexity >= before.perplexity {
        return Verdict::Discarded(format!(
            "held-out perplexity {:.3} with it, {:.3} without: not lower",
            after.perplexity, before.perplexity
        ));
    }
    if after.grade < before.grade {
        return Verdict::Discarded(format!(
            "held-out grade {:.3} with it, {:.3} without: lower",
            after.grade, before.grade
        ));
    }
    Verdict::Kept
}

/// What a trained adapter is, where it came from and how it was judged (`record.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterRecord {
    pub id: String,
    pub persona: String,
    /// The topic its data was about; none when it trained on all the persona's study data.
    pub topic: Option<String>,
    /// The model file it adapts.
    pub base_model: String,
    /// FNV-1a (64 bits, hex) of the training chats, in order.
    pub data_hash: String,
    pub train_examples: usize,
    pub held_out: usize,
    pub rank: usize,
    pub alpha: f64,
    /// Short names of the target projections (`q`, `v`, ...).
    pub targets: Vec<String>,
    pub learning_rate: f64,
    pub steps: usize,
    /// The loss of each step, before it.
    pub losses: Vec<f32>,
    pub before: Scores,
    pub after: Scores,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Seconds the training steps took (evaluation apart).
    pub train_s: f64,
    pub started_us: i64,
    pub finished_us: i64,
}

impl AdapterRecord {
    pub fn kept(&self) -> bool {
        self.verdict == Verdict::Kept
    }
}

/// The kept adapter of `records` (oldest first) a request about `text` is answered with: of
/// those trained on one topic, the one with the largest share of its topic's words in `text`
/// (at least half; the newest of equals), else the newest trained on all the persona's study
/// chats (no topic). Words: 3 letters or more, any case (`bind_to_environ (routing/map.py)` has
/// `bind`, `environ`, `routing`, `map`).
pub fn fitting<'a>(records: &'a [AdapterRecord], text: &str) -> Option<&'a AdapterRecord> {
    let said = words(text);
    let share = |topic: &str| {
        let want = words(topic);
        let found = want.iter().filter(|w| said.contains(w)).count();
        if want.is_empty() { 0.0 } else { found as f64 / want.len() as f64 }
    };
    let kept = || records.iter().rev().filter(|r| r.kept());
    let topical = kept()
        .filter_map(|r| r.topic.as_deref().map(|t| (share(t), r)))
        .filter(|(s, _)| *s >= 0.5)
        // `max_by` keeps the last of equals: the oldest of the reversed list, so compare the
        // other way round.
        .min_by(|a, b| b.0.total_cmp(&a.0))
        .map(|(_, r)| r);
    topical.or_else(|| kept().find(|r| r.topic.is_none()))
}

/// The words of `text` as adapters compare texts (a topic with a request, an answer with its
/// reference): runs of letters and digits, 3 or more, lowercased.
pub fn words(text: &str) -> Vec<String> {
    crate::words::split(text).filter(|w| w.len() >= 3).map(str::to_lowercase).collect()
}

/// What the trainer (crate `mindfleet-actors`, one per fleet with a local model) is asked.
#[cfg(feature = "actors")]
#[derive(Debug, RactorMessage)]
pub enum TrainerMsg {
    /// Train an adapter for `persona` on its study chats (those about `topic`, else all) in
    /// idle time; answers with the run's id once it is queued, or why it cannot be.
    Train { persona: String, topic: Option<String>, reply: RpcReplyPort<Result<String, String>> },
    /// The run under way and the runs waiting.
    Status(RpcReplyPort<TrainerStatus>),
    /// The scheduler granted the slot a run trains in (a preemptible `Background` task).
    Granted(Grant),
    /// The scheduler asks for that slot back: higher-class work waits for it.
    Preempt(TaskId),
    /// From the trainer's own thread: a type private to its crate.
    Own(crate::private::Private),
}

/// What the trainer is doing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainerStatus {
    /// `persona/id` of the run under way.
    pub running: Option<String>,
    pub waiting: Vec<String>,
    /// Whether the run under way holds the scheduler's slot (it trains only then).
    #[serde(default)]
    pub granted: bool,
    /// Runs finished since the fleet started, and how the last one ended (its verdict, or the
    /// error that stopped it).
    pub finished: u64,
    pub last: Option<String>,
}

/// FNV-1a, 64 bits: a hash that is the same on every machine and in every version (of training
/// data, and of the passages held out of it).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(perplexity: f64, grade: f64) -> Scores {
        Scores { perplexity, grade }
    }

    #[test]
    fn an_adapter_is_kept_only_when_it_beats_the_base_model_on_the_held_out_questions() {
        let base = scores(12.0, 0.40);
        assert_eq!(judge(&base, &scores(9.0, 0.40), 50), Verdict::Kept);
        assert_eq!(judge(&base, &scores(9.0, 0.55), 50), Verdict::Kept);
        let Verdict::Discarded(why) = judge(&base, &scores(12.5, 0.60), 50) else { panic!("kept") };
        assert!(why.contains("perplexity 12.500 with it, 12.000 without"), "{why}");
        let Verdict::Discarded(why) = judge(&base, &scores(8.0, 0.39), 50) else { panic!("kept") };
        assert!(why.contains("grade 0.390 with it, 0.400 without"), "{why}");
        assert!(matches!(judge(&base, &scores(f64::NAN, 0.5), 50), Verdict::Discarded(_)));
        assert!(matches!(judge(&base, &scores(1.0, 1.0), 0), Verdict::Discarded(w) if w.contains("no held-out")));
    }

    fn record(id: &str, topic: Option<&str>, verdict: Verdict, started_us: i64) -> AdapterRecord {
        AdapterRecord {
            id: id.into(),
            persona: "ann".into(),
            topic: topic.map(str::to_string),
            base_model: "m.gguf".into(),
            data_hash: "00".into(),
            train_examples: 3,
            held_out: 1,
            rank: 8,
            alpha: 16.0,
            targets: vec!["q".into()],
            learning_rate: 1e-3,
            steps: 2,
            losses: vec![2.0, 1.5],
            before: scores(10.0, 0.3),
            after: scores(9.0, 0.3),
            verdict,
            train_s: 1.0,
            started_us,
            finished_us: started_us + 1,
        }
    }

    #[test]
    fn a_request_is_answered_with_the_adapter_of_its_topic_else_the_general_one() {
        let records = vec![
            record("general-old", None, Verdict::Kept, 1),
            record("routing", Some("bind_to_environ (routing/map.py)"), Verdict::Kept, 2),
            record("cookies", Some("dump_cookie (http.py)"), Verdict::Kept, 3),
            record("cookies-worse", Some("dump_cookie (http.py)"), Verdict::Discarded("worse".into()), 4),
            record("general", None, Verdict::Kept, 5),
            record("general-worse", None, Verdict::Discarded("worse".into()), 6),
        ];
        let id = |text: &str| fitting(&records, text).map(|r| r.id.as_str());
        assert_eq!(id("how does bind_to_environ use the routing map?"), Some("routing"));
        assert_eq!(id("what does dump_cookie write into the HTTP header?"), Some("cookies"));
        // A quarter of a topic's words is not enough; the general adapter answers, the newest kept.
        assert_eq!(id("where is the map of the office?"), Some("general"));
        assert_eq!(fitting(&records[1..4], "where is the map of the office?"), None);
        assert_eq!(fitting(&[], "anything"), None);
        // Of two fitting as well, the newer.
        let mut two = records.clone();
        two.push(record("routing-new", Some("bind_to_environ (routing/map.py)"), Verdict::Kept, 7));
        assert_eq!(fitting(&two, "bind_to_environ in routing/map.py").map(|r| r.id.as_str()), Some("routing-new"));
    }
}
