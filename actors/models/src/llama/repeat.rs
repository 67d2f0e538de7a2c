//! What keeps an answer from looping or echoing the question ([`Repetition`]): the repetition
//! penalty and the n-gram bans on the logits of the next token, and the sentences of the text,
//! in which one written twice is found. Pure functions and small states, tested without a model;
//! every generation of [`super::batch`] that asks for any of it runs them for each token.

use std::collections::BTreeSet;

use super::Repetition;

/// The repetition penalty (llama.cpp's and HF's): the logit of each token of `seen` is divided
/// by `penalty` when positive and multiplied by it otherwise, so a penalty above 1 makes every
/// such token less likely. Each token counts once however often it came.
pub fn penalize(logits: &mut [f32], seen: &BTreeSet<u32>, penalty: f32) {
    for &t in seen {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

/// The tokens that would complete an n-gram (of `n` tokens) that `wrote` already has, added to
/// `out` (HF's `no_repeat_ngram_size`): those that followed, earlier, the last `n - 1` tokens.
pub fn repeating(wrote: &[u32], n: usize, out: &mut Vec<u32>) {
    if n == 0 || wrote.len() < n {
        return;
    }
    let prefix = &wrote[wrote.len() - (n - 1)..];
    for gram in wrote.windows(n) {
        if &gram[..n - 1] == prefix {
            out.push(gram[n - 1]);
        }
    }
}

/// The tokens that would make the last `n` tokens of `wrote` equal `n` consecutive tokens of
/// `source`, added to `out`: those that follow, in `source`, the last `n - 1` tokens written.
pub fn copying(wrote: &[u32], source: &[u32], n: usize, out: &mut Vec<u32>) {
    if n == 0 || wrote.len() < n - 1 {
        return;
    }
    let prefix = &wrote[wrote.len() - (n - 1)..];
    for gram in source.windows(n) {
        if &gram[..n - 1] == prefix {
            out.push(gram[n - 1]);
        }
    }
}

/// A generation's guard against repetition: its settings, the tokens of the message it
/// answers, and the tokens penalised so far.
#[derive(Debug, Clone)]
pub struct Guard {
    settings: Repetition,
    /// The last `user` message's tokens.
    question: Vec<u32>,
    /// The question's tokens and those written, for the penalty.
    seen: BTreeSet<u32>,
    /// How many of the written tokens are in `seen`.
    counted: usize,
    banned: Vec<u32>,
}

impl Guard {
    pub fn new(settings: Repetition, question: Vec<u32>) -> Guard {
        let seen = if settings.penalty == 1.0 { BTreeSet::new() } else { question.iter().copied().collect() };
        Guard { settings, question, seen, counted: 0, banned: Vec::new() }
    }

    /// Applies the penalty and the bans to the logits of the token after `wrote` (the tokens
    /// this generation wrote so far): a banned token's logit becomes minus infinity.
    pub fn apply(&mut self, logits: &mut [f32], wrote: &[u32]) {
        let Repetition { penalty, no_repeat_ngram, no_copy_ngram, .. } = self.settings;
        if penalty != 1.0 {
            self.seen.extend(wrote.get(self.counted..).unwrap_or_default());
            self.counted = wrote.len();
            penalize(logits, &self.seen, penalty);
        }
        self.banned.clear();
        repeating(wrote, no_repeat_ngram, &mut self.banned);
        copying(wrote, &self.question, no_copy_ngram, &mut self.banned);
        for &t in &self.banned {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// A sentence as it is compared: lower-cased, every run of characters other than letters and
/// digits one space, none at the ends (`"I'm  here!"` is `"i m here"`).
pub fn normalize(sentence: &str) -> String {
    let mut out = String::with_capacity(sentence.len());
    for word in mindfleet_core::words::split(sentence) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

/// The sentences of an answer as its text comes, holding back the one being written until it
/// ends, so that a sentence the answer already has is found before any of it is given out.
///
/// A sentence ends at a newline, or at `.`, `!` or `?` (or a run of them) followed by
/// whitespace: `3.5` and `e.g.x` go on. The whitespace between two sentences is given out
/// with the second, so a text cut before a repeated sentence does not end in it. Sentences
/// without a letter (`...`, a list's `1.`) are given out and never count as repeats.
#[derive(Debug, Clone, Default)]
pub struct Sentences {
    /// The text not given out yet: the sentence being written, after the whitespace before it.
    held: String,
    /// The sentences ended so far, normalised ([`normalize`]).
    said: Vec<String>,
}

/// What [`Sentences`] gives out after a piece of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The text that can be given out now (empty while a sentence is being written).
    pub text: String,
    /// A sentence came again: the text ends before it, and nothing more is to come.
    pub repeated: bool,
}

impl Sentences {
    /// Takes the next piece of the answer.
    pub fn push(&mut self, piece: &str) -> Judged {
        self.held.push_str(piece);
        let mut text = String::new();
        while let Some(end) = sentence_end(&self.held) {
            let sentence = normalize(&self.held[..end]);
            if counts(&sentence) {
                if self.said.contains(&sentence) {
                    self.held.clear();
                    return Judged { text, repeated: true };
                }
                self.said.push(sentence);
            }
            text.extend(self.held.drain(..end));
        }
        Judged { text, repeated: false }
    }

    /// The end of the answer, with its last piece `rest`: the held text, unless it is a
    /// sentence the answer has, or, when the answer was `cut_short` (at its most tokens), the
    /// beginning of one.
    pub fn finish(&mut self, rest: &str, cut_short: bool) -> Judged {
        let Judged { mut text, repeated } = self.push(rest);
        if repeated {
            return Judged { text, repeated };
        }
        let rest = std::mem::take(&mut self.held);
        let last = normalize(&rest);
        let again = |s: &String| {
            *s == last || (cut_short && s.strip_prefix(last.as_str()).is_some_and(|after| after.starts_with(' ')))
        };
        let repeated = counts(&last) && self.said.iter().any(again);
        if !repeated {
            text.push_str(&rest);
        }
        Judged { text, repeated }
    }
}

/// Whether a normalised sentence is one that counts: one with a letter.
fn counts(sentence: &str) -> bool {
    sentence.chars().any(char::is_alphabetic)
}

/// Where the first sentence of `text` ends (past its last character), when it has ended.
/// Leading whitespace belongs to the sentence after it.
fn sentence_end(text: &str) -> Option<usize> {
    let start = text.len() - text.trim_start().len();
    let mut chars = text[start..].char_indices().map(|(i, c)| (start + i, c)).peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => return Some(i),
            '.' | '!' | '?' => {
                // The run of marks, then whitespace after it (not yet come: wait).
                let mut end = i + c.len_utf8();
                while let Some(&(j, m)) = chars.peek().filter(|(_, m)| matches!(m, '.' | '!' | '?')) {
                    end = j + m.len_utf8();
                    chars.next();
                }
                match chars.peek() {
                    None => return None,
                    Some((_, next)) if next.is_whitespace() => return Some(end),
                    Some(_) => {}
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests;
