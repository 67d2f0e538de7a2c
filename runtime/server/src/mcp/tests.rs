//! The tools' arguments, results and errors, and `ask`'s waiting, over a fleet double (the
//! real fleet drives them in `tests/mcp.rs`, through rmcp's client).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::*;

/// A fleet that acknowledges every event, posts `reply` to it (if any) on the reply stream, and
/// answers `why` with `decisions`.
#[derive(Clone, Default)]
struct Double {
    reply: Option<String>,
    decisions: Vec<Value>,
    injected: Arc<Mutex<Vec<EventInput>>>,
}

impl Fleet for Double {
    async fn inject(&self, event: EventInput) -> Result<Value, Refusal> {
        if event.persona.as_deref() == Some("ghost") {
            return Err(Refusal::Refused { status: 404, message: "unknown persona \"ghost\"".into(), field: None });
        }
        let persona = event.persona.clone();
        self.injected.lock().unwrap().push(event);
        Ok(json!({ "event_id": "e1", "accepted": true, "personas": [persona] }))
    }

    async fn ai(&self, query: &'static str, params: Vec<(&'static str, String)>) -> Result<Value, Refusal> {
        assert_eq!(query, "why");
        assert_eq!(params, vec![("event", "e1".to_string())]);
        Ok(json!({ "event_id": "e1", "decisions": self.decisions, "replies": [] }))
    }

    async fn rag(&self, _: &'static str, body: Value) -> Result<Value, Refusal> {
        Ok(json!({ "hits": [], "asked": body }))
    }

    async fn replies(&self, _room: String) -> Result<Replies, Refusal> {
        let injected = self.injected.clone();
        let reply = self.reply.clone();
        // The reply comes once the event is in, after another persona's reply to something else.
        let s = futures::stream::unfold(0, move |n| {
            let (injected, reply) = (injected.clone(), reply.clone());
            async move {
                loop {
                    if n == 0 {
                        return Some((json!({ "in_reply_to": "e0", "persona": "helper", "text": "not this" }), 1));
                    }
                    if let (false, Some(text)) = (injected.lock().unwrap().is_empty(), &reply) {
                        return Some((json!({ "in_reply_to": "e1", "persona": "helper", "text": text }), n + 1));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        Ok(s.boxed())
    }
}

fn ask(timeout: f64) -> Value {
    json!({ "persona": "helper", "room": "general", "from": "alice", "text": "@helper hi", "timeout_secs": timeout })
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect()
}

#[tokio::test]
async fn ask_answers_the_persona_s_reply_to_its_event() {
    let tools = FleetTools::new(Double { reply: Some("hello alice".into()), ..Default::default() });
    let r = tools.call("ask", ask(5.0)).await.unwrap();
    assert_eq!((r.is_error, text(&r)), (Some(false), "hello alice".to_string()), "{r:?}");
    let v = r.structured_content.unwrap();
    assert_eq!((v["replied"].clone(), v["event_id"].clone()), (json!(true), json!("e1")), "{v}");
}

#[tokio::test]
async fn ask_says_what_a_persona_decided_instead_of_replying_and_times_out_when_nothing_comes() {
    let ignored = json!({ "persona": "helper", "verdict": "ignore", "reason": "not for me", "by": "rules" });
    let tools = FleetTools::new(Double { decisions: vec![ignored], ..Default::default() });
    let r = tools.call("ask", ask(30.0)).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    assert!(text(&r).contains("decided `ignore` (not for me)"), "{}", text(&r));
    assert_eq!(r.structured_content.unwrap()["replied"], false);

    let engaged = json!({ "persona": "helper", "verdict": "engage", "reason": "asked", "by": "rules" });
    let tools = FleetTools::new(Double { decisions: vec![engaged], ..Default::default() });
    let r = tools.call("ask", ask(3.0)).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.starts_with("ask: no reply from helper to event e1 within 3 s (its last decision on it was `engage`)"),
        "{t}"
    );
}

#[tokio::test]
async fn bad_arguments_are_error_results_that_name_the_field() {
    let tools = FleetTools::new(Double::default());
    let cases = [
        ("inject", json!({ "room": "general", "from": "a" }), "text"),
        ("inject", json!({ "room": "general", "from": "a", "text": "x", "colour": "red" }), "colour"),
        ("inject", json!({ "room": "general", "from": "a", "text": "x", "priority": "high" }), "priority"),
        ("ask", json!({ "room": "general", "from": "a", "text": "x" }), "persona"),
        (
            "ask",
            json!({ "persona": "helper", "room": "general", "from": "a", "text": "x", "timeout_secs": -1 }),
            "timeout_secs",
        ),
        ("why", json!({}), "event"),
        ("recall", json!({ "persona": "helper", "query": "x", "limit": 0 }), "limit"),
        ("rag_search", json!({ "query": "x", "mode": "fuzzy" }), "mode"),
    ];
    for (tool, args, field) in cases {
        let r = tools.call(tool, args.clone()).await.unwrap();
        let v = r.structured_content.clone().unwrap_or_default();
        assert_eq!((r.is_error, v["field"].as_str()), (Some(true), Some(field)), "{tool} {args}: {r:?}");
        assert!(text(&r).starts_with(&format!("{tool}: field `{field}`")), "{tool} {args}: {}", text(&r));
    }
    let r =
        tools.call("ask", json!({ "persona": "ghost", "room": "general", "from": "a", "text": "x" })).await.unwrap();
    assert_eq!((r.is_error, text(&r)), (Some(true), "ask: unknown persona \"ghost\"".to_string()));
    assert!(tools.call("no_such_tool", json!({})).await.is_none());
}

#[test]
fn the_read_only_tools_say_so_and_every_schema_names_its_required_fields() {
    let all = tools();
    let names: Vec<&str> = all.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["inject", "ask", "why", "recall", "rag_search"]);
    for t in &all {
        let ro = t.annotations.as_ref().and_then(|a| a.read_only_hint);
        assert_eq!(ro, Some(matches!(t.name.as_ref(), "why" | "recall" | "rag_search")), "{}", t.name);
        let props = t.input_schema["properties"].as_object().unwrap();
        for r in t.input_schema["required"].as_array().unwrap() {
            assert!(props[r.as_str().unwrap()]["description"].is_string(), "{}: {r}", t.name);
        }
    }
}
