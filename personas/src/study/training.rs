//! A persona's training data read back: the chats its study sessions kept
//! (`<data>/training/<persona>.jsonl`, see [`super::append_training`]), and a split that holds
//! some source passages out, so that an adapter is judged on questions about passages it never
//! trained on.

use std::path::Path;

use mindfleet_core::adapter::fnv1a;
use mindfleet_core::llm::ChatMessage;
use serde::Deserialize;

/// One kept chat: the question and its graded answer, and where the answer came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingChat {
    pub messages: Vec<ChatMessage>,
    pub topic: String,
    /// The passage the question was asked about (`path:start-end`).
    pub source: String,
    pub grade: f64,
}

#[derive(Deserialize)]
struct Line {
    messages: Vec<ChatMessage>,
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Metadata {
    topic: String,
    source: String,
    grade: f64,
}

/// The chats of a training file, in order; none when it does not exist. A line that is not a
/// kept chat is an error naming the file, the line and column and what is wrong.
pub fn read_training(file: &Path) -> Result<Vec<TrainingChat>, String> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let mut chats = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = |column: usize, why: String| format!("{}:{}:{column}: {why}", file.display(), i + 1);
        let l: Line = serde_json::from_str(line).map_err(|e| at(e.column(), e.to_string()))?;
        if l.messages.last().is_none_or(|m| m.role != "assistant") {
            return Err(at(1, "the chat does not end with the assistant's answer".into()));
        }
        let Metadata { topic, source, grade } = l.metadata;
        chats.push(TrainingChat { messages: l.messages, topic, source, grade });
    }
    Ok(chats)
}

/// One source passage in this many is held out of a persona's training (see [`hold_out`]).
pub const HOLD_OUT_EVERY: u64 = 4;

/// Splits chats into those to train on and those held out: every chat about a held-out source
/// passage is held out, about one passage in `every`. Which passages are held out depends on
/// the passage alone (a hash of its name), so a chat stays on its side as the data grows, and
/// no held-out question is about a passage trained on.
pub fn hold_out(chats: Vec<TrainingChat>, every: u64) -> (Vec<TrainingChat>, Vec<TrainingChat>) {
    chats.into_iter().partition(|c| every == 0 || !fnv1a(c.source.as_bytes()).is_multiple_of(every))
}

#[cfg(test)]
mod tests {
    use mindfleet_core::record::{StudyAnswer, StudySession};

    use super::super::append_training;
    use super::*;

    fn session(topic: &str, sources: &[&str]) -> StudySession {
        let answers = sources
            .iter()
            .enumerate()
            .map(|(i, s)| StudyAnswer {
                question: format!("What does {s} say, question {i}?"),
                answer: format!("It says {i}."),
                source: s.to_string(),
                cited: vec![s.to_string()],
                grade: 1.0,
                by: "model".into(),
            })
            .collect();
        StudySession {
            topic: topic.into(),
            why: "test".into(),
            started_us: 1,
            finished_us: 2,
            answers,
            score: 1.0,
            outcome: "studied".into(),
            tokens: 0,
        }
    }

    #[test]
    fn kept_chats_are_read_back_and_a_split_holds_out_whole_passages_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("training").join("ada.jsonl");
        assert_eq!(read_training(&file).unwrap(), vec![], "no file yet: no chats");
        let sources: Vec<String> = (0..40).map(|i| format!("src/m{}.rs:{}-{}", i % 20, i, i + 9)).collect();
        let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
        append_training(&file, "ada", "reviewer", &session("parsing", &refs[..25])).unwrap();
        let chats = read_training(&file).unwrap();
        assert_eq!(chats.len(), 25);
        assert_eq!((chats[3].topic.as_str(), chats[3].source.as_str()), ("parsing", refs[3]));
        assert_eq!(chats[3].messages.last().unwrap().content, "It says 3. (sources: src/m3.rs:3-12)");
        let (train, held) = hold_out(chats.clone(), 4);
        assert_eq!(train.len() + held.len(), 25);
        assert!(!held.is_empty() && !train.is_empty(), "{} held out of 25", held.len());
        assert!(held.iter().all(|h| train.iter().all(|t| t.source != h.source)));
        // More data later: what was held out stays held out.
        append_training(&file, "ada", "reviewer", &session("routing", &refs[25..])).unwrap();
        let (_, held_later) = hold_out(read_training(&file).unwrap(), 4);
        assert!(held.iter().all(|h| held_later.contains(h)));
        assert_eq!(hold_out(read_training(&file).unwrap(), 0).1, vec![], "every 0: nothing held out");
    }

    #[test]
    fn a_line_that_is_not_a_kept_chat_is_named_by_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bob.jsonl");
        std::fs::write(
            &file,
            "\n{\"messages\": [], \"metadata\": {\"topic\": \"t\", \"source\": \"s\", \"grade\": 1}}\n",
        )
        .unwrap();
        let e = read_training(&file).unwrap_err();
        assert!(e.ends_with("bob.jsonl:2:1: the chat does not end with the assistant's answer"), "{e}");
        std::fs::write(&file, "{\"messages\": [}\n").unwrap();
        let e = read_training(&file).unwrap_err();
        assert!(e.contains("bob.jsonl:1:15: "), "{e}");
    }
}
