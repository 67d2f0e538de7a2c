//! The grounded reply: what was asked, answered with the material the steps found, quoted with
//! who said it and when, cited as `path:start-end` or by reference id. It adds no fact of its
//! own; with nothing that bears on the question it says what it would need.

use std::collections::HashSet;

use mindfleet_core::event::SenderKind;

use super::Input;
use super::ask::{Ask, Social};
use super::material::Piece;
use mindfleet_core::words::words;

/// Most characters of one quoted line.
const QUOTE_CHARS: usize = 200;
/// Most characters of what a tool call returned, quoted (the lines kept of it, joined).
const TOOL_QUOTE_CHARS: usize = 480;

/// The grounded reply to `ctx`'s event for `ask`, from `pieces` (best first, as
/// [`super::material::gather`] gives them).
pub fn grounded(ctx: &Input, ask: &Ask, pieces: &[Piece]) -> String {
    let to = addressee(ctx);
    let about = topic_phrase(ask);
    let body = match ask {
        Ask::Social(Social::Thanks) => "glad it helped.".to_string(),
        Ask::Social(Social::Greeting) => "hello! What can I help with?".to_string(),
        Ask::Social(Social::Goodbye) => "see you!".to_string(),
        _ if pieces.is_empty() => nothing_found(ctx, ask, &about),
        // What the plan's tool calls gave is the answer: said as what was done, first.
        _ if matches!(pieces[0], Piece::Tool { .. }) => {
            let lines: Vec<String> = pieces.iter().map(|p| line(p, false)).collect();
            match lines.as_slice() {
                [one] => one.clone(),
                _ => format!("here is what I found:\n- {}", lines.join("\n- ")),
            }
        }
        Ask::SaidBy { who, .. } => {
            let head = if about.is_empty() { format!("{who} said") } else { format!("{who} said about {about}") };
            listed(&head, pieces, false)
        }
        Ask::Summary { .. } => {
            let n = pieces.iter().filter(|p| matches!(p, Piece::Said(_))).count();
            let n = if n == 1 { "1 message".to_string() } else { format!("{n} messages") };
            let head = if about.is_empty() {
                format!("the last {n} in #{}", ctx.event.room)
            } else {
                format!("{n} on {about} in #{}", ctx.event.room)
            };
            listed(&head, pieces, true)
        }
        Ask::Who { .. } => match &pieces[0] {
            Piece::Said(s) => format!("{} said it ({}): \"{}\".", s.from, when(s.at_us, &s.room), quote(&s.text)),
            _ => listed("here is what I have on it", pieces, false),
        },
        Ask::When { .. } => match &pieces[0] {
            Piece::Said(s) => format!("{} said it on {}: \"{}\".", s.from, when(s.at_us, &s.room), quote(&s.text)),
            _ => listed("here is what I have on it", pieces, false),
        },
        Ask::Code { .. } => {
            let head =
                if about.is_empty() { "from the code".to_string() } else { format!("on {about}, from the code") };
            listed(&head, pieces, false)
        }
        Ask::Question { .. } | Ask::Statement { .. } => {
            let head =
                if about.is_empty() { "here is what I have".to_string() } else { format!("what I have on {about}") };
            listed(&head, pieces, false)
        }
    };
    format!("{to}{body}")
}

/// The clarifying question of a plan that asks back: what the persona would need to answer.
pub fn clarify(ctx: &Input, ask: &Ask) -> String {
    let about = topic_phrase(ask);
    let body = if about.is_empty() {
        "could you say a bit more about what you need, and where I should look?".to_string()
    } else {
        format!("could you say a bit more about {about}: which one you mean, and where I should look?")
    };
    format!("{}{body}", addressee(ctx))
}

/// Who the reply is to: a person by mention, a persona by name (a reply never mentions a
/// persona, so never forces an answer from one).
fn addressee(ctx: &Input) -> String {
    match ctx.event.sender_kind {
        SenderKind::Human => format!("@{} ", ctx.event.from),
        _ => format!("{}: ", ctx.event.from),
    }
}

/// The reply when nothing bears on the question: what the persona would need, never filler.
fn nothing_found(ctx: &Input, ask: &Ask, about: &str) -> String {
    let room = &ctx.event.room;
    let on = if about.is_empty() { "that".to_string() } else { about.to_string() };
    match ask {
        Ask::SaidBy { who, .. } => {
            format!(
                "I have nothing from {who} on {on} in what was said in #{room}. Do you remember roughly when, or where it was said?"
            )
        }
        Ask::Summary { .. } | Ask::Who { .. } | Ask::When { .. } => {
            format!(
                "I have nothing on {on} in what was said in #{room}. Was it discussed in another room, or under another name?"
            )
        }
        Ask::Code { .. } => {
            format!(
                "the codebase index has nothing on {on}. Which file, function or error message should I start from?"
            )
        }
        Ask::Statement { .. } => {
            format!("noted. I have nothing earlier on {on}: what changed, and since when?")
        }
        Ask::Question { .. } | Ask::Social(_) => {
            format!(
                "I have nothing on {on} in what was said here or in what I can search. Could you point me to a doc, a file or the person who knows?"
            )
        }
    }
}

