//! Introspection over the admin API (`GET /ai/...`) and the `mindfleet ai` command.

use std::process::Command;

use serde_json::{Value, json};

use crate::util::*;

async fn get(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_queries_answer_from_live_state_and_journals() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    let ack = fleet.inject(chat("general", "alice", "@reviewer please review the rust auth module")).await.unwrap();
    fleet.inject(chat("general", "bob", "lunch anyone?")).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);

    let (s, v) = get(&base, "/ai/state").await;
    assert_eq!(s, 200);
    assert_eq!(v["personas"].as_array().unwrap().len(), 3);

    let (_, v) = get(&base, "/ai/decisions?persona=reviewer&verdict=engage").await;
    let d = v["decisions"].as_array().unwrap();
    assert!(d.iter().any(|x| x["event_id"] == ack.event_id.as_str()), "{v}");
    assert!(d.iter().all(|x| x["verdict"] == "engage"));

    let (_, v) = get(&base, "/ai/plan?persona=reviewer").await;
    assert!(v["plan"]["event_id"].as_str().is_some(), "{v}");
    let (_, v) = get(&base, "/ai/plan-history?persona=reviewer&limit=5").await;
    assert!(!v["plans"].as_array().unwrap().is_empty());
    let (_, v) = get(&base, "/ai/learnings").await;
    assert!(v["learnings"].as_array().unwrap().iter().any(|l| l["persona"] == "reviewer"), "{v}");
    let (_, v) = get(&base, "/ai/thoughts?persona=reviewer&domain=chat").await;
    assert!(!v["thoughts"].as_array().unwrap().is_empty());

    let (s, v) = get(&base, "/ai/health").await;
    assert_eq!(s, 200);
    assert_eq!(v["personas"], 3);
    assert_eq!(v["dormant"], 1);
    assert!(["HEALTHY", "ASSIGN_WORK", "REDUCE_LOAD"].contains(&v["recommendation"].as_str().unwrap()));

    let (_, v) = get(&base, "/ai/select-for-task?domain=chat&priority=0.5").await;
    assert_eq!(v["ranking"].as_array().unwrap().len(), 3);

    // Bad questions get a clear 400 / 404.
    let (s, v) = get(&base, "/ai/decisions").await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("`persona`"), "{v}");
    assert_eq!(get(&base, "/ai/plan?persona=ghost").await.0, 404);
    assert_eq!(get(&base, "/ai/select-for-task?domain=chat&priority=3").await.0, 400);

    // A person makes the helper dormant: undirected chat is then ignored by it.
    let r = reqwest::Client::new()
        .post(format!("{base}/ai/state"))
        .json(&json!({"persona": "helper", "change": "dormant"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    poll("the helper dormant", || async {
        let d = dump(&fleet).await;
        persona(&d, "helper").self_state.as_ref().is_some_and(|s| s.dormant).then_some(())
    })
    .await;

    // The command line prints the same answers, as a table for people.
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["ai", "--admin", &fleet.addr.to_string(), "--format", "table", "select-for-task", "--domain", "chat"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("persona") && text.contains("suitability") && text.contains("reviewer"), "{text}");
    fleet.shutdown(DEADLINE).await;
}
