//! Directed tests of the `call_tool` step in the same world: a model's own tool calling in
//! rounds, what a tool says of the model's arguments, the loop breaker, the local model's refill
//! and a call over budget.

use std::sync::Arc;

use mindfleet_core::llm::FillJob;
use mindfleet_core::record::ErrorClass;
use mindfleet_core::tools::{ProcedureCall, ToolCall, ToolFailure, ToolProcedure, ToolResult, ToolSpec};

use super::*;

/// A persona whose model calls tools natively (an endpoint's), with `fs.read` to call, given
/// the model's turns.
fn native(
    turns: Vec<Vec<(&'static str, &'static str)>>,
    results: fn(&ToolCall) -> Result<ToolResult, ToolFailure>,
) -> World {
    with_tools(true, turns, Vec::new(), results)
}

/// A persona with `fs.read` to call, its model's turns (native) or fills (a local model's).
fn with_tools(
    native: bool,
    turns: Vec<Vec<(&'static str, &'static str)>>,
    fills: Vec<&'static str>,
    results: fn(&ToolCall) -> Result<ToolResult, ToolFailure>,
) -> World {
    let run = Run { local: true, budget_spent: false, failures: false, steps: Vec::new() };
    let mut w = World::new(&run);
    w.life.setup.tools = true;
    w.life.setup.native_tools = native;
    w.fills = fills.into();
    let schema = serde_json::json!({ "type": "object", "properties": { "path": { "type": "string" } } });
    let read =
        ToolSpec { name: "fs.read".into(), description: "Read a file".into(), input_schema: schema, read_only: true };
    w.feed(Input::Catalog(vec![read]));
    w.turns = turns.into();
    w.results = results;
    w.apply(&Step::Deliver { human: true, shared: false, mention: true, text: 0 });
    assert!(w.settle(), "the lifecycle settles");
    assert!(w.broken.is_empty(), "{:?}", w.broken);
    w
}

fn path(call: &ToolCall) -> &str {
    call.arguments["path"].as_str().unwrap_or("")
}

fn the_reply(w: &World) -> String {
    let c = w.commits.iter().find(|c| c.reply.is_some()).expect("a reply");
    c.reply.as_ref().map(|(r, _)| r.text.clone()).unwrap_or_default()
}

