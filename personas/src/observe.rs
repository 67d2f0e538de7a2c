//! Consolidating conversation memory by rules: what a persona's background consolidation makes
//! of a conversation once it has gone quiet (see `persona/observing.rs` for when).
//!
//! Extractive, with no model: each message that says something becomes a fact about its
//! speaker, in words a question about that speaker uses. "I went to a support group yesterday",
//! said by caroline on 8 May 2023, becomes "Caroline went to a support group 7 May 2023 (said by
//! Caroline on 8 May 2023)": the first person is its speaker, the second the one spoken to
//! (who spoke before in the session), and relative days are dates. Each session (a room's
//! messages, each within [`CONTEXT_GAP_US`] of the one before) gets a summary: who talked,
//! when, and the words they used most. Every observation keeps the messages it came from.

use std::collections::BTreeMap;

use mindfleet_core::conversation::{CONTEXT_GAP_US, Observation, ObservationKind, Said};

use mindfleet_core::words::{self, is_stop_word};

pub mod by_model;

/// What made these observations, as they record it.
pub const BY: &str = "rules";
/// Words of a session its summary names.
const SUMMARY_WORDS: usize = 12;
/// Fewest words other than stop words that make a message say something.
const CONTENT_WORDS: usize = 3;

/// The observations `said` gives (oldest first; several rooms may be mixed).
pub fn observe(said: &[Said]) -> Vec<Observation> {
    let mut out = Vec::new();
    for session in sessions_of(said) {
        out.extend(session.iter().enumerate().filter_map(|(i, s)| fact(s, addressee(&session, i))));
        out.extend(summary(&session));
    }
    out
}

/// The sessions of `said`, room by room (see [`sessions`]).
fn sessions_of(said: &[Said]) -> Vec<Vec<&Said>> {
    let mut rooms: BTreeMap<&str, Vec<&Said>> = BTreeMap::new();
    for s in said {
        rooms.entry(s.room.as_str()).or_default().push(s);
    }
    rooms.values().flat_map(|turns| sessions(turns)).collect()
}

/// A room's messages cut where more than [`CONTEXT_GAP_US`] passed between two.
fn sessions<'a>(turns: &[&'a Said]) -> Vec<Vec<&'a Said>> {
    let mut out: Vec<Vec<&Said>> = Vec::new();
    for s in turns {
        match out.last_mut() {
            Some(last) if last.last().is_some_and(|p| (s.at_us - p.at_us).abs() <= CONTEXT_GAP_US) => last.push(s),
            _ => out.push(vec![s]),
        }
    }
    out
}

/// Who message `i` of a session speaks to: the last one before it who is not its speaker, else
/// the first one after it.
fn addressee<'a>(session: &[&'a Said], i: usize) -> Option<&'a str> {
    let me = &session[i].from;
    let before = session[..i].iter().rev().find(|s| &s.from != me);
    let after = session[i + 1..].iter().find(|s| &s.from != me);
    before.or(after).map(|s| s.from.as_str())
}

