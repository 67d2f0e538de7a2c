//! `mindfleet bench refs-eval`: calibrates the semantic threshold of reference matching
//! (`[references] semantic_threshold`) on a labelled set.
//!
//! The set (`bench/refs-eval/`) is a fleet file whose `[references] include` names a catalog of
//! `[[reference]]` tables, read as any fleet file is, and `labelled.jsonl`: texts a persona
//! receives, each with the references a competent engineer would open for it (none for
//! off-topic ones).
//!
//! Every text and every reference's [`Reference::semantic_text`] is embedded with the real
//! MiniLM model, and their cosine similarity is computed as `mindfleet refs match` computes it.
//! The pairs scored are those the semantic stage decides: a reference already found for the
//! text by `@id` or by a tag is left out, as the pipeline skips it there ([`refs::semantic`]
//! ranks the rest). A pair is positive when the text expects the reference, and predicted
//! when its similarity is at least the threshold; the sweep gives precision, recall and F1 of
//! every threshold from 0.05 to 0.80, the best one, a 2-fold held-out F1 of that choice and the
//! figures of the current default.
//!
//! [`Reference::semantic_text`]: mindfleet_core::refs::Reference::semantic_text

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use mindfleet_actors::embed::model_name;
use mindfleet_core::config::ReferencesConfig;
use mindfleet_core::embedding::dot;
use mindfleet_core::refs::{self, Catalog, RefMatch};
use mindfleet_models::embed::Embedder;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{percentile, round};

/// The set's folder, relative to the repository's root.
pub const DEFAULT_DIR: &str = "bench/refs-eval";
/// The fleet file of a set, in its folder.
pub const FLEET_FILE: &str = "fleet.toml";
/// The labelled texts of a set, in its folder.
pub const LABELLED_FILE: &str = "labelled.jsonl";
/// Texts embedded per call of the model.
const BATCH: usize = 32;

/// One labelled text, as the JSONL file has it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Labelled {
    pub text: String,
    /// Ids of the references the text calls for; empty for an off-topic text.
    pub expect: Vec<String>,
    /// 1-based line of the file.
    #[serde(skip)]
    pub line: usize,
}

/// Reads labelled texts: one object a line, blank lines skipped; every expected id in
/// `catalog`, once.
pub fn parse_labelled(text: &str, catalog: &Catalog) -> anyhow::Result<Vec<Labelled>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let mut l: Labelled = serde_json::from_str(line).with_context(|| format!("{LABELLED_FILE}:{}", i + 1))?;
        l.line = i + 1;
        anyhow::ensure!(!l.text.trim().is_empty(), "{LABELLED_FILE}:{}: empty text", l.line);
        for (k, id) in l.expect.iter().enumerate() {
            anyhow::ensure!(
                catalog.get(id).is_some(),
                "{LABELLED_FILE}:{}: no reference {id:?} in the catalog",
                l.line
            );
            anyhow::ensure!(!l.expect[..k].contains(id), "{LABELLED_FILE}:{}: {id:?} expected twice", l.line);
        }
        out.push(l);
    }
    anyhow::ensure!(!out.is_empty(), "{LABELLED_FILE}: no texts");
    Ok(out)
}

