//! Scoring labels as the start of an answer: each label's log-probability, token by token, after
//! the prompt (`Classify`, and a fill's enums and booleans), in the same cache rolled back to the
//! prompt between labels.

use super::backend::KvCache;
use super::{LabelScore, log_softmax};

/// The labels being scored, and how far.
pub(crate) struct Scoring {
    labels: Vec<String>,
    ids: Vec<Vec<u32>>,
    /// Log-probabilities after the prompt.
    first: Vec<f64>,
    /// The label being scored, the next of its tokens to score, and its sum so far.
    label: usize,
    at: usize,
    logprob: f64,
    scores: Vec<LabelScore>,
}

impl Scoring {
    pub(crate) fn new(labels: Vec<String>, ids: Vec<Vec<u32>>) -> Scoring {
        Scoring { labels, ids, first: Vec::new(), label: 0, at: 0, logprob: 0.0, scores: Vec::new() }
    }

    /// The scores, best first, once all are scored.
    pub(crate) fn into_scores(self) -> Vec<LabelScore> {
        self.scores
    }

    /// The index in the labels of the most likely, once all are scored.
    pub(crate) fn best(&self) -> usize {
        let best = self.scores.first().map(|s| s.label.as_str());
        self.labels.iter().position(|l| Some(l.as_str()) == best).unwrap_or(0)
    }

    /// Takes the logits of the last pass: the prompt's, or a label token's. `Some` once every
    /// label is scored (best first); else the token to read next is in `input`.
    pub(crate) fn next(
        &mut self,
        logits: &[f32],
        input: &mut Vec<u32>,
        cache: &mut KvCache,
        prompt: usize,
    ) -> Option<()> {
        let lp = log_softmax(logits);
        if self.first.is_empty() {
            self.first = lp;
        } else {
            self.logprob += lp[self.ids[self.label][self.at] as usize];
            self.at += 1;
        }
        // Labels of one token are scored from the prompt's logits alone.
        loop {
            let Some(ids) = self.ids.get(self.label) else {
                self.scores.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
                return Some(());
            };
            if self.at == 0 {
                self.logprob = self.first[ids[0] as usize];
                self.at = 1;
            }
            if self.at < ids.len() {
                input.push(ids[self.at - 1]);
                return None;
            }
            self.scores.push(LabelScore {
                label: self.labels[self.label].clone(),
                logprob: self.logprob as f32,
                tokens: ids.len(),
            });
            // The next label continues from the prompt.
            cache.truncate(prompt);
            self.label += 1;
            self.at = 0;
        }
    }
}
