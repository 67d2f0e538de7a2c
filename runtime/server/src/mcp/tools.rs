//! The tools' definitions (name, description, JSON Schema of the arguments, annotations) and
//! their arguments read against them: a wrong one is refused naming its field.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use mindfleet_core::config::DOMAINS;
use mindfleet_core::event::EventInput;
use mindfleet_core::knowledge::SearchMode;

use super::Refusal;

/// How long `ask` waits for the reply unless told: a rules brain answers in milliseconds, a
/// local model on a loaded machine in tens of seconds.
pub const ASK_TIMEOUT_SECS: f64 = 60.0;
/// The longest `ask` waits.
pub const ASK_MAX_TIMEOUT_SECS: f64 = 600.0;

/// Every tool the fleet serves, in the order `tools/list` gives them.
pub fn tools() -> Vec<Tool> {
    let tool = |name: &'static str, title: &str, description: &'static str, schema: Value, read_only: bool| {
        let schema: JsonObject = match schema {
            Value::Object(o) => o,
            _ => JsonObject::new(),
        };
        // Nothing here destroys anything or reaches beyond the fleet; a read asked twice is
        // answered twice the same, an event injected twice is two events.
        let hints = ToolAnnotations::with_title(title)
            .read_only(read_only)
            .destructive(false)
            .idempotent(read_only)
            .open_world(false);
        Tool::new(name, description, Arc::new(schema)).with_title(title).with_annotations(hints)
    };
    vec![
        tool(
            "inject",
            "Inject an event",
            "Post one event (a message in a room) to the fleet, as `POST /events` takes it. The \
             personas of the room, or the one named, decide on it in their own time; the answer \
             is the event's id, which `why` explains.",
            object(event_properties(false), &["room", "from", "text"]),
            false,
        ),
        tool(
            "ask",
            "Ask a persona",
            "Post an event addressed to one persona, then wait for that persona's reply to it (at \
             most `timeout_secs`). Answers the reply's text; or what the persona decided instead \
             of replying (ignore, defer, ...) when it decided not to; or an error when no reply \
             came in time.",
            object(event_properties(true), &["persona", "room", "from", "text"]),
            false,
        ),
        tool(
            "why",
            "Why an event was decided so",
            "Every persona's decision on an event (verdict, reason, rule, numbers, time) and the \
             replies posted to it, from the fleet's journal.",
            object(
                json!({ "event": { "type": "string", "description": "The event's id, as `inject` or `ask` answered it." } }),
                &["event"],
            ),
            true,
        ),
        tool(
            "recall",
            "Recall what a persona was told",
            "What a persona was told about a topic: its conversation memory, searched by words and \
             meaning, most relevant first, each message with who said it, where and when.",
            object(
                json!({
                    "persona": { "type": "string", "description": "The persona whose memory is searched." },
                    "query": { "type": "string", "description": "The topic, in words." },
                    "room": { "type": "string", "description": "Rank this room's messages higher." },
                    "since": { "type": "string", "description": "Only what was said within this window back from now: 90s, 15m, 1h, 7d." },
                    "limit": { "type": "integer", "minimum": 1, "maximum": 100, "default": 10, "description": "Most messages answered." }
                }),
                &["persona", "query"],
            ),
            true,
        ),
        tool(
            "rag_search",
            "Search the codebase index",
            "Search the codebase index the fleet keeps (what `mindfleet rag index` indexed): chunks \
             of code and documents ranked by words and meaning, each with its path, lines, kind, \
             symbol, score and text.",
            object(
                json!({
                    "query": { "type": "string", "description": "What to find, in words or code." },
                    "limit": { "type": "integer", "minimum": 1, "maximum": 100, "default": 10, "description": "Most results answered." },
                    "lang": { "type": "string", "description": "Only chunks of this language (rust, python, typescript, javascript, go, markdown, ...)." },
                    "path_prefix": { "type": "string", "description": "Only chunks whose path (relative to its repository's root) starts with this." },
                    "threshold": { "type": "number", "minimum": 0, "maximum": 1, "description": "Only results scoring at least this." },
                    "mode": { "type": "string", "enum": ["hybrid", "keyword", "vector"], "default": "hybrid", "description": "Rank by words and meaning (hybrid), words only, or meaning only." }
                }),
                &["query"],
            ),
            true,
        ),
    ]
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

/// The properties of an event (`POST /events`), and `ask`'s `timeout_secs`.
fn event_properties(ask: bool) -> Value {
    let persona = if ask {
        "The persona asked: it gets the event, and its reply is awaited."
    } else {
        "Address the event to this persona only (else every persona of the room decides on it)."
    };
    let mut p = json!({
        "room": { "type": "string", "description": "The room it is said in (1-64 characters of a-z, 0-9, '-', '_'); a room of the fleet's personas." },
        "from": { "type": "string", "description": "Who says it (1-128 printable characters)." },
        "text": { "type": "string", "description": "What is said (at most 32 KiB). `@name` mentions a persona." },
        "persona": { "type": "string", "description": persona },
        "domain": { "type": "string", "enum": DOMAINS, "default": "chat", "description": "What kind of event it is." },
        "sender_kind": { "type": "string", "enum": ["human", "persona", "system"], "default": "human", "description": "Who the sender is." },
        "mentions": { "type": "array", "items": { "type": "string" }, "description": "Personas mentioned, besides the `@name`s of the text." },
        "priority": { "type": "number", "minimum": 0, "maximum": 1, "description": "How much it matters (0..1); the personas judge it themselves without." },
        "urgent": { "type": "boolean", "default": false, "description": "Urgent: ahead of everything else in the inboxes." },
        "id": { "type": "string", "description": "The event's id (default: a new one). An id the fleet has seen is not delivered again." },
        "ts": { "type": "string", "description": "When it was said, RFC 3339 (default: now)." },
        "in_reply_to": { "type": "string", "description": "The id of the event this one answers." }
    });
    if ask {
        p["timeout_secs"] = json!({
            "type": "number", "exclusiveMinimum": 0, "maximum": ASK_MAX_TIMEOUT_SECS, "default": ASK_TIMEOUT_SECS,
            "description": "How long to wait for the reply, in seconds."
        });
    }
    p
}

/// `args` read as `T`, or the field that is wrong and why (`missing field`, `unknown field`,
/// a wrong type) as a refusal naming it.
pub fn args<T: DeserializeOwned>(args: Value) -> Result<T, Refusal> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        match path.as_str() {
            "." | "" => {
                let field = named(&inner);
                Refusal::bad(field.as_deref(), inner)
            }
            p => Refusal::bad(Some(p), format!("field `{p}`: {inner}")),
        }
    })
}

