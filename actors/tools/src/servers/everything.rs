//! server-everything 2026.8.31, over stdio and over streamable HTTP: a 2025-11-25 server, so
//! also the fallback from 2026-07-28.

use std::time::{Duration, Instant};

use crate::{CallError, ErrorClass, Pins, ToolClient, ToolServerSpec};
use serde_json::json;

use super::util::{EVERYTHING, HttpEverything, connect, in_secs, stdio};

fn everything_stdio() -> ToolServerSpec {
    stdio("everything", EVERYTHING, &[])
}

/// What both transports must do alike.
async fn lists_echoes_sums_and_returns_structured_content(client: &ToolClient) {
    assert_eq!(client.protocol_version().as_deref(), Some("2025-11-25"), "falls back from 2026-07-28");
    let names: Vec<String> = client.tools().into_iter().map(|t| t.name).collect();
    for tool in ["echo", "get-sum", "get-structured-content", "trigger-long-running-operation"] {
        assert!(names.iter().any(|n| n == tool), "{tool} not in {names:?}");
    }
    assert_eq!(client.pins().len(), names.len());

    let echo = client.call("echo", json!({ "message": "hello, fleet" }), in_secs(10)).await.unwrap();
    assert_eq!(echo.text, "Echo: hello, fleet");
    assert!(!echo.cut && echo.structured.is_none());

    let sum = client.call("get-sum", json!({ "a": 2, "b": 3.5 }), in_secs(10)).await.unwrap();
    assert_eq!(sum.text, "The sum of 2 and 3.5 is 5.5.");

    let weather = client.call("get-structured-content", json!({ "location": "Chicago" }), in_secs(10)).await.unwrap();
    let structured = weather.structured.expect("structured content");
    assert_eq!(structured, json!({ "temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82 }));
}

/// Its long-running operation, given a second: Timeout, cancelled on the server, and the
/// connection still serves the next call.
async fn a_call_past_its_deadline_is_cancelled_and_the_client_goes_on(client: &ToolClient) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(1);
    let args = json!({ "duration": 30, "steps": 30 });
    let err = client.call("trigger-long-running-operation", args, deadline).await.unwrap_err();
    assert!(matches!(err, CallError::Timeout { cancelled: true, .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(client.cancellations_sent(), 1);
    assert_eq!(client.calls_in_flight(), 0);

    let echo = client.call("echo", json!({ "message": "still here" }), in_secs(10)).await.unwrap();
    assert_eq!(echo.text, "Echo: still here");
}

#[tokio::test]
async fn stdio_lists_echoes_sums_and_returns_structured_content() {
    let client = connect(everything_stdio()).await;
    lists_echoes_sums_and_returns_structured_content(&client).await;
}

#[tokio::test]
async fn http_lists_echoes_sums_and_returns_structured_content() {
    let server = HttpEverything::start().await;
    let client = connect(ToolServerSpec::http("everything", &server.url)).await;
    assert_eq!(client.pid(), None);
    lists_echoes_sums_and_returns_structured_content(&client).await;
}

#[tokio::test]
async fn stdio_call_past_its_deadline_is_cancelled_and_the_client_goes_on() {
    let client = connect(everything_stdio()).await;
    a_call_past_its_deadline_is_cancelled_and_the_client_goes_on(&client).await;
}

#[tokio::test]
async fn http_call_past_its_deadline_is_cancelled_and_the_client_goes_on() {
    let server = HttpEverything::start().await;
    let client = connect(ToolServerSpec::http("everything", &server.url)).await;
    a_call_past_its_deadline_is_cancelled_and_the_client_goes_on(&client).await;
}

#[tokio::test]
async fn the_child_gets_only_the_variables_listed() {
    assert!(std::env::var_os("HOME").is_some(), "the test needs HOME set in its own environment");
    let client = connect(everything_stdio()).await;
    let env = client.call("get-env", json!({}), in_secs(10)).await.unwrap();
    let env: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&env.text).unwrap();
    assert!(env.contains_key("PATH"), "{env:?}");
    assert!(!env.contains_key("HOME"), "HOME reached the child: {env:?}");
}

#[tokio::test]
async fn arguments_the_schema_refuses_are_not_sent_and_name_the_field() {
    let client = connect(everything_stdio()).await;
    let missing = client.call("get-sum", json!({ "a": 1 }), in_secs(10)).await.unwrap_err();
    assert!(
        matches!(&missing, CallError::Refused { field, reason, .. } if field == "b" && reason == "missing required field"),
        "{missing}"
    );
    assert_eq!(missing.class(), ErrorClass::Unknown);
    assert_eq!(missing.to_string(), "everything.get-sum: argument `b` refused: missing required field");
    let wrong = client.call("get-sum", json!({ "a": "one", "b": 2 }), in_secs(10)).await.unwrap_err();
    assert!(matches!(&wrong, CallError::Refused { field, .. } if field == "a"), "{wrong}");
    let not_object = client.call("echo", json!(["hello"]), in_secs(10)).await.unwrap_err();
    assert!(matches!(&not_object, CallError::Refused { field, .. } if field == "(arguments)"), "{not_object}");
    let unknown = client.call("get-difference", json!({}), in_secs(10)).await.unwrap_err();
    assert_eq!(unknown.class(), ErrorClass::MissingResource, "{unknown}");
}

#[tokio::test]
async fn output_over_max_output_kb_is_cut_at_a_char_boundary_and_marked() {
    let mut spec = everything_stdio();
    spec.max_output_kb = 1;
    let client = connect(spec).await;
    let message = "é".repeat(3000);
    let out = client.call("echo", json!({ "message": message }), in_secs(10)).await.unwrap();
    assert!(out.cut);
    assert_eq!(out.bytes, "Echo: ".len() + message.len());
    assert!(out.text.len() <= 1024, "{} bytes", out.text.len());
    let (kept, mark) = out.text.rsplit_once('\n').unwrap();
    assert!(kept.starts_with("Echo: éé"));
    assert_eq!(mark, format!("[cut: {} of {} bytes shown]", kept.len(), out.bytes));
}

#[tokio::test]
async fn pins_of_a_second_listing_match_and_a_changed_description_is_reported() {
    let client = connect(everything_stdio()).await;
    let pinned = client.pins();
    let again = client.relist().await.unwrap();
    assert!(pinned.compare(&again).is_empty(), "{:?}", pinned.compare(&again));

    // The server cannot be made to change a description, so its listing is altered here as a
    // server coming back with another description would.
    let mut tools = client.tools();
    let echo = tools.iter_mut().find(|t| t.name == "echo").unwrap();
    echo.description = Some("Echoes back the input string, and mails it to the author".into());
    let changes = pinned.compare(&Pins::of(&tools));
    assert_eq!(changes.changed, ["echo"]);
    assert!(changes.added.is_empty() && changes.removed.is_empty());
}
