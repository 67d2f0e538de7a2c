//! The fleet as an MCP server, driven by rmcp's own client: `/mcp` on the admin API (streamable
//! HTTP, behind the token) and `mindfleet mcp` (stdio, the binary), on a rules-brain fleet; and
//! the stream slots (`[admin] max_streams`) that keep long-lived streams from taking every
//! connection.

use std::time::Instant;

use mindfleet::Fleet;
use mindfleet::client::Client;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::util::*;

const TOKEN: &str = "mcp-test-token-0123456789";

/// A rules-brain fleet of [`TRIO`] behind [`TOKEN`].
fn fleet_file() -> String {
    format!("[fleet]\nname = \"mcp\"\nbrain = \"rules\"\n[admin]\naddr = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n{TRIO}")
}

/// A fleet started with its index holding [`two_files`].
async fn fleet_with_index(dir: &std::path::Path, src: &std::path::Path) -> (Fleet, Client) {
    pulled();
    let fleet = start(dir, &fleet_file()).await;
    let api = Client::new(&fleet.addr.to_string(), Some(TOKEN.into()));
    let r = api.rag("index", &json!({ "paths": [src] })).await.unwrap();
    assert_eq!(r["indexed"][0]["files_indexed"], 2, "{r}");
    (fleet, api)
}

type McpClient = RunningService<RoleClient, ()>;

fn http_transport(fleet: &Fleet, token: Option<&str>) -> StreamableHttpClientTransport<reqwest::Client> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", fleet.addr));
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    StreamableHttpClientTransport::from_config(config)
}

async fn call(client: &McpClient, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!("arguments are an object") };
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
    client.call_tool(params).await.unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

fn value(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or_else(|| panic!("no structured content: {r:?}"))
}

