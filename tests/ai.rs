//! Introspection over the admin API (`GET /ai/...`) and the `mindfleet ai` command.

use std::process::Command;

use mindfleet::Fleet;
use mindfleet_core::event::EventInput;
use mindfleet_core::time::now_us;
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

    // A dormant persona is never picked, whatever its suitability: it is listed with why.
    let (_, v) = get(&base, "/ai/select-for-task?domain=docs&priority=0.5").await;
    let ranked: Vec<&str> = v["ranking"].as_array().unwrap().iter().map(|r| r["persona"].as_str().unwrap()).collect();
    assert_eq!(ranked.len(), 2, "{v}");
    assert!(!ranked.contains(&"scribe") && v["best"] != "scribe", "{v}");
    assert_eq!(v["unavailable"], json!([{"persona": "scribe", "reasons": ["dormant"]}]));

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
    // The helper, made dormant above, is now listed as unavailable, not ranked.
    let ranking = text.split("unavailable").next().unwrap();
    assert!(!ranking.contains("helper") && text.contains("dormant"), "{text}");
    fleet.shutdown(DEADLINE).await;
}

async fn post_state(base: &str, body: Value) {
    let r = reqwest::Client::new().post(format!("{base}/ai/state")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200, "{body}");
}

/// `mindfleet ai ARGS...` against `fleet`: (exit code, stdout, stderr).
fn cli(fleet: &Fleet, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["ai", "--admin", &fleet.addr.to_string()])
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn entry<'a>(v: &'a Value, list: &str, key: &str, name: &str) -> Option<&'a Value> {
    v[list].as_array()?.iter().find(|x| x[key] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_names_why_a_persona_cannot_take_work() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);

    // Once every persona is up, the two awake ones are free and the dormant one is not.
    let v = poll("helper and reviewer available", || async {
        let (_, v) = get(&base, "/ai/availability").await;
        (v["available"] == json!(["helper", "reviewer"])).then_some(v)
    })
    .await;
    let scribe = entry(&v, "personas", "persona", "scribe").unwrap();
    assert_eq!((scribe["available"].as_bool(), &scribe["reasons"]), (Some(false), &json!(["dormant"])), "{v}");
    assert_eq!(scribe["status"], "running");
    let helper = entry(&v, "personas", "persona", "helper").unwrap();
    assert!(helper["reasons"].as_array().unwrap().is_empty(), "{v}");
    assert!(helper["capacity"].as_f64().unwrap() >= 0.3 && helper["inbox"] == 0, "{v}");

    // Deep focus set by a person makes the helper unavailable, and says on what.
    post_state(
        &base,
        json!({"persona": "helper", "change": {"focus": {"objective": "release notes", "intensity": 0.9}}}),
    )
    .await;
    let v = poll("the helper deeply focused", || async {
        let (_, v) = get(&base, "/ai/availability?persona=helper").await;
        (v["personas"][0]["reasons"] == json!(["deeply_focused"])).then_some(v)
    })
    .await;
    assert_eq!(v["personas"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!((&v["available"], &v["personas"][0]["objective"]), (&json!([]), &json!("release notes")), "{v}");
    assert_eq!(get(&base, "/ai/availability?persona=ghost").await.0, 404);

    let (code, text, err) = cli(&fleet, &["--format", "table", "availability"]);
    assert_eq!(code, 0, "{err}");
    let scribe_row = text.lines().find(|l| l.starts_with("scribe")).unwrap_or_else(|| panic!("{text}"));
    assert!(scribe_row.contains("[dormant]") && scribe_row.contains("false"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("helper") && l.contains("[deeply_focused]")), "{text}");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activity_map_shows_who_is_in_which_room_doing_what() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    fleet.inject(chat("general", "alice", "@reviewer please review the rust auth module")).await.unwrap();
    // `dev` is in no persona's configuration: the helper is addressed there and answers.
    let directed = EventInput {
        persona: Some("helper".into()),
        ..chat("dev", "carol", "@helper can you write the docs for the deploy?")
    };
    fleet.inject(directed).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);

    let spoke = |v: &Value, room: &str, name: &str| {
        entry(v, "rooms", "room", room)
            .and_then(|r| entry(r, "personas", "persona", name))
            .is_some_and(|p| p["last_spoke_us"].is_i64())
    };
    let v = poll("the reviewer's reply in general and the helper's in dev", || async {
        let (_, v) = get(&base, "/ai/activity-map").await;
        (spoke(&v, "general", "reviewer") && spoke(&v, "dev", "helper")).then_some(v)
    })
    .await;
    let general = entry(&v, "rooms", "room", "general").unwrap();
    let names: Vec<&str> =
        general["personas"].as_array().unwrap().iter().map(|p| p["persona"].as_str().unwrap()).collect();
    assert_eq!(names, ["helper", "reviewer", "scribe"], "{v}");
    let reviewer = entry(general, "personas", "persona", "reviewer").unwrap();
    let ago = reviewer["last_spoke_secs_ago"].as_f64().unwrap();
    assert!((0.0..60.0).contains(&ago), "{v}");
    assert!(reviewer["activity"].is_string() && reviewer.get("in_flight").is_some(), "{v}");
    assert_eq!(entry(general, "personas", "persona", "scribe").unwrap()["dormant"], true);
    // The scribe never spoke in general; nobody but the helper is in dev.
    assert!(entry(general, "personas", "persona", "scribe").unwrap()["last_spoke_us"].is_null(), "{v}");
    assert_eq!(entry(&v, "rooms", "room", "dev").unwrap()["personas"].as_array().unwrap().len(), 1, "{v}");

    // Focus shows up by domain, and idle and dormant personas are counted apart.
    post_state(&base, json!({"persona": "reviewer", "change": {"focus": {"objective": "audit", "intensity": 0.8}}}))
        .await;
    let v = poll("the reviewer focused", || async {
        let (_, v) = get(&base, "/ai/activity-map").await;
        let r = entry(&v, "rooms", "room", "general").and_then(|g| entry(g, "personas", "persona", "reviewer"))?;
        (r["objective"] == "audit").then_some(v.clone())
    })
    .await;
    let domains = v["domains"].as_array().unwrap();
    let d = domains.iter().find(|d| d["personas"].as_array().unwrap().contains(&json!("reviewer"))).unwrap();
    assert_eq!(d["focused"].as_u64().unwrap() as usize, d["personas"].as_array().unwrap().len(), "{v}");
    let focused: u64 = domains.iter().map(|d| d["focused"].as_u64().unwrap()).sum();
    assert_eq!(focused + v["idle"].as_u64().unwrap() + v["dormant"].as_u64().unwrap(), 3, "{v}");

    let (code, text, err) = cli(&fleet, &["--format", "table", "activity-map"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.lines().any(|l| l.starts_with("room") && l.contains("persona")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("dev") && l.contains("helper")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("general") && l.contains("reviewer") && l.contains("audit")), "{text}");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_keeps_only_recent_thoughts_and_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    let old = fleet.inject(chat("general", "alice", "@reviewer please review the rust auth module")).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);
    let handled = now_us();
    let has_old =
        |v: &Value, list: &str| v[list].as_array().unwrap().iter().any(|x| x["event_id"] == old.event_id.as_str());

    let (s, v) = get(&base, "/ai/thoughts?persona=reviewer&since=1h").await;
    assert_eq!(s, 200, "{v}");
    assert!(has_old(&v, "thoughts") && v["since_us"].as_i64().unwrap() < handled, "{v}");
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer&since=1h").await;
    assert!(has_old(&v, "decisions"), "{v}");

    // Once more than a second has passed, a one-second window leaves the old event out.
    poll("a second to pass", || async { (now_us() - handled > 1_100_000).then_some(()) }).await;
    let (_, v) = get(&base, "/ai/thoughts?persona=reviewer&since=1s").await;
    assert!(!has_old(&v, "thoughts"), "{v}");
    assert!(v["thoughts"].as_array().unwrap().iter().all(|e| e["created_us"].as_i64().unwrap() > handled), "{v}");
    assert!(v["recent_thoughts"].as_array().unwrap().iter().all(|t| t["at_us"].as_i64().unwrap() > handled), "{v}");
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer&since=1s").await;
    assert!(!has_old(&v, "decisions"), "{v}");
    // Without a window, nothing is left out.
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer").await;
    assert!(has_old(&v, "decisions") && v["since_us"].is_null(), "{v}");

    // A bad window is refused with its value named, by the API and the command line.
    for (path, bad) in [("thoughts", "1x"), ("decisions", "2w")] {
        let (s, v) = get(&base, &format!("/ai/{path}?persona=reviewer&since={bad}")).await;
        assert_eq!(s, 400, "{v}");
        assert_eq!(v["error"], format!("since: {bad:?}: expected a number followed by s, m, h or d"), "{v}");
    }
    let (code, _, err) = cli(&fleet, &["thoughts", "--persona", "reviewer", "--since", "1x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(r#"since: "1x""#), "{err}");
    let (code, text, err) = cli(&fleet, &["decisions", "--persona", "reviewer", "--since", "1h"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains(old.event_id.as_str()), "{text}");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_breaks_model_calls_down_by_persona_room_and_purpose() {
    use mindfleet_core::sched::{Class, Owner, Slot, Task};
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    // The rules brain makes no model calls: the ledger starts empty.
    let (s, v) = get(&base, "/ai/cost").await;
    assert_eq!((s, v["inferences"].as_u64(), v["since_secs"].as_f64()), (200, Some(0), Some(3600.0)), "{v}");
    // Model calls through the fleet's scheduler, as a model brain makes them: each reserves
    // its max_tokens at grant and settles to what it used at done.
    let (tx, rx) = crossbeam_channel::unbounded();
    let call = |persona: &str, room: &str, label: &'static str, max_tokens: u32| {
        let t = Task::new(persona.into(), Class::Work, 0.5, Slot::Inference, label, Owner::Channel(tx.clone()))
            .with_max_tokens(max_tokens)
            .in_room(room);
        fleet.scheduler.submit(t);
        rx.recv_timeout(DEADLINE).expect("granted").task
    };
    for (persona, room, label, max, used) in [
        ("helper", "general", "draft_reply", 400, 250),
        ("helper", "general", "gate", 50, 20),
        ("reviewer", "code-review", "draft_reply", 400, 300),
    ] {
        let id = call(persona, room, label, max);
        fleet.scheduler.done_with_tokens(id, used);
    }
    let running = call("reviewer", "general", "evaluate", 100);
    let (_, v) = get(&base, "/ai/cost?since=15m").await;
    assert_eq!((v["inferences"].as_u64(), v["tokens"].as_u64()), (Some(4), Some(670)), "{v}");
    assert_eq!(v["tokens_reserved"], 100, "the running call holds its reservation");
    let rows = |k: &str| -> Vec<(String, u64)> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|r| (r["key"].as_str().unwrap().to_string(), r["tokens"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(rows("by_persona"), [("reviewer".to_string(), 400), ("helper".to_string(), 270)]);
    assert_eq!(rows("by_room"), [("general".to_string(), 370), ("code-review".to_string(), 300)]);
    assert_eq!(rows("by_purpose")[0], ("draft_reply".to_string(), 550));
    assert!(v["latency_p99_ms"].as_f64().unwrap() >= v["latency_p50_ms"].as_f64().unwrap());
    fleet.scheduler.done_with_tokens(running, 80);
    // Over time: each persona's tokens in equal slices of the window, the newest last.
    let (s, v) = get(&base, "/ai/cost?since=15m&buckets=3").await;
    assert_eq!((s, v["bucket_secs"].as_f64()), (200, Some(300.0)), "{v}");
    assert_eq!(v["timeline"][0], json!({"key": "reviewer", "tokens": [0, 0, 380]}), "{v}");
    assert_eq!(v["timeline"][1], json!({"key": "helper", "tokens": [0, 0, 270]}), "{v}");
    let (s, v) = get(&base, "/ai/cost?since=1x").await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = get(&base, "/ai/cost?buckets=0").await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("`buckets` must be within 1..=120"), "{v}");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_answers_for_any_event_of_a_burst_beyond_the_dump_with_every_persona_s_decision_and_the_reply() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    // 80 messages, each decided by the three personas in the room: 240 decisions, of which the
    // dump shows each persona's last 50.
    let mut ids = Vec::new();
    for i in 0..80 {
        let text =
            if i == 0 { "@reviewer please review the rust auth module".to_string() } else { format!("note {i}") };
        ids.push(fleet.inject(chat("general", "alice", &text)).await.unwrap().event_id);
    }
    assert!(fleet.wait_idle(DEADLINE).await);
    let d = dump(&fleet).await;
    assert!(
        d.personas.iter().all(|p| p.decisions.iter().all(|x| x.event_id != ids[0])),
        "the first event is beyond what the dump shows"
    );

    let (s, v) = get(&base, &format!("/ai/why?event={}", ids[0])).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["event_id"], ids[0].as_str());
    let decisions = v["decisions"].as_array().unwrap();
    let mut who: Vec<&str> = decisions.iter().map(|x| x["persona"].as_str().unwrap()).collect();
    who.sort();
    assert_eq!(who, ["helper", "reviewer", "scribe"], "every persona's decision, once: {v}");
    let of = |name: &str| decisions.iter().find(|x| x["persona"] == name).unwrap();
    assert_eq!(
        (of("reviewer")["verdict"].as_str(), of("reviewer")["by"].as_str()),
        (Some("engage"), Some("fast_path/mention"))
    );
    assert_eq!(of("scribe")["verdict"], "ignore", "{v}");
    assert!(decisions.iter().all(|x| !x["reason"].as_str().unwrap().is_empty() && x["at"].is_string()), "{v}");
    let replies = v["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 1, "{v}");
    assert_eq!(replies[0]["persona"], "reviewer", "{v}");

    // The journal, not the dump: a decision on every message of the burst (and on the replies
    // of the others), newest first.
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer").await;
    let journal = v["decisions"].as_array().unwrap();
    assert!(ids.iter().all(|id| journal.iter().any(|d| d["event_id"] == id.as_str())), "{} decisions", journal.len());
    assert!(journal.windows(2).all(|w| w[0]["at_us"].as_i64() >= w[1]["at_us"].as_i64()), "newest first");
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer&verdict=engage").await;
    assert!(v["decisions"].as_array().unwrap().iter().any(|d| d["event_id"] == ids[0].as_str()), "{v}");
    // By room: an event addressed to the reviewer in another room is the only decision there.
    let mut directed = chat("ops", "alice", "a note for the ops room");
    directed.persona = Some("reviewer".into());
    let other = fleet.inject(directed).await.unwrap().event_id;
    assert!(fleet.wait_idle(DEADLINE).await);
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer&room=ops").await;
    let in_ops: Vec<&str> =
        v["decisions"].as_array().unwrap().iter().map(|d| d["event_id"].as_str().unwrap()).collect();
    assert_eq!(in_ops, [other.as_str()], "{v}");
    let (_, v) = get(&base, "/ai/decisions?persona=reviewer&room=general").await;
    let in_general = v["decisions"].as_array().unwrap();
    assert!(in_general.iter().all(|d| d["room"] == "general" && d["event_id"] != other.as_str()), "{v}");
    assert!(in_general.iter().any(|d| d["event_id"] == ids[0].as_str()), "{v}");

    // The same from the command line; an id nobody decided has no decisions; a bad one is named.
    let (code, out, err) = cli(&fleet, &["why", "--event", &ids[0]]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["decisions"].as_array().unwrap().len(), 3, "{out}");
    let (s, v) = get(&base, "/ai/why?event=no-such-event").await;
    assert_eq!((s, v["decisions"].as_array().map(Vec::len)), (200, Some(0)), "{v}");
    let (s, v) = get(&base, &format!("/ai/why?event={}", "x".repeat(129))).await;
    assert_eq!(s, 400, "{v}");
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_s_history_is_what_was_said_there_oldest_first_paged_either_way_with_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    // Said in the order 2, 0, 1 by their own times: history is by when it was said.
    for (i, minute) in [(2, 12), (0, 10), (1, 11)] {
        let ts = format!("2026-01-05T09:{minute}:00Z");
        let text = format!("@reviewer note {i}");
        fleet.inject(EventInput { ts: Some(ts), ..chat("general", "alice", &text) }).await.unwrap();
    }
    let aside = EventInput { persona: Some("helper".into()), ..chat("elsewhere", "bob", "not in general") };
    fleet.inject(aside).await.unwrap();
    assert!(fleet.wait_idle(DEADLINE).await);
    let v = poll("the three notes and the replies in history", || async {
        let (_, v) = get(&base, "/ai/history?room=general").await;
        (v["messages"].as_array()?.len() >= 6).then_some(v)
    })
    .await;
    let messages = v["messages"].as_array().unwrap();
    let notes: Vec<&str> =
        messages.iter().filter(|m| m["from"] == "alice").map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(notes, ["@reviewer note 0", "@reviewer note 1", "@reviewer note 2"], "{v}");
    assert_eq!(messages.iter().filter(|m| m["from"] == "reviewer").count(), 3, "its replies too, each once: {v}");
    assert!(messages.iter().all(|m| !m["text"].as_str().unwrap().contains("not in general")), "{v}");
    assert!(messages.windows(2).all(|w| w[0]["at"].as_str() <= w[1]["at"].as_str()), "{v}");

    // Under a cursor, two at a time: forward to the end, then back.
    let (_, first) = get(&base, "/ai/history?room=general&page_size=2").await;
    assert_eq!(
        (first["room"].as_str(), first["total_count"].as_u64()),
        (Some("general"), Some(messages.len() as u64)),
        "{first}"
    );
    assert_eq!(first["entries"].as_array().unwrap()[..], messages[..2]);
    let handle = first["handle"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let fetch = |body: Value| {
        let http = http.clone();
        let url = format!("{base}/rag/fetch");
        async move { http.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let second = fetch(json!({ "handle": handle })).await;
    assert_eq!(second["entries"].as_array().unwrap()[..], messages[2..4], "{second}");
    let back = fetch(json!({ "handle": handle, "direction": "backward" })).await;
    assert_eq!(back["entries"].as_array().unwrap()[..], messages[..2], "{back}");
    assert_eq!(back["has_previous"], false, "{back}");
    // The reviewer's plans (one per note) under the same cursor.
    let (_, plans) = get(&base, "/ai/plan-history?persona=reviewer&limit=1000&page_size=2").await;
    assert_eq!((plans["persona"].as_str(), plans["total_count"].as_u64()), (Some("reviewer"), Some(3)), "{plans}");
    assert_eq!(plans["entries"].as_array().unwrap().len(), 2, "{plans}");
    let (code, out, err) = cli(&fleet, &["history", "--room", "general", "--since", "1h"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["messages"].as_array().unwrap().iter().all(|m| m["from"] != "alice"),
        "the notes were said in January: {v}"
    );
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}
