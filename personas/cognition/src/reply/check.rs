//! The draft check: before a model's draft is posted, it is read as the person in the room would
//! read it. A draft that is empty, repeats the message it answers, loops, or asserts nothing
//! from the material the plan found (or more than it holds) is not posted as written: the
//! persona posts its grounded reply instead, and the decision says why.

use std::collections::HashSet;

use mindfleet_core::words::{content_words, stem, stems, words};

/// What is wrong with a draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// No words, or none that say anything.
    Empty,
    /// It repeats the message it answers.
    Echo,
    /// It says the same thing again and again.
    Loop,
    /// It uses nothing of what the steps found (or nothing was found to ground it).
    Ungrounded,
    /// It says more than what the steps found holds.
    Unsupported,
}

impl Flaw {
    pub fn as_str(self) -> &'static str {
        match self {
            Flaw::Empty => "empty",
            Flaw::Echo => "echo",
            Flaw::Loop => "loop",
            Flaw::Ungrounded => "ungrounded",
            Flaw::Unsupported => "unsupported",
        }
    }
}

/// A flaw and what shows it, in words for the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub flaw: Flaw,
    pub detail: String,
}

impl Finding {
    /// The decision's note: what was wrong and what was posted instead.
    pub fn note(&self) -> String {
        let what = match self.flaw {
            Flaw::Empty => "draft was empty",
            Flaw::Echo => "draft repeated the message",
            Flaw::Loop => "draft looped",
            Flaw::Ungrounded => "draft used nothing the plan found",
            Flaw::Unsupported => "draft said more than the plan found",
        };
        format!("{what} ({}): grounded reply", self.detail)
    }
}

/// Checks `draft`, the answer to `question`, against `material` (the texts of what the steps
/// found); `open`: a draft may answer without material (a model trusted to know things). `None`:
/// the draft may be posted as written. `names` (the sender's) are words a draft may use without
/// material, and may open it.
pub fn check(draft: &str, question: &str, material: &[String], names: &[&str], open: bool) -> Option<Finding> {
    let body = strip_address(draft, names);
    let d: Vec<String> = words(body).collect();
    let finding = |flaw, detail: String| Some(Finding { flaw, detail });
    if d.len() < 2 {
        return finding(Flaw::Empty, format!("{} words", d.len()));
    }
    if let Some(again) = repeated_sentence(body) {
        return finding(Flaw::Loop, format!("\"{again}\" more than once"));
    }
    if let Some(gram) = repeated_ngram(&d, 4, 3) {
        return finding(Flaw::Loop, format!("\"{gram}\" three times or more"));
    }
    let q: Vec<String> = words(question).filter(|w| !names.iter().any(|n| n.eq_ignore_ascii_case(w))).collect();
    let copied = longest_common_run(&d, &q);
    let asked = stems(question);
    let name_words: HashSet<String> = names.iter().flat_map(|n| stems(n)).collect();
    let new: Vec<String> = content_words(body)
        .into_iter()
        .map(|w| stem(&w).to_string())
        .filter(|w| !asked.contains(w) && !name_words.contains(w))
        .collect();
    // Nearly the whole message again, or most of it and nothing else ("The capital of France is
    // Paris" restates the question to answer it).
    let most = copied * 5 >= q.len() * 3;
    if q.len() >= 3 && (copied * 5 >= q.len() * 4 || (most && new.is_empty()) || (new.is_empty() && copied >= 3)) {
        return finding(Flaw::Echo, format!("{copied} of the message's {} words in a row", q.len()));
    }
    if new.is_empty() {
        return finding(Flaw::Empty, "nothing beyond the message's own words".into());
    }
    let found: HashSet<String> = material.iter().flat_map(|m| stems(m)).collect();
    if found.is_empty() {
        return (!open).then(|| Finding { flaw: Flaw::Ungrounded, detail: "nothing was found to ground it".into() });
    }
    let used: Vec<&String> = new.iter().filter(|w| found.contains(*w)).collect();
    if used.is_empty() {
        return finding(Flaw::Ungrounded, "none of its words are in what was found".into());
    }
    if used.len() < 2 && used.len() < new.len() {
        return finding(Flaw::Ungrounded, format!("one word of what was found ({}) among words of its own", used[0]));
    }
    // Numbers are facts: one the material does not hold is made up (`10:32` for `10:00`).
    let known: HashSet<String> = material.iter().flat_map(|m| numbers(m)).chain(numbers(question)).collect();
    let invented: Vec<String> = numbers(body).into_iter().filter(|n| !known.contains(n)).collect();
    if !invented.is_empty() {
        return finding(Flaw::Unsupported, format!("numbers not in what was found: {}", invented.join(", ")));
    }
    let unsupported: Vec<&String> = new.iter().filter(|w| !found.contains(*w)).collect();
    // A draft may connect what was found in words of its own, a few: more than one for every
    // two it takes from the material is saying something else.
    if !open && unsupported.len() * 2 > used.len() {
        let shown: Vec<&str> = unsupported.iter().take(4).map(|w| w.as_str()).collect();
        return finding(Flaw::Unsupported, format!("not in what was found: {}", shown.join(", ")));
    }
    None
}

/// The numbers of a text, as written (`30s`, `10:00`, `2.4`, `93%` give `30`, `10:00`, `2.4`,
/// `93`).
fn numbers(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':' || c == ','))
        .map(|n| n.trim_matches(['.', ':', ',']))
        .filter(|n| n.chars().any(|c| c.is_ascii_digit()))
        .map(|n| n.replace(',', ""))
        .collect()
}

/// The draft without the mention or name it opens with.
fn strip_address<'a>(draft: &'a str, names: &[&str]) -> &'a str {
    let mut body = draft.trim();
    loop {
        let before = body;
        if let Some(rest) = body.strip_prefix('@') {
            body = rest.split_once(char::is_whitespace).map_or("", |(_, r)| r).trim_start();
        }
        for n in names {
            let named = body.get(..n.len()).is_some_and(|head| head.eq_ignore_ascii_case(n));
            if let Some(rest) = body.get(n.len()..).filter(|_| named).and_then(|r| r.strip_prefix(':')) {
                body = rest.trim_start();
            }
        }
        if body == before {
            return body;
        }
    }
}

/// A sentence (of three words or more) the text says twice, compared by its words.
pub fn repeated_sentence(text: &str) -> Option<String> {
    let mut seen: HashSet<Vec<String>> = HashSet::new();
    for s in text.split(['.', '!', '?', '\n']) {
        let w: Vec<String> = words(s).collect();
        if w.len() >= 3 && !seen.insert(w.clone()) {
            return Some(w.join(" "));
        }
    }
    None
}

/// An `n`-word run that comes `times` times or more.
fn repeated_ngram(w: &[String], n: usize, times: usize) -> Option<String> {
    let mut counts: std::collections::HashMap<&[String], usize> = std::collections::HashMap::new();
    for g in w.windows(n) {
        let c = counts.entry(g).or_default();
        *c += 1;
        if *c >= times {
            return Some(g.join(" "));
        }
    }
    None
}

/// The longest run of words `a` and `b` have in common, in a row.
fn longest_common_run(a: &[String], b: &[String]) -> usize {
    let mut best = 0;
    let mut prev = vec![0usize; b.len() + 1];
    for x in a {
        let mut row = vec![0usize; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            if x == y {
                row[j + 1] = prev[j] + 1;
                best = best.max(row[j + 1]);
            }
        }
        prev = row;
    }
    best
}