/// The pieces as one line (a single piece) or a list under `head`; `dated`: every message with
/// its date (a summary), else the room and time in brackets. A line of code is quoted once, and
/// not beside one that says nearly the same (two parameters' docs).
fn listed(head: &str, pieces: &[Piece], dated: bool) -> String {
    let mut quoted: Vec<HashSet<String>> = Vec::new();
    let lines: Vec<String> = pieces
        .iter()
        .map(|p| match p {
            Piece::Code { cite, symbol, lines } => {
                let mut fresh: Vec<(u32, String)> = Vec::new();
                for (n, l) in lines {
                    let w: HashSet<String> = words(l).collect();
                    if !quoted.iter().any(|q| q.intersection(&w).count() * 5 >= w.len().max(q.len()) * 3) {
                        quoted.push(w);
                        fresh.push((*n, l.clone()));
                    }
                }
                line(&Piece::Code { cite: cite.clone(), symbol: symbol.clone(), lines: fresh }, dated)
            }
            _ => line(p, dated),
        })
        .collect();
    match lines.as_slice() {
        [one] => format!("{head}: {one}"),
        _ => format!("{head}:\n- {}", lines.join("\n- ")),
    }
}

/// One piece as a reply quotes it.
fn line(p: &Piece, dated: bool) -> String {
    match p {
        Piece::Said(s) if dated => format!("{}, {}: \"{}\"", s.from, when(s.at_us, &s.room), quote(&s.text)),
        Piece::Said(s) => format!("\"{}\" ({}, {})", quote(&s.text), s.from, when(s.at_us, &s.room)),
        Piece::Code { cite, symbol, lines } => {
            let mut out = format!("[{cite}]");
            if let Some(sym) = symbol {
                out.push_str(&format!(" ({sym})"));
            }
            let shown: Vec<String> = lines.iter().map(|(n, l)| format!("line {n}: `{}`", quote_code(l))).collect();
            if !shown.is_empty() {
                out.push_str(": ");
                out.push_str(&shown.join(", "));
            }
            out
        }
        Piece::Reference { cite, name, lines } => {
            let mut out = format!("[{cite}]");
            if let Some(n) = name {
                out = format!("{n} {out}");
            }
            if let Some(first) = lines.first() {
                out.push_str(&format!(": \"{}\"", quote(first)));
            }
            out
        }
        Piece::Knowledge { topic, summary } => format!("what I know of {topic}: {}", quote(summary)),
        Piece::Remembered(t) => quote(t),
        Piece::Tool { tool, failed: false, lines } => {
            format!("I called {tool}, which returned: \"{}\"", quote_at(&lines.join(" / "), TOOL_QUOTE_CHARS))
        }
        Piece::Tool { tool, failed: true, lines } => {
            format!("I could not use {tool}: \"{}\"", quote_at(&lines.join(" / "), TOOL_QUOTE_CHARS))
        }
    }
}

/// A quoted text: on one line, without `@` (a quote mentions nobody again), cut at
/// [`QUOTE_CHARS`].
fn quote(text: &str) -> String {
    quote_at(text, QUOTE_CHARS)
}

/// A quoted text as [`quote`] makes it, cut at `most` characters.
fn quote_at(text: &str, most: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ").chars().filter(|c| *c != '@').collect();
    let flat = flat.trim_end_matches(['.', ' ']).to_string();
    if flat.chars().count() > most { format!("{}…", flat.chars().take(most).collect::<String>()) } else { flat }
}

/// A line of code as a reply quotes it: without `@` (a decorator must not mention anyone), cut
/// at [`QUOTE_CHARS`].
fn quote_code(line: &str) -> String {
    let l: String = line.trim().chars().filter(|c| *c != '@').collect();
    if l.chars().count() > QUOTE_CHARS { format!("{}…", l.chars().take(QUOTE_CHARS).collect::<String>()) } else { l }
}

/// When and where a message was said: `#general, 28 Nov 14:02` (UTC).
fn when(at_us: i64, room: &str) -> String {
    let at =
        jiff::Timestamp::from_microsecond(at_us).map_or_else(|_| "?".into(), |t| t.strftime("%d %b %H:%M").to_string());
    format!("#{room}, {at}")
}

/// The topic as a phrase, for the reply's head: its first five words, without the parts of a
/// compound said whole (`on-call`, not `on-call call`).
fn topic_phrase(ask: &Ask) -> String {
    let mut words: Vec<&str> = Vec::new();
    for w in ask.topic() {
        let part = words.iter().any(|c| c.len() > w.len() && c.split(['_', '-']).any(|p| p == w));
        if !part && words.len() < 5 {
            words.push(w);
        }
    }
    words.join(" ")
}