/// The catalog of the set in `dir` (its fleet file read as any fleet file is) and its labelled
/// texts.
pub fn load(dir: &Path) -> anyhow::Result<(Catalog, Vec<Labelled>)> {
    let fleet = dir.join(FLEET_FILE);
    anyhow::ensure!(fleet.exists(), "{} not found: run from the repository's root or pass --dir", fleet.display());
    let catalog = mindfleet::fleet_config(Some(&fleet))?.references.catalog;
    anyhow::ensure!(!catalog.refs.is_empty(), "{}: the catalog is empty", fleet.display());
    let path = dir.join(LABELLED_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let labelled = parse_labelled(&text, &catalog)?;
    Ok((catalog, labelled))
}

/// What the pipeline takes before the semantic stage: the references named by `@id` in the
/// text, then those found by a tag.
fn found_before_semantic(catalog: &Catalog, text: &str) -> Vec<RefMatch> {
    let named = catalog.explicit(text);
    let skip: BTreeSet<String> = named.iter().map(|m| m.id.clone()).collect();
    let tags = catalog.by_tags(text, &skip);
    named.into_iter().chain(tags).collect()
}

/// One text scored: what was found before the semantic stage, and the semantic stage's
/// candidates (the other selectable references), best first, each with its similarity.
#[derive(Debug, Clone)]
pub struct Scored {
    pub line: usize,
    pub text: String,
    pub expect: Vec<String>,
    pub before: Vec<RefMatch>,
    pub candidates: Vec<(String, f32)>,
}

impl Scored {
    fn off_topic(&self) -> bool {
        self.expect.is_empty()
    }

    /// The pairs this text gives the semantic stage.
    fn pairs(&self) -> impl Iterator<Item = Pair> + '_ {
        self.candidates.iter().map(|(id, s)| Pair { similarity: *s, positive: self.expect.contains(id) })
    }

    /// Whether the semantic stage offers anything at `t`.
    fn hinted_at(&self, t: f32) -> bool {
        self.candidates.first().is_some_and(|(_, s)| *s >= t)
    }

    /// Whether the best candidate is expected (`None`: the semantic stage has nothing to find
    /// for this text).
    fn top_is_expected(&self) -> Option<bool> {
        self.pairs()
            .any(|p| p.positive)
            .then(|| self.candidates.first().is_some_and(|(id, _)| self.expect.contains(id)))
    }
}

/// What each labelled text gives the semantic stage; `similarity` holds each text's
/// similarity to each reference, in the catalog's order.
pub fn score(
    catalog: &Catalog,
    labelled: &[Labelled],
    similarity: &BTreeMap<String, Vec<f32>>,
) -> anyhow::Result<Vec<Scored>> {
    labelled
        .iter()
        .map(|l| {
            let sims = similarity.get(&l.text).with_context(|| format!("line {}: no similarities", l.line))?;
            let by_id: BTreeMap<String, f32> =
                catalog.refs.iter().map(|r| r.id.clone()).zip(sims.iter().copied()).collect();
            let before = found_before_semantic(catalog, &l.text);
            let skip: BTreeSet<String> = before.iter().map(|m| m.id.clone()).collect();
            let candidates = refs::semantic(catalog, &by_id, f32::NEG_INFINITY, &skip)
                .into_iter()
                .map(|m| (m.id, m.score))
                .collect();
            Ok(Scored { line: l.line, text: l.text.clone(), expect: l.expect.clone(), before, candidates })
        })
        .collect()
}

/// Each text's cosine similarity to each reference's semantic text (catalog order), by text:
/// the dot product of the model's unit vectors, as `mindfleet refs match` computes it.
fn similarities(model: &Embedder, catalog: &Catalog, texts: &[&str]) -> anyhow::Result<BTreeMap<String, Vec<f32>>> {
    let embed = |texts: &[&str]| -> anyhow::Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            out.extend(model.embed(batch)?.into_iter().map(|e| e.vector));
        }
        Ok(out)
    };
    let ref_texts: Vec<String> = catalog.refs.iter().map(|r| r.semantic_text()).collect();
    let ref_vectors = embed(&ref_texts.iter().map(String::as_str).collect::<Vec<_>>())?;
    let text_vectors = embed(texts)?;
    Ok(texts
        .iter()
        .zip(&text_vectors)
        .map(|(t, v)| (t.to_string(), ref_vectors.iter().map(|r| dot(v, r)).collect()))
        .collect())
}

/// One (text, reference) pair of the semantic stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    pub similarity: f32,
    /// The text expects the reference.
    pub positive: bool,
}

/// Decisions at one threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub tp: usize,
    pub fp: usize,
    pub fn_: usize,
}

impl Counts {
    pub fn at(pairs: &[Pair], t: f32) -> Counts {
        let mut c = Counts::default();
        for p in pairs {
            match (p.similarity >= t, p.positive) {
                (true, true) => c.tp += 1,
                (true, false) => c.fp += 1,
                (false, true) => c.fn_ += 1,
                (false, false) => {}
            }
        }
        c
    }

    /// 0 when nothing is predicted.
    pub fn precision(&self) -> f64 {
        ratio(self.tp, self.tp + self.fp)
    }

    /// 0 when there is nothing to find.
    pub fn recall(&self) -> f64 {
        ratio(self.tp, self.tp + self.fn_)
    }

