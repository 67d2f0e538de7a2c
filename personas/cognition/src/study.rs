//! What the lifecycle knows of study: the topic a question is on, and whether a reply says the
//! persona does not know (a gap to study). The study itself (search, questions, grading, the
//! training file) is `mindfleet_personas::study`.

use mindfleet_core::words;

/// The content words of `text` ([`words::content_words`]), leaving out the personas it mentions
/// (`@name`): a question's topic is not who it asks.
pub fn content_words(text: &str) -> Vec<String> {
    let unmentioned: Vec<&str> = text.split_whitespace().filter(|w| !w.starts_with('@')).collect();
    words::content_words(&unmentioned.join(" "))
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
