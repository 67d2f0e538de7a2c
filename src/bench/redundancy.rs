//! `mindfleet bench redundancy`: calibrates the redundancy check (`[coordination]
//! redundancy_threshold`). Embeds the labelled pairs of `bench/redundancy/pairs.tsv` (two replies
//! to the same message: the same answer said again, or different answers) with the real MiniLM,
//! and prints the threshold on their cosine similarity with the best F1 (redundant is the
//! positive class), its precision and recall, the same figures at the configured default, and
//! the F1 of a threshold chosen on half the pairs measured on the other half.

use std::path::Path;
use std::time::Instant;

use mindfleet_core::config::REDUNDANCY_THRESHOLD;
use mindfleet_core::embedding::cosine;
use mindfleet_models::embed::Embedder;
use serde_json::{Value, json};

use super::round;

/// The labelled pairs (their header says where they come from and who labelled them).
pub const PAIRS: &str = include_str!("../../bench/redundancy/pairs.tsv");

/// One labelled pair of replies.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub a: String,
    pub b: String,
    pub redundant: bool,
}

/// Reads `label<TAB>text a<TAB>text b` lines (`#` starts a comment line), naming the line of
/// a bad one.
pub fn parse_pairs(text: &str) -> anyhow::Result<Vec<Pair>> {
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let [label, a, b] = fields[..] else {
            anyhow::bail!("pairs line {}: {} fields, expected 3 (label, text a, text b)", i + 1, fields.len());
        };
        let redundant = match label {
            "1" => true,
            "0" => false,
            other => anyhow::bail!("pairs line {}: label {other:?}, expected 1 (redundant) or 0", i + 1),
        };
        pairs.push(Pair { a: a.to_string(), b: b.to_string(), redundant });
    }
    Ok(pairs)
}

/// Precision, recall and F1 of "redundant when similarity >= threshold".
pub fn score(scored: &[(f64, bool)], threshold: f64) -> (f64, f64, f64) {
    let tp = scored.iter().filter(|(s, r)| *r && *s >= threshold).count() as f64;
    let fp = scored.iter().filter(|(s, r)| !*r && *s >= threshold).count() as f64;
    let positives = scored.iter().filter(|(_, r)| *r).count() as f64;
    let precision = if tp + fp == 0.0 { 1.0 } else { tp / (tp + fp) };
    let recall = if positives == 0.0 { 0.0 } else { tp / positives };
    let f1 = if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) };
    (precision, recall, f1)
}

/// The threshold with the best F1: each candidate halfway between two neighbouring similarities;
/// among equals, the highest (the fewest drafts withheld).
pub fn best_threshold(scored: &[(f64, bool)]) -> f64 {
    let mut sims: Vec<f64> = scored.iter().map(|(s, _)| *s).collect();
    sims.sort_by(f64::total_cmp);
    let mut best = (f64::MIN, 1.0);
    for w in sims.windows(2) {
        let t = (w[0] + w[1]) / 2.0;
        let f1 = score(scored, t).2;
        if f1 > best.0 || (f1 == best.0 && t > best.1) {
            best = (f1, t);
        }
    }
    best.1
}

pub fn redundancy(model_dir: &Path) -> anyhow::Result<Value> {
    let pairs = parse_pairs(PAIRS)?;
    let t = Instant::now();
    let model = Embedder::load(model_dir)?;
    let texts: Vec<&str> = pairs.iter().flat_map(|p| [p.a.as_str(), p.b.as_str()]).collect();
    let mut vectors = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(32) {
        vectors.extend(model.embed(chunk)?);
    }
    let scored: Vec<(f64, bool)> =
        pairs.iter().zip(vectors.chunks(2)).map(|(p, v)| (cosine(&v[0].vector, &v[1].vector), p.redundant)).collect();
    let mean = |redundant: bool| {
        let s: Vec<f64> = scored.iter().filter(|(_, r)| *r == redundant).map(|(s, _)| *s).collect();
        round(s.iter().sum::<f64>() / s.len().max(1) as f64, 3)
    };
    let threshold = best_threshold(&scored);
    let (precision, recall, f1) = score(&scored, threshold);
    let (dp, dr, df) = score(&scored, REDUNDANCY_THRESHOLD);
    // Held out: the threshold chosen on the odd pairs measured on the even ones, and back.
    let half = |odd: bool| -> Vec<(f64, bool)> { scored.iter().skip(usize::from(odd)).step_by(2).copied().collect() };
    let held_out = |on: bool| {
        let t = best_threshold(&half(on));
        (t, score(&half(!on), t).2)
    };
    let (odd, even) = (held_out(true), held_out(false));
    Ok(json!({
        "bench": "redundancy",
        "model": model_dir.file_name().map(|n| n.to_string_lossy().into_owned()),
        "pairs": pairs.len(),
        "redundant_pairs": pairs.iter().filter(|p| p.redundant).count(),
        "mean_similarity_redundant": mean(true),
        "mean_similarity_distinct": mean(false),
        "threshold": round(threshold, 3),
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(f1, 3),
        "default_threshold": REDUNDANCY_THRESHOLD,
        "default_precision": round(dp, 3),
        "default_recall": round(dr, 3),
        "default_f1": round(df, 3),
        "held_out_thresholds": [round(odd.0, 3), round(even.0, 3)],
        "held_out_f1": round((odd.1 + even.1) / 2.0, 3),
        "seconds": round(t.elapsed().as_secs_f64(), 2),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_pairs_parse_and_hold_both_labels() {
        let pairs = parse_pairs(PAIRS).unwrap();
        assert!(pairs.len() >= 100, "{} pairs", pairs.len());
        let redundant = pairs.iter().filter(|p| p.redundant).count();
        assert!(redundant >= 40 && pairs.len() - redundant >= 40, "{redundant} of {}", pairs.len());
    }

    #[test]
    fn a_bad_pair_line_is_named() {
        let err = parse_pairs("# header\n1\tonly two\n").unwrap_err().to_string();
        assert_eq!(err, "pairs line 2: 2 fields, expected 3 (label, text a, text b)");
        let err = parse_pairs("yes\ta\tb\n").unwrap_err().to_string();
        assert_eq!(err, "pairs line 1: label \"yes\", expected 1 (redundant) or 0");
    }

    #[test]
    fn the_best_threshold_separates_what_can_be_separated_and_prefers_the_higher() {
        let scored = [(0.95, true), (0.9, true), (0.6, false), (0.5, false)];
        let t = best_threshold(&scored);
        assert_eq!(t, 0.75);
        assert_eq!(score(&scored, t), (1.0, 1.0, 1.0));
        // One distinct pair above a redundant one: a perfect split is not there.
        let scored = [(0.95, true), (0.9, false), (0.85, true), (0.5, false)];
        let (p, r, _) = score(&scored, best_threshold(&scored));
        assert!(p < 1.0 || r < 1.0);
    }
}
