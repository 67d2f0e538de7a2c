//! The adapters of a fleet's data dir, on disk: where each LoRA training run's files are, the
//! writing of its record and the listing of them (what an adapter is and how it is judged is
//! in [`mindfleet_core::adapter`]).
//!
//! Each training run has a directory `<data>/adapters/<persona>/<id>/`: `job.json` (what it
//! trains on) from its start, `train.checkpoint` while it trains (a restart takes it up), then `record.json` ([`AdapterRecord`]: provenance, loss
//! curve, held-out scores and the verdict) and, when the adapter was kept, `adapter.safetensors`.
//! A discarded adapter leaves its record, with the reason, and no weights.

use std::path::{Path, PathBuf};

use mindfleet_core::adapter::{AdapterRecord, fitting};

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

#[cfg(test)]
mod tests {
    use super::*;
    use mindfleet_core::adapter::{Scores, Verdict};

    fn scores(perplexity: f64, grade: f64) -> Scores {
        Scores { perplexity, grade }
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
}