/// The field a serde message about the whole object names: ``missing field `room` `` or
/// ``unknown field `colour`, expected ...``.
fn named(message: &str) -> Option<String> {
    ["missing field `", "unknown field `"]
        .iter()
        .find_map(|start| message.split_once(start))
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(field, _)| field.to_string())
}

/// An event from `inject`'s (or `ask`'s) arguments: `domain` is `chat` unless given.
pub fn event(mut args: Value) -> Result<EventInput, Refusal> {
    if let Some(o) = args.as_object_mut() {
        o.entry("domain").or_insert_with(|| json!("chat"));
    }
    self::args(args)
}

/// `ask`'s arguments: the event, addressed to a persona, and how long to wait.
pub fn ask(mut args: Value) -> Result<(EventInput, String, std::time::Duration), Refusal> {
    let timeout = match args.as_object_mut().and_then(|o| o.remove("timeout_secs")) {
        None => ASK_TIMEOUT_SECS,
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s <= ASK_MAX_TIMEOUT_SECS => s,
            _ => {
                return Err(Refusal::bad(
                    Some("timeout_secs"),
                    format!("field `timeout_secs`: {v} is not a number of seconds in (0, {ASK_MAX_TIMEOUT_SECS}]"),
                ));
            }
        },
    };
    let input = event(args)?;
    let Some(persona) = input.persona.clone() else {
        return Err(Refusal::bad(Some("persona"), "missing field `persona`: `ask` waits for one persona's reply"));
    };
    Ok((input, persona, std::time::Duration::from_secs_f64(timeout)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Why {
    pub event: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recall {
    pub persona: String,
    pub query: String,
    #[serde(default)]
    pub room: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default = "ten")]
    pub limit: u32,
}

impl Recall {
    pub fn checked(self) -> Result<Recall, Refusal> {
        if !(1..=100).contains(&self.limit) {
            return Err(Refusal::bad(Some("limit"), format!("field `limit`: {} is not in 1..=100", self.limit)));
        }
        Ok(self)
    }
}

fn ten() -> u32 {
    10
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Search {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    lang: Option<String>,
    #[serde(default)]
    path_prefix: Option<String>,
    #[serde(default)]
    threshold: Option<f32>,
    #[serde(default)]
    mode: Option<SearchMode>,
}

/// `rag_search`'s arguments, checked, as the body of `POST /rag/search`.
pub fn search(a: Value) -> Result<Value, Refusal> {
    let s: Search = args(a)?;
    if s.limit.is_some_and(|l| !(1..=100).contains(&l)) {
        return Err(Refusal::bad(Some("limit"), format!("field `limit`: {} is not in 1..=100", s.limit.unwrap_or(0))));
    }
    let mut body = json!({ "query": s.query, "limit": s.limit.unwrap_or(10) });
    for (k, v) in [("lang", s.lang), ("path_prefix", s.path_prefix)] {
        if let Some(v) = v {
            body[k] = json!(v);
        }
    }
    if let Some(t) = s.threshold {
        body["threshold"] = json!(t);
    }
    if let Some(m) = s.mode {
        body["mode"] = json!(m);
    }
    Ok(body)
}
