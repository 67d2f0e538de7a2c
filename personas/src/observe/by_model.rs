//! What the fleet's LLM adds to the observations of the rules (`[conversation] observations =
//! "model"`): each session, in pieces of at most [`PIECE_MESSAGES`] messages, is read by the
//! model, asked what it tells about each speaker, one fact per line. A line the piece grounds
//! (most of its words were said in it: the model did not make it up) and that is not a copy of
//! a message joins the fact of the message it shares most words with, so there is still one
//! fact per message, linked to it, now made by the rules and the model together.

use std::collections::BTreeSet;

use mindfleet_core::conversation::{Observation, ObservationKind, Said};
use mindfleet_core::llm::{ChatMessage, GenerateRequest};

use super::{content_words, day, display, sessions_of};

/// What made a fact the model added to, as it records it.
pub const BY: &str = "rules+model";
/// Most messages one model call reads.
pub const PIECE_MESSAGES: usize = 24;
/// Most characters of messages one model call reads (about 1,000 tokens).
const PIECE_CHARS: usize = 4000;
/// Most characters of one message it reads.
const MESSAGE_CHARS: usize = 400;
/// Most tokens of an answer.
pub const ANSWER_TOKENS: usize = 160;
/// Tokens a model call reserves from the budgets: its prompt and its answer.
pub const CALL_TOKENS: u32 = 1400;
/// Most model calls of one consolidation, and the messages it takes at a time to stay in them.
pub const CALLS: usize = 4;
pub const BATCH: usize = 48;
/// Least share of a line's words said in its piece.
const GROUNDED: f64 = 0.6;
/// Fewest words other than stop words of a line the model writes.
const LINE_WORDS: usize = 2;

/// The pieces the model reads of `said`: its sessions, room by room, each cut every
/// [`PIECE_MESSAGES`] messages.
pub fn pieces(said: &[Said]) -> Vec<Vec<&Said>> {
    sessions_of(said)
        .into_iter()
        .flat_map(|s| s.chunks(PIECE_MESSAGES).map(<[_]>::to_vec).collect::<Vec<_>>())
        .collect()
}

/// The model is asked what `piece` tells about each of its speakers.
pub fn request(piece: &[&Said]) -> GenerateRequest {
    let system = "You read a conversation and list what it tells about each person in it: what happened to them, \
                  what they did, their plans and what they like. One short fact per line, each starting with the \
                  person's name.";
    let mut lines = Vec::new();
    let mut chars = 0;
    for s in piece {
        let text: String = s.text.trim().chars().take(MESSAGE_CHARS).collect();
        let line = format!("{}: {text}", display(&s.from));
        chars += line.len();
        if chars > PIECE_CHARS && !lines.is_empty() {
            break;
        }
        lines.push(line);
    }
    let when = piece.first().map_or_else(String::new, |s| format!(" in #{} on {}", s.room, day(s.at_us)));
    let user = format!("Conversation{when}:\n{}\n\nFacts:", lines.join("\n"));
    GenerateRequest::new(vec![ChatMessage::system(system), ChatMessage::user(user)], ANSWER_TOKENS)
}

/// The lines of the model's `answer` that `piece` grounds, each with the message it shares most
/// words with (the first of equals), once each.
pub fn facts(piece: &[&Said], answer: &str) -> Vec<(u64, String)> {
    let mut said: BTreeSet<String> = BTreeSet::new();
    for s in piece {
        said.extend(content_words(&s.text));
        said.extend(s.from.split(['-', '_']).map(str::to_lowercase));
    }
    let copies: BTreeSet<String> = piece.iter().map(|s| tidy(&s.text).to_lowercase()).collect();
    let mut out: Vec<(u64, String)> = Vec::new();
    for line in answer.lines().map(tidy) {
        let words = content_words(&line);
        let known = words.iter().filter(|w| said.contains(*w)).count();
        if words.len() < LINE_WORDS || (known as f64) < GROUNDED * words.len() as f64 {
            continue;
        }
        // A line that names its speaker and copies the message adds nothing.
        let bare = line.split_once(": ").map_or(line.as_str(), |(_, rest)| rest);
        if copies.contains(&bare.to_lowercase()) || out.iter().any(|(_, l)| *l == line) {
            continue;
        }
        let shared = |s: &Said| content_words(&s.text).iter().filter(|w| words.contains(w)).count();
        let best = piece
            .iter()
            .map(|s| (shared(s), s.seq))
            .filter(|(n, _)| *n > 0)
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        if let Some((_, seq)) = best {
            out.push((seq, line));
        }
    }
    out
}

/// A line as the model wrote it, without a list's number or bullet and the spaces around.
fn tidy(line: &str) -> String {
    line.trim()
        .trim_start_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | ')' | '-' | '*' | '•' | ' '))
        .trim()
        .to_string()
}

/// Adds `facts` (of `piece`) to `made`: each joins the fact of its message, made for it when
/// the rules made none.
pub fn add(made: &mut Vec<Observation>, piece: &[&Said], facts: Vec<(u64, String)>) {
    for (seq, line) in facts {
        let Some(s) = piece.iter().find(|s| s.seq == seq) else { continue };
        let id = Observation::id_of(ObservationKind::Fact, seq);
        match made.iter_mut().find(|o| o.id == id) {
            Some(o) => {
                o.text = format!("{} {line}", o.text);
                o.by = BY.into();
            }
            None => made.push(Observation {
                id,
                kind: ObservationKind::Fact,
                about: s.from.clone(),
                room: s.room.clone(),
                text: format!("{line} (said by {} on {})", display(&s.from), day(s.at_us)),
                at_us: s.at_us,
                sources: vec![seq],
                by: BY.into(),
            }),
        }
    }
}
