//! The admin API over real HTTP on loopback.

use serde_json::{Value, json};

use crate::util::*;

async fn post(url: &str, body: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_get_a_status_and_a_message_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let url = format!("http://{}/events", fleet.addr);

    let (s, b) = post(&url, "{not json").await;
    assert_eq!(s, 400, "{b}");
    assert!(b["error"].as_str().unwrap().contains("invalid event JSON"), "{b}");

    let (s, b) = post(&url, r#"{"domain":"chat","room":"general","from":"a"}"#).await;
    assert_eq!(s, 400);
    assert!(b["error"].as_str().unwrap().contains("missing field `text`"), "{b}");

    let (s, b) = post(&url, r#"{"domain":"chat","room":"general","from":"a","text":"x","priority":1.5}"#).await;
    assert_eq!((s, b["field"].as_str()), (400, Some("priority")), "{b}");

    let (s, b) = post(&url, r#"{"domain":"chat","room":"general","from":"a","text":"x","colour":"red"}"#).await;
    assert_eq!(s, 400);
    assert!(b["error"].as_str().unwrap().contains("colour"), "{b}");

    let (s, b) = post(&url, r#"{"domain":"chat","room":"nowhere","from":"a","text":"x"}"#).await;
    assert_eq!(s, 404);
    assert!(b["error"].as_str().unwrap().contains("\"nowhere\""), "{b}");

    let (s, b) = post(&url, r#"{"domain":"chat","room":"general","from":"a","text":"x","persona":"ghost"}"#).await;
    assert_eq!(s, 404);
    assert!(b["error"].as_str().unwrap().contains("\"ghost\""), "{b}");

    let big = json!({"domain":"chat","room":"general","from":"a","text":"x".repeat(70 * 1024)}).to_string();
    let (s, b) = post(&url, &big).await;
    assert_eq!(s, 413, "{b}");

    // The fleet keeps running: a good event still goes through.
    let (s, b) = post(&url, r#"{"id":"ok-1","domain":"chat","room":"general","from":"a","text":"@helper hi"}"#).await;
    assert_eq!((s, b["event_id"].as_str(), b["accepted"].as_bool()), (200, Some("ok-1"), Some(true)), "{b}");
    let (s, b) = post(&url, r#"{"id":"ok-1","domain":"chat","room":"general","from":"a","text":"@helper hi"}"#).await;
    assert_eq!((s, b["duplicate"].as_bool()), (200, Some(true)), "{b}");
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_dump_and_persona_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::new();
    assert_eq!(http.get(format!("{base}/health")).send().await.unwrap().status(), 200);
    let d: Value = http.get(format!("{base}/dump")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> = d["personas"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["helper", "reviewer", "scribe"]);
    for p in d["personas"].as_array().unwrap() {
        for child in ["inbox", "self_state", "working_memory"] {
            assert_eq!(p["actors"][child]["status"], "running", "{child} of {}", p["name"]);
            assert_eq!(p["actors"][child]["restarts"], 0);
        }
        for key in [
            "focus",
            "preoccupations",
            "recent_thoughts",
            "recent_decisions",
            "cognitive_load",
            "available_capacity",
            "mood",
            "energy",
        ] {
            assert!(p["self_state"].get(key).is_some(), "self_state.{key}");
        }
        assert!(p["inbox"].get("shed").is_some() && p["inbox"].get("duplicates").is_some());
        assert!(p["working_memory"].get("per_domain").is_some());
    }
    assert!(d["scheduler"].get("urgent").is_some() && d["outbox"].is_array());
    let p: Value = http.get(format!("{base}/personas/scribe")).send().await.unwrap().json().await.unwrap();
    assert_eq!(p["self_state"]["dormant"], true);
    assert_eq!(http.get(format!("{base}/personas/ghost")).send().await.unwrap().status(), 404);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_host_or_origin_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::new();
    let r = http.get(format!("{base}/dump")).header("host", "evil.example").send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .post(format!("{base}/events"))
        .header("origin", "http://evil.example")
        .json(&json!({"domain":"chat","room":"general","from":"a","text":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http.get(format!("{base}/dump")).header("origin", format!("http://{}", fleet.addr)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(TRIO));
    cfg.admin.token = Some("s3cret".into());
    let fleet = mindfleet::Fleet::start(cfg).await.unwrap();
    let base = format!("http://{}", fleet.addr);
    let http = reqwest::Client::new();
    assert_eq!(http.get(format!("{base}/dump")).send().await.unwrap().status(), 401);
    assert_eq!(http.get(format!("{base}/dump")).bearer_auth("wrong").send().await.unwrap().status(), 401);
    assert_eq!(http.get(format!("{base}/dump")).bearer_auth("s3cret").send().await.unwrap().status(), 200);
    // Metrics too: a scraper sends the token.
    assert_eq!(http.get(format!("{base}/metrics")).send().await.unwrap().status(), 401);
    assert_eq!(http.get(format!("{base}/metrics")).bearer_auth("s3cret").send().await.unwrap().status(), 200);
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_in_the_prometheus_format_and_count_what_the_fleet_did() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    for text in ["@reviewer please review the rust auth module", "lunch anyone?", "the build is green"] {
        fleet.inject(chat("general", "alice", text)).await.unwrap();
    }
    let (status, _) = post(&format!("http://{}/events", fleet.addr), r#"{"domain": "chat"}"#).await;
    assert_eq!(status, 400);
    assert!(fleet.wait_idle(DEADLINE).await);
    let r = reqwest::get(format!("http://{}/metrics", fleet.addr)).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let body = r.text().await.unwrap();
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    assert!(scrape.samples.iter().all(|s| s.metric.starts_with("mindfleet_")), "{body}");
    let value = |name: &str, label: Option<(&str, &str)>| {
        metric(&scrape, name, label).unwrap_or_else(|| panic!("no value of {name} {label:?} in {body}"))
    };
    // Three human messages and the replies the personas posted, each an accepted event.
    assert!(value("mindfleet_events_accepted_total", None) >= 3.0, "{body}");
    assert_eq!(value("mindfleet_events_refused_total", None), 1.0, "the one without a room: {body}");
    for p in ["helper", "reviewer", "scribe"] {
        assert_eq!(value("mindfleet_inbox_depth", Some(("persona", p))), 0.0, "idle: {body}");
    }
    assert_eq!(value("mindfleet_scheduler_queued", Some(("class", "urgent"))), 0.0, "{body}");
    assert!(value("mindfleet_scheduler_granted_total", Some(("class", "interactive"))) >= 1.0, "{body}");
    assert!(value("mindfleet_storage_commits_total", None) >= 1.0, "{body}");
    // The mention was engaged by the one it names; the dormant scribe ignored all three.
    assert!(value("mindfleet_decisions_total", Some(("verdict", "engage"))) >= 1.0, "{body}");
    assert!(value("mindfleet_decisions_total", Some(("verdict", "ignore"))) >= 3.0, "{body}");
    // Latencies as histograms of every decision and commit: cumulative buckets in seconds, the
    // last (+Inf) holding them all.
    let decisions: f64 =
        ["engage", "ignore"].iter().map(|v| value("mindfleet_decisions_total", Some(("verdict", v)))).sum();
    for (metric, at_least) in
        [("mindfleet_decision_latency_seconds", decisions), ("mindfleet_storage_commit_latency_seconds", 1.0)]
    {
        let buckets = scrape
            .samples
            .iter()
            .find_map(|s| match &s.value {
                prometheus_parse::Value::Histogram(h) if s.metric == metric => Some(h.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no histogram {metric} in {body}"));
        assert!(buckets.windows(2).all(|w| w[0].less_than < w[1].less_than && w[0].count <= w[1].count), "{body}");
        let all = buckets.last().unwrap();
        assert!(all.less_than.is_infinite() && all.count >= at_least, "{metric}: {buckets:?}");
    }
    fleet.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_admin_without_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &fleet_toml(TRIO));
    cfg.admin.addr = "0.0.0.0:0".parse().unwrap();
    let err = mindfleet::Fleet::start(cfg).await.err().expect("refused");
    assert!(err.to_string().contains("token"), "{err}");
}

/// Reads Server-Sent Events from `resp` until `n` have come: each event's `id` and `data`.
async fn sse_events(resp: &mut reqwest::Response, n: usize) -> Vec<(u64, Value)> {
    let (mut out, mut buf, mut id, mut data) = (Vec::new(), String::new(), 0u64, String::new());
    while out.len() < n {
        let chunk = tokio::time::timeout(DEADLINE, resp.chunk()).await.expect("an event in time").unwrap().unwrap();
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find('\n') {
            let line: String = buf.drain(..=end).collect();
            let line = line.trim_end();
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().unwrap();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            } else if line.is_empty() && !data.is_empty() {
                out.push((id, serde_json::from_str(&std::mem::take(&mut data)).unwrap()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_pages_by_sequence_number_and_streams_resumably_and_tail_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = start(dir.path(), &fleet_toml(TRIO)).await;
    let base = format!("http://{}", fleet.addr);
    let mut asked = Vec::new();
    for i in 0..5 {
        asked.push(
            fleet.inject(chat("general", "alice", &format!("@reviewer look at change {i}"))).await.unwrap().event_id,
        );
    }
    assert!(fleet.wait_idle(DEADLINE).await);
    let page = |q: String| {
        let url = format!("{base}/outbox?{q}");
        async move { reqwest::get(url).await.unwrap().json::<Value>().await.unwrap() }
    };
    let all = page("after=0&limit=1000".into()).await;
    let all = all["entries"].as_array().unwrap().clone();
    let to_asked: Vec<&Value> = all.iter().filter(|e| asked.iter().any(|a| e["in_reply_to"] == a.as_str())).collect();
    assert_eq!(to_asked.len(), 5, "one reply to each mention: {all:?}");
    assert!(to_asked.iter().all(|e| e["persona"] == "reviewer" && e["kind"] == "reply" && e["at"].is_string()));
    assert!(all.windows(2).all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()), "by sequence number");

    // Two at a time, from the start to the end: the same entries.
    let (mut paged, mut after) = (Vec::new(), 0);
    loop {
        let p = page(format!("after={after}&limit=2")).await;
        let got = p["entries"].as_array().unwrap();
        if got.is_empty() {
            assert_eq!(p["next"], after, "nothing after the end: next stays");
            break;
        }
        assert!(got.len() <= 2);
        paged.extend(got.iter().cloned());
        after = p["next"].as_u64().unwrap();
    }
    assert_eq!(paged, all);
    let only = page("after=0&persona=reviewer".into()).await;
    assert!(only["entries"].as_array().unwrap().iter().all(|e| e["persona"] == "reviewer"), "{only}");
    let r = reqwest::get(format!("{base}/outbox?after=x")).await.unwrap();
    assert_eq!(r.status(), 400);

    // The stream from the start; cut after two, resumed with Last-Event-ID.
    let http = reqwest::Client::new();
    let mut s = http.get(format!("{base}/outbox/stream?after=0")).send().await.unwrap();
    let first = sse_events(&mut s, 2).await;
    drop(s);
    assert_eq!(first.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), all[..2].to_vec());
    let mut s =
        http.get(format!("{base}/outbox/stream")).header("Last-Event-ID", first[1].0.to_string()).send().await.unwrap();
    let rest = sse_events(&mut s, all.len() - 2).await;
    assert_eq!(rest.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), all[2..].to_vec(), "resumed after the last id");
    // A reply posted now comes down the open stream.
    let late = fleet.inject(chat("general", "alice", "@reviewer one more")).await.unwrap().event_id;
    let next = sse_events(&mut s, 1).await;
    assert_eq!(next[0].1["in_reply_to"], late.as_str(), "{next:?}");
    drop(s);

    // `mindfleet tail` follows the same stream.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["tail", "--admin", &fleet.addr.to_string(), "--after", "0", "--persona", "reviewer", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let lines: Vec<Value> =
        (0..6).map(|_| serde_json::from_str(&rx.recv_timeout(DEADLINE).expect("a line from tail")).unwrap()).collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(lines.iter().all(|l| l["persona"] == "reviewer"), "{lines:?}");
    assert_eq!(lines[5]["in_reply_to"], late.as_str(), "{lines:?}");
    fleet.shutdown(DEADLINE).await;
}
