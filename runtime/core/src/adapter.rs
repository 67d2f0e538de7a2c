//! Adapters as memory: what a LoRA adapter trained on a persona's study data is, how it was
//! judged, and where it lives.
//!
//! Each training run has a directory `<data>/adapters/<persona>/<id>/`: `job.json` (what it
//! trains on) from its start, `train.checkpoint` while it trains (a restart takes it up), then `record.json` ([`AdapterRecord`]: provenance, loss
//! curve, held-out scores and the verdict) and, when the adapter was kept, `adapter.safetensors`.
//! A discarded adapter leaves its record, with the reason, and no weights.

use std::path::{Path, PathBuf};

use ractor::RpcReplyPort;
use ractor_cluster_derive::RactorMessage;
use serde::{Deserialize, Serialize};

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

/// The adapters of a fleet's data dir, on disk.
#[derive(Debug, Clone)]
pub struct AdapterDir {
    root: PathBuf,
}

/// A training run's files.
pub const JOB: &str = "job.json";
pub const RECORD: &str = "record.json";
pub const WEIGHTS: &str = "adapter.safetensors";
pub const CHECKPOINT: &str = "train.checkpoint";

impl AdapterDir {
    pub fn new(data_dir: &Path) -> AdapterDir {
        AdapterDir { root: data_dir.join("adapters") }
    }

    /// The directory of run `id` of `persona`.
    pub fn run(&self, persona: &str, id: &str) -> PathBuf {
        self.root.join(persona).join(id)
    }

    /// Writes `record` into its run's directory (aside first, then renamed over the old one).
    pub fn write(&self, record: &AdapterRecord) -> std::io::Result<()> {
        let dir = self.run(&record.persona, &record.id);
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join("record.json.partial");
        std::fs::write(&tmp, serde_json::to_vec_pretty(record)?)?;
        std::fs::rename(tmp, dir.join(RECORD))
    }

    /// The records of `persona`'s finished runs, oldest first; a record that cannot be read is
    /// an error naming its file.
    pub fn list(&self, persona: &str) -> Result<Vec<AdapterRecord>, String> {
        let dir = self.root.join(persona);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let mut out = Vec::new();
        for entry in entries {
            let file = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path().join(RECORD);
            match std::fs::read(&file) {
                Ok(bytes) => out.push(
                    serde_json::from_slice::<AdapterRecord>(&bytes)
                        .map_err(|e| format!("{}:{}:{}: {e}", file.display(), e.line(), e.column()))?,
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", file.display())),
            }
        }
        out.sort_by_key(|r| (r.started_us, r.id.clone()));
        Ok(out)
    }

    /// Runs begun and not finished (a `job.json`, no record), as `(persona, id)`: a restart
    /// takes them up.
    pub fn unfinished(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let names = |dir: &Path| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|e| e.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default()
        };
        for persona in names(&self.root) {
            for id in names(&self.root.join(&persona)) {
                let run = self.run(&persona, &id);
                if run.join(JOB).exists() && !run.join(RECORD).exists() {
                    out.push((persona.clone(), id));
                }
            }
        }
        out.sort();
        out
    }

    /// The kept adapter of `persona` a request about `text` is answered with ([`fitting`]): its
    /// record and weights file.
    pub fn choose(&self, persona: &str, text: &str) -> Result<Option<(AdapterRecord, PathBuf)>, String> {
        let records = self.list(persona)?;
        Ok(fitting(&records, text).map(|r| (r.clone(), self.run(&r.persona, &r.id).join(WEIGHTS))))
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
    crate::words::split(text).filter(|w| w.len() >= 3).collect()
}

/// What the trainer (crate `mindfleet-actors`, one per fleet with a local model) is asked.
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
    fn records_are_listed_oldest_first_and_the_newest_kept_one_is_served() {
        let dir = tempfile::tempdir().unwrap();
        let store = AdapterDir::new(dir.path());
        assert!(store.list("ann").unwrap().is_empty());
        store.write(&record("b", Some("routing"), Verdict::Kept, 20)).unwrap();
        store.write(&record("a", Some("routing"), Verdict::Kept, 10)).unwrap();
        store.write(&record("c", Some("routing"), Verdict::Discarded("worse".into()), 30)).unwrap();
        let ids: Vec<String> = store.list("ann").unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        let (chosen, file) = store.choose("ann", "what is routing?").unwrap().unwrap();
        assert_eq!(chosen.id, "b");
        assert_eq!(file, dir.path().join("adapters/ann/b/adapter.safetensors"));
        assert!(store.choose("ann", "what are cookies?").unwrap().is_none());
        // The record reads back as written, the verdict and its reason with it.
        let json = std::fs::read_to_string(dir.path().join("adapters/ann/c/record.json")).unwrap();
        assert!(json.contains("\"verdict\": \"discarded\"") && json.contains("\"reason\": \"worse\""), "{json}");
        // A record that is not one is named with its place.
        std::fs::write(dir.path().join("adapters/ann/a/record.json"), "{\"id\": 3}").unwrap();
        let e = store.list("ann").unwrap_err();
        assert!(e.contains("adapters/ann/a/record.json:1:"), "{e}");
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
