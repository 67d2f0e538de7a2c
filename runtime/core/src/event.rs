//! Events: what reaches personas, as sent (JSON) and as stored (validated).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::config::{DOMAINS, valid_name};
use crate::time::now_us;

/// Who sent an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SenderKind {
    #[default]
    Human,
    Persona,
    System,
}

/// An event as a client sends it (HTTP body, one line of an `--events` file).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventInput {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub ts: Option<String>,
    pub domain: String,
    pub room: String,
    pub from: String,
    #[serde(default)]
    pub sender_kind: SenderKind,
    pub text: String,
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub mentions: Vec<String>,
    #[serde(default)]
    pub priority: Option<f64>,
    #[serde(default)]
    pub urgent: bool,
    #[serde(default)]
    pub in_reply_to: Option<String>,
}

/// A validated event, as stored and delivered.
///
/// Stored with bincode: no `skip_serializing_if` here, the format is not self-describing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    /// When it happened (client's `ts`, else acceptance time), microseconds since the epoch.
    pub ts_us: i64,
    /// When the fleet accepted it, microseconds since the epoch.
    pub accepted_us: i64,
    pub domain: String,
    pub room: String,
    pub from: String,
    pub sender_kind: SenderKind,
    pub text: String,
    pub persona: Option<String>,
    /// Explicit mentions plus every `@name` in the text, de-duplicated.
    pub mentions: Vec<String>,
    pub priority: Option<f64>,
    pub urgent: bool,
    pub in_reply_to: Option<String>,
}

/// Why an event was refused; `field` names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct EventError {
    pub field: &'static str,
    pub message: String,
}

fn bad(field: &'static str, message: impl Into<String>) -> EventError {
    EventError { field, message: message.into() }
}

/// Longest accepted text, in bytes (the body limit is checked before parsing too).
pub const MAX_TEXT_BYTES: usize = 32 * 1024;

impl EventInput {
    /// Parses one JSON document (an HTTP body or a JSONL line). An error about a field's value
    /// names the field (`field `priority`: invalid type: ...`), as serde's own message does not.
    pub fn from_json(s: &str) -> Result<Self, String> {
        let mut de = serde_json::Deserializer::from_str(s);
        let input = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // The root (`.`): a syntax error, or a missing or unknown field, which serde names.
            if path == "." { inner.to_string() } else { format!("field `{path}`: {inner}") }
        })?;
        de.end().map_err(|e| e.to_string())?;
        Ok(input)
    }

    /// Validates and normalises; assigns an id and timestamps when absent.
    pub fn validate(self) -> Result<Event, EventError> {
        let now = now_us();
        let id = match self.id {
            Some(id) if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) => {
                return Err(bad("id", "must be 1-128 bytes of printable characters"));
            }
            Some(id) => id,
            None => new_event_id(),
        };
        if let Some(to) = &self.in_reply_to
            && (to.is_empty() || to.len() > 128 || to.chars().any(char::is_control))
        {
            return Err(bad("in_reply_to", "must be an event id: 1-128 bytes of printable characters"));
        }
        let ts_us = match &self.ts {
            None => now,
            Some(ts) => ts
                .parse::<jiff::Timestamp>()
                // The parser's reason in brackets: it may end with the character it stopped at,
                // a full stop too.
                .map_err(|e| bad("ts", format!("{ts:?} is not an RFC 3339 time ({e})")))?
                .as_microsecond(),
        };
        if !DOMAINS.contains(&self.domain.as_str()) {
            return Err(bad("domain", format!("unknown domain {:?} (known: {})", self.domain, DOMAINS.join(", "))));
        }
        if !valid_name(&self.room) {
            return Err(bad("room", format!("{:?} must be 1-64 characters of a-z, 0-9, '-' or '_'", self.room)));
        }
        if self.from.is_empty() || self.from.len() > 128 || self.from.chars().any(char::is_control) {
            return Err(bad("from", "must be 1-128 bytes of printable characters"));
        }
        if self.text.trim().is_empty() {
            return Err(bad("text", "must not be empty"));
        }
        if self.text.len() > MAX_TEXT_BYTES {
            return Err(bad("text", format!("is {} bytes, more than {MAX_TEXT_BYTES}", self.text.len())));
        }
        if let Some(p) = &self.persona
            && !valid_name(p)
        {
            return Err(bad("persona", format!("{p:?} is not a persona name")));
        }
        if let Some(p) = self.priority
            && (!p.is_finite() || !(0.0..=1.0).contains(&p))
        {
            return Err(bad("priority", format!("{p} is not a number in 0..=1")));
        }
        let mut mentions = Vec::new();
        for m in self.mentions {
            let m = m.trim_start_matches('@').to_string();
            if !valid_name(&m) {
                return Err(bad("mentions", format!("{m:?} is not a persona name")));
            }
            if !mentions.contains(&m) {
                mentions.push(m);
            }
        }
        for m in text_mentions(&self.text) {
            if !mentions.iter().any(|x| x == m) {
                mentions.push(m.to_string());
            }
        }
        Ok(Event {
            id,
            ts_us,
            accepted_us: now,
            domain: self.domain,
            room: self.room,
            from: self.from,
            sender_kind: self.sender_kind,
            text: self.text,
            persona: self.persona,
            mentions,
            priority: self.priority,
            urgent: self.urgent,
            in_reply_to: self.in_reply_to,
        })
    }
}