/// A speaker's name as a person writes it: `caroline` is `Caroline`, `mary-ann` `Mary Ann`.
pub fn display(from: &str) -> String {
    from.split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next().map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The fact message `s` states, when it states something: not a question alone, and with at
/// least [`CONTENT_WORDS`] words that say something.
fn fact(s: &Said, to: Option<&str>) -> Option<Observation> {
    let text = s.text.trim();
    let words = content_words(text);
    if words.len() < CONTENT_WORDS || text.ends_with('?') && !text.contains(['.', '!']) {
        return None;
    }
    let me = display(&s.from);
    let you = to.map(display);
    let said = resolve(text, &me, you.as_deref(), s.at_us);
    Some(Observation {
        id: Observation::id_of(ObservationKind::Fact, s.seq),
        kind: ObservationKind::Fact,
        about: s.from.clone(),
        room: s.room.clone(),
        text: format!("{said} (said by {me} on {})", day(s.at_us)),
        at_us: s.at_us,
        sources: vec![s.seq],
        by: BY.into(),
    })
}

/// A session's summary: when, where, who, and the words used most (at least two messages).
fn summary(session: &[&Said]) -> Option<Observation> {
    let (first, last) = (session.first()?, session.last()?);
    if session.len() < 2 {
        return None;
    }
    let mut who: Vec<&str> = Vec::new();
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (i, s) in session.iter().enumerate() {
        if !who.contains(&s.from.as_str()) {
            who.push(&s.from);
        }
        for w in content_words(&s.text) {
            counts.entry(w).or_insert((0, i)).0 += 1;
        }
    }
    // The commonest first; among equals, the first said.
    let mut words: Vec<(String, (usize, usize))> = counts.into_iter().collect();
    words.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
    let topics: Vec<String> = words.into_iter().take(SUMMARY_WORDS).map(|(w, _)| w).collect();
    let names: Vec<String> = who.iter().map(|w| display(w)).collect();
    Some(Observation {
        id: Observation::id_of(ObservationKind::Summary, first.seq),
        kind: ObservationKind::Summary,
        about: who.join(","),
        room: first.room.clone(),
        text: format!(
            "On {} in #{}, {} talked about {}",
            day(first.at_us),
            first.room,
            names.join(" and "),
            topics.join(", ")
        ),
        at_us: last.at_us,
        sources: session.iter().map(|s| s.seq).collect(),
        by: BY.into(),
    })
}

/// The lower-cased words of `text` that say something ([`words::split`]: letters or digits, three
/// or more, not a stop word nor a word of [`NO_TOPIC`]), in order, each once.
fn content_words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words::split(text) {
        let w = w.to_lowercase();
        if w.chars().count() >= 3 && !is_stop_word(&w) && !NO_TOPIC.contains(&w.as_str()) && !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Words of no topic: the second person (which [`resolve`] names), greetings and fillers, the
/// words that ask, and what is left of a negative contraction split at its apostrophe (`don't`:
/// `don`, `t`; not `won`, a word of its own).
const NO_TOPIC: &[&str] = &[
    "you", "your", "yours", "yourself", "mine", "myself", "really", "just", "thanks", "thank", "yeah", "wow", "glad",
    "great", "awesome", "cool", "hey", "hello", "how", "what", "when", "where", "who", "why", "don", "doesn", "didn",
    "isn", "aren", "wasn", "weren", "wouldn", "couldn", "shouldn", "haven", "hasn", "hadn", "ain",
];

/// `text` in the third person and with dates: the first person is `me`, the second `you` (when
/// known), and relative days are counted from `at_us`.
fn resolve(text: &str, me: &str, you: Option<&str>, at_us: i64) -> String {
    let mine = format!("{me}'s");
    let yours = you.map(|y| format!("{y}'s"));
    let mut out: Vec<String> = Vec::new();
    let words: Vec<&str> = text.split(' ').collect();
    let mut i = 0;
    while i < words.len() {
        // Two-word phrases of time first ("last week").
        if let Some(pair) = words.get(i..i + 2).map(|p| p.join(" "))
            && let Some(when) = relative(&bare(&pair), at_us)
        {
            out.push(format!("{when}{}", trailing(&pair)));
            i += 2;
            continue;
        }
        let w = words[i];
        let (core, tail) = (bare(w), trailing(w));
        let named = match core.as_str() {
            "i" | "me" | "myself" => Some(me.to_string()),
            "i'm" => Some(format!("{me} is")),
            "i've" => Some(format!("{me} has")),
            "i'll" => Some(format!("{me} will")),
            "i'd" => Some(format!("{me} would")),
            "my" | "mine" => Some(mine.clone()),
            "you" | "yourself" => you.map(str::to_string),
            "you're" => you.map(|y| format!("{y} is")),
            "you've" => you.map(|y| format!("{y} has")),
            "your" | "yours" => yours.clone(),
            "we" | "us" => you.map(|y| format!("{me} and {y}")),
            "our" => you.map(|y| format!("{me} and {y}'s")),
            other => relative(other, at_us),
        };
        match named {
            Some(n) => out.push(format!("{}{n}{tail}", leading(w))),
            None => out.push(w.to_string()),
        }
        i += 1;
    }
    out.join(" ")
}

/// `w` lower-cased without the punctuation around it.
fn bare(w: &str) -> String {
    w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').trim_matches('\'').to_lowercase()
}

/// The punctuation after the word(s) of `w`.
fn trailing(w: &str) -> &str {
    let end = w.trim_end_matches(|c: char| !c.is_alphanumeric()).len();
    &w[end..]
}

/// The punctuation before the word of `w`.
fn leading(w: &str) -> &str {
    let start = w.len() - w.trim_start_matches(|c: char| !c.is_alphanumeric()).len();
    &w[..start]
}

/// A relative day ("yesterday", "last week") as the date it names, counted from `at_us`.
fn relative(phrase: &str, at_us: i64) -> Option<String> {
    const DAY: i64 = 86_400_000_000;
    let t = |days: i64| at_us + days * DAY;
    Some(match phrase {
        "yesterday" | "last night" => day(t(-1)),
        "today" | "tonight" | "this morning" | "this afternoon" | "this evening" => day(t(0)),
        "tomorrow" => day(t(1)),
        "last week" => format!("the week before {}", day(at_us)),
        "last weekend" => format!("the weekend before {}", day(at_us)),
        "next week" => format!("the week after {}", day(at_us)),
        "next weekend" => format!("the weekend after {}", day(at_us)),
        "this week" => format!("the week of {}", day(at_us)),
        "this month" => month(at_us, 0),
        "last month" => month(at_us, -1),
        "next month" => month(at_us, 1),
        "this year" => year(at_us, 0),
        "last year" => year(at_us, -1),
        "next year" => year(at_us, 1),
        other => {
            // "last sunday": the sunday before; "next friday": the friday after.
            let (which, name) = other.split_once(' ')?;
            let wanted = WEEKDAYS.iter().position(|d| *d == name)? as i64;
            let today = i64::from(civil(at_us).weekday().to_monday_zero_offset());
            match which {
                "last" => day(t(-((today - wanted + 6).rem_euclid(7) + 1))),
                "next" => day(t((wanted - today + 6).rem_euclid(7) + 1)),
                _ => return None,
            }
        }
    })
}

const WEEKDAYS: [&str; 7] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

fn civil(at_us: i64) -> jiff::civil::Date {
    jiff::Timestamp::from_microsecond(at_us)
        .map_or(jiff::civil::Date::default(), |t| t.to_zoned(jiff::tz::TimeZone::UTC).date())
}

/// `8 May 2023`.
pub fn day(at_us: i64) -> String {
    civil(at_us).strftime("%-d %B %Y").to_string()
}

/// `May 2023`, `months` from the month of `at_us`.
fn month(at_us: i64, months: i32) -> String {
    let d = civil(at_us).first_of_month();
    d.checked_add(jiff::Span::new().months(months)).unwrap_or(d).strftime("%B %Y").to_string()
}

fn year(at_us: i64, years: i16) -> String {
    (civil(at_us).year() + years).to_string()
}

#[cfg(test)]
mod tests;