/// Every tool through `client`, against `fleet` (whose index holds [`tree`]); `how` names the
/// transport in failures. Events are told apart by `how`.
async fn every_tool(client: &McpClient, fleet: &Fleet, how: &str) {
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["inject", "ask", "why", "recall", "rag_search"], "{how}");
    for t in &tools {
        let read_only = t.annotations.as_ref().and_then(|a| a.read_only_hint);
        assert_eq!(read_only, Some(matches!(t.name.as_ref(), "why" | "recall" | "rag_search")), "{how}: {}", t.name);
        assert!(t.description.as_ref().is_some_and(|d| !d.is_empty()), "{how}: {}", t.name);
        assert_eq!(t.input_schema["type"], "object", "{how}: {}", t.name);
    }

    // `inject`, then `why` on its id once the persona has decided.
    let said = format!("@helper how do I run the tests of the {how} door?");
    let r = call(client, "inject", json!({ "room": "general", "from": "alice", "text": said })).await;
    assert_eq!(r.is_error, Some(false), "{how}: {r:?}");
    let id = value(&r)["event_id"].as_str().unwrap().to_string();
    assert!(text(&r).contains(&id), "{how}: {}", text(&r));
    let why = poll(&format!("{how}: helper's decision on {id}"), || async {
        let r = call(client, "why", json!({ "event": id })).await;
        let v = value(&r);
        v["decisions"].as_array().unwrap().iter().any(|d| d["persona"] == "helper").then_some((r, v))
    })
    .await;
    let (r, v) = why;
    assert_eq!((r.is_error, v["event_id"].as_str()), (Some(false), Some(id.as_str())), "{how}: {v}");
    assert!(text(&r).contains("helper: engage"), "{how}: {}", text(&r));

    // `ask`: the persona's reply, within its timeout, and the one the fleet posted to it.
    let asked = Instant::now();
    let r = call(
        client,
        "ask",
        json!({ "persona": "helper", "room": "general", "from": "bob", "text": format!("@helper what is the {how} door for?"), "timeout_secs": 60 }),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{how}: {}", text(&r));
    let v = value(&r);
    assert_eq!((v["replied"].as_bool(), v["persona"].as_str()), (Some(true), Some("helper")), "{how}: {v}");
    let event = v["event_id"].as_str().unwrap();
    let posted = reply_to(fleet, event).await;
    assert_eq!((text(&r), posted.persona.as_str()), (posted.text.clone(), "helper"), "{how}");
    assert!(!posted.text.is_empty());
    eprintln!("{how}: ask answered in {:?}: {:?}", asked.elapsed(), posted.text);

    // `recall`: what helper was told about the tests, once its conversation memory took it in.
    let recalled = poll(&format!("{how}: helper to recall {said:?}"), || async {
        let r = call(
            client,
            "recall",
            json!({ "persona": "helper", "query": format!("running the tests of the {how} door") }),
        )
        .await;
        assert_eq!(r.is_error, Some(false), "{how}: {}", text(&r));
        let items = value(&r)["recall"]["items"].clone();
        items.as_array().unwrap().iter().any(|i| i["text"] == said.as_str()).then_some(r)
    })
    .await;
    assert!(text(&recalled).contains(&said), "{how}: {}", text(&recalled));

    // `rag_search` on the fleet's index.
    let r = call(client, "rag_search", json!({ "query": "retry with a growing delay", "limit": 1 })).await;
    assert_eq!(r.is_error, Some(false), "{how}: {}", text(&r));
    assert_eq!(value(&r)["hits"][0]["path"], "retry.rs", "{how}: {}", value(&r));
    assert!(text(&r).contains("retry.rs:1-"), "{how}: {}", text(&r));

    // What the fleet refuses comes back as an error result naming it.
    for (tool, args, field, says) in [
        (
            "inject",
            json!({ "room": "general", "from": "a", "text": "x", "priority": "high" }),
            Some("priority"),
            "priority",
        ),
        ("inject", json!({ "room": "general", "from": "a", "text": "x", "priority": 1.5 }), Some("priority"), "1.5"),
        ("inject", json!({ "room": "general", "from": "a" }), Some("text"), "missing field `text`"),
        ("ask", json!({ "persona": "ghost", "room": "general", "from": "a", "text": "hi" }), None, "\"ghost\""),
        ("inject", json!({ "room": "nowhere", "from": "a", "text": "hi" }), None, "\"nowhere\""),
        ("recall", json!({ "persona": "nobody", "query": "x" }), None, "\"nobody\""),
        ("why", json!({ "event": "" }), Some("event"), "event"),
        ("rag_search", json!({ "query": "x", "colour": "red" }), Some("colour"), "colour"),
    ] {
        let r = call(client, tool, args.clone()).await;
        let v = value(&r);
        assert_eq!(r.is_error, Some(true), "{how}: {tool} {args}: {r:?}");
        assert_eq!(v["field"].as_str(), field, "{how}: {tool} {args}: {v}");
        assert!(
            text(&r).starts_with(&format!("{tool}: ")) && text(&r).contains(says),
            "{how}: {tool} {args}: {}",
            text(&r)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_s_client_drives_the_fleet_s_tools_over_streamable_http_with_the_token_and_not_without() {
    let (dir, src) = (tempfile::tempdir().unwrap(), two_files());
    let (fleet, _) = fleet_with_index(dir.path(), src.path()).await;

    // Without the token (or with another), the handshake is refused: 401, as every route.
    for token in [None, Some("not-the-token-0123456789")] {
        let refused = ().serve(http_transport(&fleet, token)).await;
        let e = refused.err().unwrap_or_else(|| panic!("a client with {token:?} was let in")).to_string();
        let said = e.to_lowercase();
        assert!(["401", "unauthorized", "auth required"].iter().any(|w| said.contains(w)), "{token:?}: {e}");
    }
    let plain = reqwest::Client::new().post(format!("http://{}/mcp", fleet.addr)).body("{}").send().await.unwrap();
    assert_eq!(plain.status(), 401);

    // The 2025 handshake (`initialize`, a session), then the 2026-07-28 one (`server/discover`,
    // no session).
    let legacy = ().serve(http_transport(&fleet, Some(TOKEN))).await.unwrap();
    every_tool(&legacy, &fleet, "http-2025").await;
    legacy.cancel().await.unwrap();
    let discover = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let stateless = ().serve_with_lifecycle(http_transport(&fleet, Some(TOKEN)), discover).await.unwrap();
    let agreed = stateless.peer().peer_info().map(|i| i.protocol_version.to_string());
    assert_eq!(agreed.as_deref(), Some("2026-07-28"));
    every_tool(&stateless, &fleet, "http-2026").await;
    stateless.cancel().await.unwrap();
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_s_client_drives_mindfleet_mcp_over_stdio_against_a_running_fleet() {
    let (dir, src) = (tempfile::tempdir().unwrap(), two_files());
    let (fleet, _) = fleet_with_index(dir.path(), src.path()).await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"));
    cmd.args(["mcp", "--admin", &fleet.addr.to_string()]).env("MINDFLEET_ADMIN_TOKEN", TOKEN);
    let (child, _) = TokioChildProcess::builder(cmd).stderr(std::process::Stdio::inherit()).spawn().unwrap();
    let client = ().serve(child).await.unwrap();
    every_tool(&client, &fleet, "stdio").await;
    client.cancel().await.unwrap();

    // Without the token the server still starts, and each call says what the fleet answered.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"));
    cmd.args(["mcp", "--admin", &fleet.addr.to_string()]).env_remove("MINDFLEET_ADMIN_TOKEN");
    let (child, _) = TokioChildProcess::builder(cmd).stderr(std::process::Stdio::null()).spawn().unwrap();
    let client = ().serve(child).await.unwrap();
    let r = call(&client, "why", json!({ "event": "e-1" })).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("bearer token"), "{}", text(&r));
    client.cancel().await.unwrap();
    fleet.shutdown(DEADLINE).await;
}