#[test]
fn an_endpoint_calls_tools_in_rounds_each_turn_shown_what_the_last_returned() {
    let w =
        native(vec![vec![("fs.read", r#"{"path":"notes.md"}"#)], vec![("fs.read", r#"{"path":"plan.md"}"#)]], |call| {
            match path(call) {
                "notes.md" => Ok(result("the plan is in plan.md")),
                _ => Ok(result("we ship on friday")),
            }
        });
    let paths: Vec<&str> = w.made.iter().map(path).collect();
    assert_eq!(paths, ["notes.md", "plan.md"], "the second call made from the first's result");
    assert_eq!(w.asked_turns.len(), 3, "a turn after each round, the last asking for none");
    assert!(w.asked_turns[0].rounds.is_empty());
    assert_eq!(w.asked_turns[1].rounds[0].results, ["the plan is in plan.md"]);
    assert_eq!(w.asked_turns[2].rounds.len(), 2);
    assert_eq!(w.asked_turns[2].rounds[1].results, ["we ship on friday"]);
    assert_eq!(w.asked_turns[0].tools[0].name, "fs.read");
    let reply = the_reply(&w);
    assert!(reply.contains("the plan is in plan.md") && reply.contains("we ship on friday"), "{reply}");
}

#[test]
fn what_a_tool_says_of_the_model_s_arguments_is_shown_at_its_next_turn_once() {
    let w = native(
        vec![vec![("fs.read", r#"{"path":"notes.md"}"#)], vec![("fs.read", r#"{"path":"/srv/notes.md"}"#)]],
        |call| match path(call) {
            "notes.md" => Err(ToolFailure {
                class: ErrorClass::Unknown,
                message: "fs.read: isError".into(),
                for_model: Some("the path must be absolute".into()),
                took_ms: 1,
            }),
            _ => Ok(result("ship on friday")),
        },
    );
    let paths: Vec<&str> = w.made.iter().map(path).collect();
    assert_eq!(paths, ["notes.md", "/srv/notes.md"]);
    let shown = &w.asked_turns[1].rounds[0].results[0];
    assert!(shown.starts_with("error: the path must be absolute"), "{shown}");
    let plan = w.commits.iter().find_map(|c| c.plan.as_ref()).expect("a plan");
    let adjusted = &plan.adjustments[0];
    assert_eq!(adjusted.adjustment, mindfleet_core::record::Adjustment::Continue, "{adjusted:?}");
    assert!(adjusted.reason.contains("shown to the model at its next turn"), "{}", adjusted.reason);
    assert!(the_reply(&w).contains("ship on friday"));
}

#[test]
fn an_endpoint_repeating_one_call_is_stopped_by_the_loop_breaker_and_the_persona_still_answers() {
    let again = vec![("fs.read", r#"{"path":"notes.md"}"#)];
    let w = native(vec![again.clone(); 10], |_| Ok(result("the same text")));
    assert_eq!(w.made.len(), 2, "max_identical_calls = 2");
    let c = w.commits.iter().find(|c| c.reply.is_some()).expect("a reply");
    assert!(c.decision.reason.contains("loop breaker"), "{}", c.decision.reason);
    assert!(the_reply(&w).contains("the same text"));
}

/// `fs.read` refuses a relative path, saying so to the model.
fn absolute_only(call: &ToolCall) -> Result<ToolResult, ToolFailure> {
    if path(call).starts_with('/') {
        return Ok(result("ship on friday"));
    }
    let for_model = Some("the path must be absolute".into());
    Err(ToolFailure { class: ErrorClass::Unknown, message: "fs.read: isError".into(), for_model, took_ms: 1 })
}

#[test]
fn a_local_model_whose_arguments_a_tool_refuses_fills_them_again_once_told_what_it_said() {
    let w = with_tools(false, Vec::new(), vec![r#"{"path":"notes.md"}"#, r#"{"path":"/srv/notes.md"}"#], absolute_only);
    let paths: Vec<&str> = w.made.iter().map(path).collect();
    assert_eq!(paths, ["notes.md", "/srv/notes.md"], "filled again after the refusal");
    assert_eq!(w.asked_fills.len(), 2);
    let told = |job: &FillJob| job.messages.iter().any(|m| m.content.contains("the path must be absolute"));
    assert!(!told(&w.asked_fills[0]) && told(&w.asked_fills[1]), "shown what the tool said at the second fill");
    assert!(the_reply(&w).contains("ship on friday"), "{}", the_reply(&w));

    // Refused again: it is not filled a third time, and the persona still answers.
    let w = with_tools(
        false,
        Vec::new(),
        vec![r#"{"path":"a.md"}"#, r#"{"path":"b.md"}"#, r#"{"path":"/c.md"}"#],
        absolute_only,
    );
    assert_eq!(w.asked_fills.len(), 2, "shown once");
    assert!(!w.made.iter().any(|c| path(c) == "/c.md"));
    assert!(the_reply(&w).contains("the path must be absolute"), "{}", the_reply(&w));
}

#[test]
fn a_call_the_budget_has_no_room_for_is_not_made_and_the_reply_says_so() {
    let run = Run { local: false, budget_spent: true, failures: false, steps: Vec::new() };
    let mut w = World::new(&run);
    w.life.setup.tools = true;
    let mut cfg = (*w.life.setup.config).clone();
    let read = ProcedureCall { tool: "fs.read".into(), arguments: r#"{"path":"deploy.md"}"#.into() };
    cfg.procedures = vec![ToolProcedure {
        name: "read".into(),
        domains: Vec::new(),
        when: vec!["deploy".into()],
        calls: vec![read],
    }];
    w.life.setup.config = Arc::new(cfg);
    w.apply(&Step::Deliver { human: true, shared: false, mention: true, text: 0 });
    assert!(w.settle());
    assert!(w.made.is_empty(), "no call made over budget");
    let reply = the_reply(&w);
    assert!(
        reply.contains("I could not use fs.read") && reply.contains("the budget has no room for a tool call"),
        "{reply}"
    );
}
