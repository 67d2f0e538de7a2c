//! The text each tool answers beside its structured content: short, for a person or a model to
//! read, with nothing in it that the structured content does not hold.

use std::fmt::Write;
use std::time::Duration;

use serde_json::Value;

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// `["a", "b"]` as `a, b`; none as `no persona`.
pub fn names(v: &Value) -> String {
    let names: Vec<&str> = list(v).iter().map(s).collect();
    if names.is_empty() { "no persona".to_string() } else { names.join(", ") }
}

/// Seconds, without a fraction when there is none.
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 { format!("{s:.0}") } else { format!("{s}") }
}

/// `why`: each decision with its reason, then each reply.
pub fn why(v: &Value) -> String {
    let id = s(&v["event_id"]);
    let (decisions, replies) = (list(&v["decisions"]), list(&v["replies"]));
    if decisions.is_empty() && replies.is_empty() {
        return format!("no persona has decided on event {id} (not yet, or the fleet does not know the id)");
    }
    let mut out = format!("event {id}:");
    for d in decisions {
        let _ = write!(out, "\n- {}: {} ({}), by {}", s(&d["persona"]), s(&d["verdict"]), s(&d["reason"]), s(&d["by"]));
    }
    for r in replies {
        let _ = write!(out, "\n- {} replied: {}", s(&r["persona"]), s(&r["text"]));
    }
    out
}

/// `recall`: the messages found, most relevant first.
pub fn recall(v: &Value) -> String {
    let items = list(&v["recall"]["items"]);
    let mut out = format!(
        "{} recalls {} message{} about {:?}",
        s(&v["persona"]),
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        s(&v["query"])
    );
    if let Some(why) = v["recall"]["degraded"].as_str() {
        let _ = write!(out, " (by words only: {why})");
    }
    for i in items {
        let _ = write!(out, "\n- {} in {} at {}: {}", s(&i["from"]), s(&i["room"]), s(&i["at"]), s(&i["text"]));
    }
    out
}

/// `rag_search`: each hit's place and its first line.
pub fn hits(v: &Value) -> String {
    let hits = list(&v["hits"]);
    let mut out = format!("{} result{}", hits.len(), if hits.len() == 1 { "" } else { "s" });
    if let Some(note) = v["note"].as_str() {
        let _ = write!(out, " ({note})");
    }
    for h in hits {
        let first = s(&h["text"]).lines().find(|l| !l.trim().is_empty()).unwrap_or_default().trim();
        let _ = write!(
            out,
            "\n- {}:{}-{} {} {} (score {:.3}): {first}",
            s(&h["path"]),
            h["start_line"],
            h["end_line"],
            s(&h["kind"]),
            s(&h["symbol"]),
            h["score"].as_f64().unwrap_or_default()
        );
    }
    out
}
