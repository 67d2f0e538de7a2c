//! What the lifecycle knows of study: the topic a question is on, and whether a reply says the
//! persona does not know (a gap to study). The study itself (search, questions, grading, the
//! training file) is `mindfleet_personas::study`.

use mindfleet_core::words::is_stop_word;

/// The content words of `text`, lowercased, in order, without repeats.
pub fn content_words(text: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for w in text.split_whitespace().filter(|w| !w.starts_with('@')) {
        let w: String = w
            .trim_matches(|c: char| !c.is_alphanumeric())
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_'))
            .flat_map(char::to_lowercase)
            .collect();
        if w.chars().count() >= 3 && !is_stop_word(&w) && !seen.contains(&w) {
            seen.push(w);
        }
    }
    seen
}

/// The topic of a question: its first six content words (empty when it has none).
pub fn topic_of(text: &str) -> String {
    content_words(text).into_iter().take(6).collect::<Vec<_>>().join(" ")
}

/// Whether a reply says the persona does not know.
pub fn says_unsure(reply: &str) -> bool {
    let r = reply.to_lowercase().replace('’', "'");
    ["i don't know", "i do not know", "i'm not sure", "i am not sure", "no idea", "i cannot answer", "i can't answer"]
        .iter()
        .any(|p| r.contains(p))
}
