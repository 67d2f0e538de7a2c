//! Tool servers in a fleet (issue 53): the fleet connects to a real MCP server
//! (server-everything, installed by scripts/install-tool-servers.sh), lists and pins its tools,
//! calls one for a persona whose allowlist has it and refuses the others, disables a tool whose
//! description changed until a person approves it, and connects again to a server that died;
//! `mindfleet bench tools` measures calls on it and prints every figure.

use std::path::Path;
use std::time::Duration;

use mindfleet_core::record::ErrorClass;
use mindfleet_core::tools::{ToolAnswer, ToolCall, ToolFailure, ToolResult, ToolsDump, ToolsMsg};
use mindfleet_tools::installed;
use ractor::call_t;
use serde_json::{Value, json};

use crate::util::{fleet_toml, metric, poll, start};

fn everything() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-tool-servers.sh");
    installed::server(installed::EVERYTHING, &script).unwrap_or_else(|why| panic!("{why}")).display().to_string()
}

fn fleet_file(program: &str) -> String {
    fleet_toml(&format!(
        r#"
[[tool_server]]
name = "everything"
command = "{program}"
env = ["PATH"]
timeout_secs = 20
approval = "never"

[[persona]]
name = "helper"
role = "assistant"
tools = ["everything.echo"]

[[persona]]
name = "reviewer"
role = "code reviewer"
"#
    ))
}

/// `mindfleet tools ARGS...` against `fleet`: (exit code, stdout, stderr).
fn cli(fleet: &mindfleet::Fleet, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["tools", "--admin", &fleet.addr.to_string()])
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

async fn tools(fleet: &mindfleet::Fleet) -> ToolsDump {
    let host = fleet.tools.as_ref().expect("a tool host");
    call_t!(host, ToolsMsg::Dump, 10_000).expect("the tool host answers")
}

/// The dump once the server is ready, with `restarts` restarts.
async fn ready(fleet: &mindfleet::Fleet, restarts: u32) -> ToolsDump {
    poll(&format!("the tool server ready after {restarts} restarts"), || async {
        let d = tools(fleet).await;
        (d.servers[0].state == "ready" && d.servers[0].restarts == restarts).then_some(d)
    })
    .await
}