/// `@name` mentions in a text: `@` at the start or after a non-word character (so
/// `bob@example.com` is no mention), followed by a valid name.
pub fn text_mentions(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    text.match_indices('@').filter_map(move |(i, _)| {
        if i > 0 {
            let prev = bytes[i - 1];
            if prev.is_ascii_alphanumeric() || prev == b'_' || prev == b'-' || prev == b'.' {
                return None;
            }
        }
        let rest = &text[i + 1..];
        let end = rest
            .bytes()
            .position(|b| !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'))
            .unwrap_or(rest.len());
        let name = rest[..end].trim_end_matches(['-', '_']);
        (!name.is_empty() && name.len() <= 64).then_some(name)
    })
}

/// A fresh event id: milliseconds since the epoch and a process-wide counter. A restart
/// takes at least a millisecond, so ids stay unique across restarts of a data dir.
pub fn new_event_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("ev-{:x}-{n:x}", now_us() / 1000)
}

#[cfg(test)]
#[path = "event_props.rs"]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn input(text: &str) -> EventInput {
        EventInput {
            domain: "chat".into(),
            room: "general".into(),
            from: "alice".into(),
            text: text.into(),
            ..Default::default()
        }
    }

    #[test]
    fn at_mentions_are_found_but_not_in_emails() {
        let m: Vec<_> = text_mentions("@helper can you ask bob@example.com and (@ops)?").collect();
        assert_eq!(m, ["helper", "ops"]);
    }

    #[test]
    fn text_mentions_join_explicit_ones_once() {
        let mut i = input("hey @helper");
        i.mentions = vec!["helper".into(), "@ops".into()];
        assert_eq!(i.validate().unwrap().mentions, ["helper", "ops"]);
    }

    #[test]
    fn nan_and_out_of_range_priority_name_the_field() {
        for p in [f64::NAN, 1.5, -0.1] {
            let mut i = input("x");
            i.priority = Some(p);
            assert_eq!(i.validate().unwrap_err().field, "priority");
        }
    }

    #[test]
    fn missing_field_is_named() {
        let err = EventInput::from_json(r#"{"domain":"chat","room":"general","from":"a"}"#).unwrap_err();
        assert!(err.contains("missing field `text`"), "{err}");
    }

    #[test]
    fn ids_are_unique() {
        let a: std::collections::HashSet<_> = (0..1000).map(|_| new_event_id()).collect();
        assert_eq!(a.len(), 1000);
    }

    #[test]
    fn rfc3339_ts_is_parsed() {
        let mut i = input("x");
        i.ts = Some("2026-01-02T03:04:05+01:00".into());
        assert_eq!(i.validate().unwrap().ts_us, 1_767_319_445_000_000);
        let mut i = input("x");
        i.ts = Some("yesterday".into());
        assert_eq!(i.validate().unwrap_err().field, "ts");
        // A reason that ends with the character the parser stopped at, a full stop here, does
        // not end the message (regression: the property test of event bodies found it).
        let mut i = input("x");
        i.ts = Some(".2026-01-02T03:04:05Z".into());
        let err = i.validate().unwrap_err().to_string();
        assert!(err.contains("is not an RFC 3339 time (") && err.ends_with(')'), "{err}");
    }
}