    pub fn f1(&self) -> f64 {
        ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn_)
    }

    fn json(&self) -> Value {
        json!({
            "precision": round(self.precision(), 3),
            "recall": round(self.recall(), 3),
            "f1": round(self.f1(), 3),
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn_,
        })
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The thresholds swept: 0.05 to 0.80 by 0.01.
pub fn thresholds() -> Vec<f32> {
    (5..=80).map(|c| c as f32 / 100.0).collect()
}

/// Each threshold's decisions on `pairs`.
pub fn sweep(pairs: &[Pair]) -> Vec<(f32, Counts)> {
    thresholds().into_iter().map(|t| (t, Counts::at(pairs, t))).collect()
}

/// The threshold of the best F1. Where neighbouring thresholds tie (no pair between them), the
/// middle of the first run of ties: the cut furthest from the pairs on either side.
pub fn best(sweep: &[(f32, Counts)]) -> (f32, Counts) {
    let max = sweep.iter().map(|(_, c)| c.f1()).fold(f64::NEG_INFINITY, f64::max);
    let first = sweep.iter().position(|(_, c)| c.f1() == max).unwrap_or(0);
    let run = sweep[first..].iter().take_while(|(_, c)| c.f1() == max).count();
    sweep[first + (run - 1) / 2]
}

/// Off-topic texts the semantic stage offers a reference to at `t`, as a share of them.
fn false_hint_rate(scored: &[Scored], t: f32) -> f64 {
    let off: Vec<&Scored> = scored.iter().filter(|s| s.off_topic()).collect();
    ratio(off.iter().filter(|s| s.hinted_at(t)).count(), off.len())
}

/// Figures at one threshold.
fn at(scored: &[Scored], t: f32) -> Value {
    let pairs: Vec<Pair> = scored.iter().flat_map(Scored::pairs).collect();
    let mut v = Counts::at(&pairs, t).json();
    v["threshold"] = round(t as f64, 2).into();
    v["false_hint_rate"] = round(false_hint_rate(scored, t), 3).into();
    v
}

/// 2-fold cross-validation, the texts split by the parity of their line: the threshold
/// calibrated on one fold, measured on the other.
fn cross_validate(scored: &[Scored]) -> Value {
    let fold = |odd: bool| -> Vec<Pair> {
        scored.iter().filter(|s| (s.line % 2 == 1) == odd).flat_map(Scored::pairs).collect()
    };
    let (odd, even) = (fold(true), fold(false));
    let mut folds = Vec::new();
    let mut f1s = Vec::new();
    for (name, calibrate, test) in [("odd lines", &odd, &even), ("even lines", &even, &odd)] {
        let (t, fit) = best(&sweep(calibrate));
        let held = Counts::at(test, t);
        f1s.push(held.f1());
        folds.push(json!({
            "calibrated_on": name,
            "threshold": round(t as f64, 2),
            "calibration_f1": round(fit.f1(), 3),
            "held_out": held.json(),
        }));
    }
    json!({
        "split": "texts on odd lines of the file against texts on even lines",
        "folds": folds,
        "mean_f1": round(f1s.iter().sum::<f64>() / f1s.len() as f64, 3),
    })
}

/// Quantiles of similarities (nearest rank).
fn quantiles(xs: Vec<f32>, ps: &[(&str, f64)]) -> Value {
    let mut xs: Vec<f64> = xs.into_iter().map(f64::from).collect();
    let mut out = serde_json::Map::new();
    for (name, p) in ps {
        let v = if xs.is_empty() { Value::Null } else { round(percentile(&mut xs, *p), 3).into() };
        out.insert(name.to_string(), v);
    }
    out.into()
}

/// The figures of a scored set (see the module doc); with `details`, each threshold's
/// decisions and each text's first three candidates.
pub fn figures(scored: &[Scored], details: bool) -> Value {
    let pairs: Vec<Pair> = scored.iter().flat_map(Scored::pairs).collect();
    let table = sweep(&pairs);
    let (best_t, _) = best(&table);
    let default_t = ReferencesConfig::DEFAULT_SEMANTIC_THRESHOLD as f32;
    let with: Vec<Option<bool>> = scored.iter().map(Scored::top_is_expected).collect();
    let asked = with.iter().flatten().count();
    let top1 = with.iter().flatten().filter(|ok| **ok).count();
    let top1_above = scored.iter().filter(|s| s.top_is_expected() == Some(true) && s.hinted_at(best_t)).count();
    let expected_before =
        scored.iter().map(|s| s.before.iter().filter(|m| s.expect.contains(&m.id)).count()).sum::<usize>();
    let off_topic = scored.iter().filter(|s| s.off_topic()).count();
    let mut out = json!({
        "texts": scored.len(),
        "off_topic_texts": off_topic,
        "texts_with_two_or_more": scored.iter().filter(|s| s.expect.len() >= 2).count(),
        "pairs": pairs.len(),
        "positives": pairs.iter().filter(|p| p.positive).count(),
        "expected_found_by_id_or_tag": expected_before,
        "off_topic_found_by_id_or_tag": scored.iter().filter(|s| s.off_topic() && !s.before.is_empty()).count(),
        "scoring": "pairs (text, reference) the semantic stage decides (references found by @id or a tag for the \
                    text left out); positive when the text expects the reference, predicted when similarity >= \
                    threshold; thresholds 0.05 to 0.80 by 0.01; best = max F1 (middle of the first run of ties)",
        "best_threshold": round(best_t as f64, 2),
        "at_best": at(scored, best_t),
        "held_out": cross_validate(scored),
        "at_default": at(scored, default_t),
        "recall_at_1": round(ratio(top1, asked), 3),
        "recall_at_1_above_best": round(ratio(top1_above, asked), 3),
        "texts_for_recall_at_1": asked,
        "similarity": {
            "positives": quantiles(
                pairs.iter().filter(|p| p.positive).map(|p| p.similarity).collect(),
                &[("min", 0.0), ("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("max", 1.0)],
            ),
            "negatives": quantiles(
                pairs.iter().filter(|p| !p.positive).map(|p| p.similarity).collect(),
                &[("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)],
            ),
            "off_topic_best": quantiles(
                scored.iter().filter(|s| s.off_topic()).filter_map(|s| s.candidates.first().map(|c| c.1)).collect(),
                &[("p50", 0.5), ("p90", 0.9), ("max", 1.0)],
            ),
        },
    });
    if details {
        let thresholds: Vec<Value> = table
            .iter()
            .map(|(t, c)| {
                let mut v = c.json();
                v["threshold"] = round(*t as f64, 2).into();
                v["false_hint_rate"] = round(false_hint_rate(scored, *t), 3).into();
                v
            })
            .collect();
        let texts: Vec<Value> = scored
            .iter()
            .map(|s| {
                json!({
                    "line": s.line,
                    "text": s.text,
                    "expect": s.expect,
                    "before_semantic": s.before.iter().map(|m| json!({"id": m.id, "via": m.via, "matched": m.matched})).collect::<Vec<_>>(),
                    "top": s.candidates.iter().take(3).map(|(id, sim)| json!({
                        "id": id,
                        "similarity": round(*sim as f64, 3),
                        "expected": s.expect.contains(id),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        out["details"] = json!({ "thresholds": thresholds, "texts": texts });
    }
    out
}

/// The benchmark on the set in `dir` with the MiniLM model in `model_dir`.
pub fn refs_eval(dir: &Path, model_dir: &Path, details: bool) -> anyhow::Result<Value> {
    let start = Instant::now();
    let (catalog, labelled) = load(dir)?;
    let model = Embedder::load(model_dir)?;
    let texts: Vec<&str> = labelled.iter().map(|l| l.text.as_str()).collect();
    let sims = similarities(&model, &catalog, &texts)?;
    let scored = score(&catalog, &labelled, &sims)?;
    let mut out = json!({
        "bench": "refs-eval",
        "model": model_name(model_dir),
        "references": catalog.refs.len(),
        "default_threshold": round(ReferencesConfig::DEFAULT_SEMANTIC_THRESHOLD, 2),
    });
    if let (Value::Object(o), Value::Object(f)) = (&mut out, figures(&scored, details)) {
        o.extend(f);
    }
    out["seconds"] = round(start.elapsed().as_secs_f64(), 1).into();
    Ok(out)
}

/// The figures as a short table for people.
pub fn render(v: &Value) -> String {
    let f = |v: &Value| v.as_f64().map_or_else(|| "-".into(), |x| format!("{x:.3}"));
    let mut out = format!(
        "{} texts ({} off-topic), {} pairs, {} positive; model {}\n\n",
        v["texts"],
        v["off_topic_texts"],
        v["pairs"],
        v["positives"],
        v["model"].as_str().unwrap_or("")
    );
    out.push_str(&format!(
        "{:<28} {:>9} {:>9} {:>6} {:>6} {:>10}\n",
        "", "threshold", "precision", "recall", "F1", "false hint"
    ));
    for (name, at) in [("best (whole set)", &v["at_best"]), ("default", &v["at_default"])] {
        out.push_str(&format!(
            "{name:<28} {:>9} {:>9} {:>6} {:>6} {:>10}\n",
            format!("{:.2}", at["threshold"].as_f64().unwrap_or(0.0)),
            f(&at["precision"]),
            f(&at["recall"]),
            f(&at["f1"]),
            f(&at["false_hint_rate"])
        ));
    }
    for fold in v["held_out"]["folds"].as_array().into_iter().flatten() {
        let h = &fold["held_out"];
        out.push_str(&format!(
            "{:<28} {:>9} {:>9} {:>6} {:>6}\n",
            format!("held out, set on {}", fold["calibrated_on"].as_str().unwrap_or("")),
            format!("{:.2}", fold["threshold"].as_f64().unwrap_or(0.0)),
            f(&h["precision"]),
            f(&h["recall"]),
            f(&h["f1"])
        ));
    }
    out.push_str(&format!(
        "\nheld-out F1 (mean of 2 folds) {}; recall@1 {}\n",
        f(&v["held_out"]["mean_f1"]),
        f(&v["recall_at_1"])
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_DIR)
    }

    fn pairs(pos: &[f32], neg: &[f32]) -> Vec<Pair> {
        let p = pos.iter().map(|&s| Pair { similarity: s, positive: true });
        p.chain(neg.iter().map(|&s| Pair { similarity: s, positive: false })).collect()
    }

    #[test]
    fn the_shipped_set_loads_and_its_labels_name_references_of_its_catalog() {
        let (catalog, labelled) = load(&set_dir()).unwrap();
        assert!((12..=15).contains(&catalog.refs.len()), "{} references", catalog.refs.len());
        for r in &catalog.refs {
            assert!(r.path.is_file(), "{}: {}", r.id, r.path.display());
            assert!(!r.description.is_empty() && (3..=6).contains(&r.tags.len()), "{}", r.id);
        }
        let off = labelled.iter().filter(|l| l.expect.is_empty()).count();
        let two = labelled.iter().filter(|l| l.expect.len() >= 2).count();
        assert!(labelled.len() >= 100, "{} texts", labelled.len());
        assert!(off * 5 >= labelled.len() && off * 3 <= labelled.len(), "{off} off-topic of {}", labelled.len());
        assert!(two >= 10, "{two} texts with two references");
        // Every reference is expected somewhere, so each has positives to be calibrated on.
        for r in &catalog.refs {
            assert!(labelled.iter().any(|l| l.expect.contains(&r.id)), "{} is never expected", r.id);
        }
        // The set tests the semantic stage: most expectations are not met by a tag already.
        let expected: usize = labelled.iter().map(|l| l.expect.len()).sum();
        let by_tags: usize = labelled
            .iter()
            .map(|l| found_before_semantic(&catalog, &l.text).iter().filter(|m| l.expect.contains(&m.id)).count())
            .sum();
        assert!(by_tags * 5 <= expected, "{by_tags} of {expected} expectations met by a tag");
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        let (catalog, _) = load(&set_dir()).unwrap();
        let ok = "{\"text\": \"lunch?\", \"expect\": []}\n\n";
        assert_eq!(parse_labelled(ok, &catalog).unwrap()[0].line, 1);
        let err = parse_labelled(&format!("{ok}{{\"text\": \"x\", \"expect\": [\"nowhere\"]}}"), &catalog).unwrap_err();
        assert_eq!(err.to_string(), "labelled.jsonl:3: no reference \"nowhere\" in the catalog");
        let err = parse_labelled("{\"text\": \"x\", \"expect\": [\"caching\", \"caching\"]}", &catalog).unwrap_err();
        assert!(err.to_string().contains("expected twice"), "{err}");
        let err = parse_labelled("{\"text\": \"x\"}", &catalog).unwrap_err();
        assert!(format!("{err:#}").starts_with("labelled.jsonl:1: missing field `expect`"), "{err:#}");
        assert!(parse_labelled("\n", &catalog).is_err());
    }

    #[test]
    fn counts_precision_recall_and_f1_at_a_threshold() {
        let p = pairs(&[0.9, 0.5, 0.3], &[0.6, 0.2, 0.1]);
        let c = Counts::at(&p, 0.4);
        assert_eq!(c, Counts { tp: 2, fp: 1, fn_: 1 });
        assert_eq!((c.precision(), c.recall(), c.f1()), (2.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0));
        // At the threshold counts as above it.
        assert_eq!(Counts::at(&p, 0.5).tp, 2);
        // Nothing predicted: precision, recall and F1 are 0, not NaN.
        let none = Counts::at(&p, 0.95);
        assert_eq!((none.precision(), none.recall(), none.f1()), (0.0, 0.0, 0.0));
        assert_eq!(Counts::at(&p, 0.0), Counts { tp: 3, fp: 3, fn_: 0 });
    }

    #[test]
    fn the_sweep_runs_from_five_to_eighty_hundredths() {
        let t = thresholds();
        assert_eq!((t.len(), t[0], t[25], t[75]), (76, 0.05, 0.30, 0.80));
    }

    #[test]
    fn the_best_threshold_of_a_separable_set_is_the_middle_of_its_gap() {
        let p = pairs(&[0.6, 0.7], &[0.2, 0.3]);
        let (t, c) = best(&sweep(&p));
        // F1 is 1 from 0.31 to 0.60; the middle of those 30 thresholds.
        assert_eq!(t, 0.45);
        assert_eq!(c, Counts { tp: 2, fp: 0, fn_: 0 });
    }

    #[test]
    fn the_best_threshold_trades_a_false_hint_for_a_found_reference() {
        // A negative at 0.40 between positives at 0.35 and 0.50: taking both positives (F1 0.8)
        // beats the one alone (F1 0.667).
        let p = pairs(&[0.35, 0.5], &[0.4, 0.1]);
        let (t, c) = best(&sweep(&p));
        assert_eq!((t, c), (0.23, Counts { tp: 2, fp: 1, fn_: 0 }));
        assert!((c.f1() - 0.8).abs() < 1e-9);
    }

    #[test]
    fn held_out_f1_measures_each_fold_at_the_other_folds_threshold() {
        let text = |line: usize, expect: &[&str], candidates: &[(&str, f32)]| Scored {
            line,
            text: String::new(),
            expect: expect.iter().map(|s| s.to_string()).collect(),
            before: Vec::new(),
            candidates: candidates.iter().map(|(id, s)| (id.to_string(), *s)).collect(),
        };
        // Odd lines separate at 0.3-0.5, even lines at 0.6-0.7: a threshold set on the odd lines
        // (0.40) lets the even lines' negative at 0.6 through, one set on the even lines (0.65)
        // misses the odd lines' positive at 0.5.
        let scored = [
            text(1, &["a"], &[("a", 0.5), ("b", 0.3)]),
            text(2, &["a"], &[("a", 0.7), ("b", 0.6)]),
            text(3, &[], &[("b", 0.2)]),
        ];
        let cv = cross_validate(&scored);
        assert_eq!(cv["folds"][0]["threshold"], 0.4);
        assert_eq!(cv["folds"][0]["held_out"]["f1"], round(2.0 / 3.0, 3));
        assert_eq!(cv["folds"][1]["threshold"], 0.65);
        assert_eq!(cv["folds"][1]["held_out"]["f1"], 0.0);
        assert_eq!(cv["mean_f1"], round(1.0 / 3.0, 3));
        // The off-topic text's best candidate is below both thresholds; recall@1 counts the two
        // texts with something to find.
        assert_eq!((false_hint_rate(&scored, 0.4), false_hint_rate(&scored, 0.15)), (0.0, 1.0));
        let f = figures(&scored, true);
        assert_eq!(
            (f["pairs"].as_u64(), f["positives"].as_u64(), f["recall_at_1"].as_f64()),
            (Some(5), Some(2), Some(1.0))
        );
        assert_eq!(f["details"]["thresholds"].as_array().map(Vec::len), Some(76));
    }
}