async fn call(
    fleet: &mindfleet::Fleet,
    persona: &str,
    tool: &str,
    arguments: Value,
) -> Result<ToolResult, ToolFailure> {
    let host = fleet.tools.as_ref().expect("a tool host");
    let id = format!("test-{}", arguments);
    let c = ToolCall {
        persona: persona.into(),
        tool: tool.into(),
        arguments,
        timeout_ms: 20_000,
        id,
        event_id: "e1".into(),
        room: "general".into(),
        why: "a test".into(),
    };
    match call_t!(host, ToolsMsg::Call, 30_000, Box::new(c)).expect("the tool host answers") {
        ToolAnswer::Ran { result, .. } => result,
        parked => panic!("no call of this fleet waits for approval: {parked:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_lists_pins_and_calls_a_servers_tools_for_the_personas_allowed_and_reconnects_when_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let program = everything();
    let fleet = start(dir.path(), &fleet_file(&program)).await;

    let d = ready(&fleet, 0).await;
    let s = &d.servers[0];
    assert_eq!((s.name.as_str(), s.transport.as_str()), ("everything", "stdio"));
    let echo = s.tools.iter().find(|t| t.name == "everything.echo").expect("echo is listed");
    assert_eq!(echo.disabled, None, "a server seen first is pinned as it is");
    assert!(s.tools.len() > 3, "every tool of the server is listed: {:?}", s.tools);
    // The same, through the API and in the dump.
    let api: ToolsDump = reqwest::get(format!("http://{}/tools", fleet.addr)).await.unwrap().json().await.unwrap();
    assert_eq!(api.servers[0].tools.len(), s.tools.len());
    assert_eq!(fleet.dump(None).await.unwrap().tools.servers[0].name, "everything");

    let r = call(&fleet, "helper", "everything.echo", json!({"message": "hello tools"})).await.expect("echo runs");
    assert!(r.text.contains("hello tools"), "{r:?}");
    let refused = call(&fleet, "reviewer", "everything.echo", json!({"message": "x"})).await.unwrap_err();
    assert_eq!(refused.class, ErrorClass::AccessDenied, "not in the reviewer's allowlist: {refused:?}");
    let refused = call(&fleet, "helper", "everything.get-sum", json!({"a": 1, "b": 2})).await.unwrap_err();
    assert_eq!(refused.class, ErrorClass::AccessDenied, "only echo is allowed: {refused:?}");
    let bad = call(&fleet, "helper", "everything.echo", json!({"text": "no message"})).await.unwrap_err();
    assert!(bad.message.contains("message"), "the schema's refusal names the field: {bad:?}");
    assert_eq!(tools(&fleet).await.servers[0].calls, 2, "two calls were admitted");
    let body = reqwest::get(format!("http://{}/metrics", fleet.addr)).await.unwrap().text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let echo = Some(("tool", "everything.echo"));
    assert_eq!(metric(&scrape, "mindfleet_tool_calls_total", echo), Some(2.0), "{body}");
    assert_eq!(metric(&scrape, "mindfleet_tool_failures_total", echo), Some(1.0), "the refused arguments");
    assert!(body.contains(r#"mindfleet_tool_failures_total{tool="everything.echo",class="unknown"} 1"#), "{body}");
    assert!(metric(&scrape, "mindfleet_tool_latency_ms", echo).is_some(), "{body}");

    // The server dies: the fleet notices and connects again.
    let pid = tools(&fleet).await.servers[0].pid.expect("a running child");
    // SAFETY: kill(2) on the server's own process.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    ready(&fleet, 1).await;
    let r = call(&fleet, "helper", "everything.echo", json!({"message": "back"})).await.expect("echo after a restart");
    assert!(r.text.contains("back"));
    assert_eq!(tools(&fleet).await.servers[0].restarts, 1, "lost once, connected again once");
    fleet.shutdown(Duration::from_secs(5)).await;

    // A changed description (here: the pin altered, as if the server had changed) disables the
    // tool at the next start until a person approves it.
    let pins_file = dir.path().join("tools").join("pins.json");
    let mut pins: Value = serde_json::from_str(&std::fs::read_to_string(&pins_file).unwrap()).unwrap();
    pins["everything"]["echo"] = json!("0000");
    std::fs::write(&pins_file, pins.to_string()).unwrap();
    let fleet = start(dir.path(), &fleet_file(&program)).await;
    let d = ready(&fleet, 0).await;
    let echo = d.servers[0].tools.iter().find(|t| t.name == "everything.echo").unwrap();
    assert!(echo.disabled.as_deref().is_some_and(|w| w.contains("mindfleet tools approve everything")), "{echo:?}");
    let refused = call(&fleet, "helper", "everything.echo", json!({"message": "x"})).await.unwrap_err();
    assert_eq!(refused.class, ErrorClass::AccessDenied);
    assert!(refused.message.contains("disabled"), "{refused:?}");
    let page = reqwest::get(format!("http://{}/", fleet.addr)).await.unwrap().text().await.unwrap();
    assert!(
        page.contains(r#"<li data-tool="everything.echo" data-enabled="false">"#),
        "the dashboard shows it: {page}"
    );
    let (code, out, _) = cli(&fleet, &["list"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.contains("everything.echo") && l.contains("DISABLED")), "{out}");
    let (code, out, _) = cli(&fleet, &["approve", "everything"]);
    assert_eq!((code, out.trim()), (0, "pinned; enabled again: everything.echo"));
    call(&fleet, "helper", "everything.echo", json!({"message": "approved"})).await.expect("echo once approved");
    let page = reqwest::get(format!("http://{}/", fleet.addr)).await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<li data-tool="everything.echo" data-enabled="true">"#), "{page}");
    let (code, _, err) = cli(&fleet, &["approve", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("no tool server \"nope\" (known: everything)"), "{err}");
    fleet.shutdown(Duration::from_secs(5)).await;
}

#[test]
fn bench_tools_prints_calls_overhead_approvals_and_parked_figures() {
    everything();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["bench", "tools", "--events", "8", "--calls", "40", "--approvals", "2", "--rounds", "2", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["bench"], "tools");
    let t = &v["throughput"];
    assert_eq!((t["events"].as_u64(), t["calls"].as_u64()), (Some(8), Some(8)), "one echo call per mention: {v}");
    assert!(t["calls_per_s"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    assert_eq!(t["one_at_a_time"]["events"].as_u64(), Some(2), "{v}");
    let o = &v["overhead"];
    assert_eq!(o["calls_each"].as_u64(), Some(40), "two calls a round on each path, twenty rounds: {v}");
    assert!(o["host_p50_ms"].as_f64().is_some_and(|x| x > 0.0) && o["bare_p50_ms"].as_f64().is_some(), "{v}");
    assert!(o["ratio_p50"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    assert_eq!(v["approval"]["rounds"].as_u64(), Some(2), "{v}");
    assert!(v["approval"]["approved_to_reply_p50_ms"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    let p = &v["parked"];
    assert_eq!(p["events_each"].as_u64(), Some(10), "ten counted mentions in the round of each kind: {v}");
    assert!(p["decision_p50_parked_over_none"].as_f64().is_some_and(|x| x > 0.0), "{v}");
}

pub mod acting;
