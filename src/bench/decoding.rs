//! `mindfleet bench decoding`: what keeps the local model from looping or echoing the message it
//! answers, measured. 24 chat messages are answered by SmolLM2-135M as a persona's reply is
//! (its system prompt, greedy, `[llm] reply_max_tokens`), once per setting of the repetition
//! guards (`[llm] repetition_penalty`, `no_repeat_ngram`, `no_copy_ngram`,
//! `stop_repeated_sentence`). Per setting: answers that say a sentence twice, that copy five
//! words of the message in a row, that are empty, that stay on the topic (a word of five letters
//! or more of the message), and that the sentence stop cut.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;

use mindfleet_core::config::Decoding;
use mindfleet_core::llm::{ChatMessage, GenerateRequest, Repetition, Stop};
use mindfleet_models::llama::{Llm, LlmConfig};
use serde_json::{Value, json};

use super::{round, words};

/// The messages answered, each as a person in a team's chat would write it.
const MESSAGES: [&str; 24] = [
    "The deploy to staging failed with a timeout on the database migration. Any idea what to check first?",
    "can you look at the retry logic? It retries forever on 401.",
    "What is a circuit breaker in distributed systems?",
    "please summarize what we discussed about the staging deploy",
    "Disk usage on db-1 is at 93% and climbing",
    "The tests in tests/flow.rs are flaky on CI. What should I look at?",
    "is the deploy done?",
    "Why is the build slow today?",
    "How do I write a good commit message?",
    "Can you explain what a race condition is?",
    "who is on call next week?",
    "What does idempotent mean for an HTTP API?",
    "the dashboard shows 500 errors since noon, anyone seen this?",
    "should we upgrade to Postgres 16 now or wait?",
    "how do I rotate the admin token?",
    "Any tips for reviewing a large pull request?",
    "the release notes for 2.4 are missing the migration step",
    "can someone explain why the cache hit rate dropped?",
    "what's the difference between a process and a thread?",
    "our p99 latency doubled after the last deploy",
    "is it safe to delete the old backups on db-2?",
    "How should we name feature flags?",
    "the webhook receiver keeps returning 429",
    "thanks for the help with the flaky test yesterday!",
];

/// The settings measured: (repetition_penalty, no_repeat_ngram, no_copy_ngram,
/// stop_repeated_sentence). The defaults are among them.
const SETTINGS: [(f32, usize, usize, bool); 12] = [
    (1.0, 0, 0, false),
    (1.0, 0, 4, false),
    (1.0, 3, 0, false),
    (1.0, 3, 4, false),
    (1.1, 0, 0, false),
    (1.1, 3, 4, false),
    (1.1, 3, 5, false),
    (1.2, 3, 4, false),
    (1.3, 3, 4, false),
    (1.5, 3, 4, false),
    (1.0, 0, 0, true),
    (1.1, 3, 4, true),
];

/// Whether `text` says a sentence (of three words or more) twice.
fn repeats(text: &str) -> bool {
    let mut seen = HashSet::new();
    text.split(['.', '!', '?', '\n']).map(words).any(|w| w.len() >= 3 && !seen.insert(w))
}

/// Whether `answer` has five words of `message` in a row.
fn copies(answer: &str, message: &str) -> bool {
    let (a, m) = (words(answer), words(message));
    m.windows(5).any(|g| a.windows(5).any(|h| h == g))
}

/// Whether `answer` has a word of five letters or more of `message`.
fn on_topic(answer: &str, message: &str) -> bool {
    let m: HashSet<String> = words(message).into_iter().filter(|w| w.chars().count() >= 5).collect();
    words(answer).iter().any(|w| m.contains(w))
}

/// The request a persona's reply makes for `message`, with `repetition`.
fn request(message: &str, repetition: Repetition) -> GenerateRequest {
    let system = "You are helper, the team's generalist assistant, in a group chat.\n\
                  Answer the last message in one or two short sentences.";
    let messages = vec![ChatMessage::system(system), ChatMessage::user(format!("ivan: {message}"))];
    let mut req = GenerateRequest::new(messages, Decoding::default().reply_max_tokens);
    req.stop = vec!["\n\n".into(), "\nivan:".into()];
    req.repetition = repetition;
    req
}

pub fn decoding(model: &Path) -> anyhow::Result<Value> {
    let llm = Llm::load_with(model, LlmConfig::default())?;
    let defaults = Decoding::default().repetition;
    let mut rows = Vec::new();
    for (penalty, no_repeat_ngram, no_copy_ngram, stop_repeated_sentence) in SETTINGS {
        let repetition = Repetition { penalty, no_repeat_ngram, no_copy_ngram, stop_repeated_sentence };
        let (mut repeated, mut copied, mut empty, mut topical, mut cut) = (0, 0, 0, 0, 0);
        for message in MESSAGES {
            let g = llm.generate(&request(message, repetition), |_| ControlFlow::Continue(()))?;
            repeated += usize::from(repeats(&g.text));
            copied += usize::from(copies(&g.text, message));
            empty += usize::from(g.text.trim().is_empty());
            topical += usize::from(on_topic(&g.text, message));
            cut += usize::from(g.stop == Stop::Repetition);
        }
        rows.push(json!({
            "repetition_penalty": round(f64::from(penalty), 2),
            "no_repeat_ngram": no_repeat_ngram,
            "no_copy_ngram": no_copy_ngram,
            "stop_repeated_sentence": stop_repeated_sentence,
            "default": repetition == defaults,
            "repeats": repeated,
            "copies": copied,
            "empty": empty,
            "on_topic": topical,
            "cut": cut,
        }));
    }
    Ok(
        json!({ "bench": "decoding", "messages": MESSAGES.len(), "max_tokens": Decoding::default().reply_max_tokens, "settings": rows }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_copies_and_topic_are_read_as_a_person_would() {
        assert!(repeats("I'm glad to help. I'm glad to help."));
        assert!(!repeats("The lock is on the orders table. Batching fixed it."));
        let m = "The deploy to staging failed with a timeout on the database migration.";
        assert!(copies("The deploy to staging failed, sorry.", m));
        assert!(!copies("Check the migration's lock first.", m));
        assert!(on_topic("Check the migration's lock first.", m));
        assert!(!on_topic("I'm glad to hear that.", m));
    }
}
