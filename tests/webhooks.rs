//! Webhooks end to end, with the real binary and a real HTTP receiver (axum, in the test) that
//! checks each signature itself: failures retried with the same delivery, a receiver down and
//! the fleet killed with `kill -9` losing nothing, dead letters sent again on request.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::util::*;

const SECRET_ENV: &str = "MINDFLEET_TEST_WEBHOOK_SECRET";
const SECRET: &str = "a shared secret for the test receiver";

/// One POST the receiver got.
#[derive(Clone, Debug)]
struct Got {
    delivery: String,
    /// The signature matched the body under the shared secret.
    signed: bool,
    body: Value,
    /// What the receiver answered.
    status: u16,
}

/// A webhook receiver: answers 500 to the next `fail_next` requests, then 200.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    fail_next: Arc<AtomicU32>,
}

impl Receiver {
    /// Serves on `listener` until the test ends.
    fn serve(listener: tokio::net::TcpListener) -> Receiver {
        let r = Receiver::default();
        let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        r
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    /// The deliveries acknowledged, by id, each with its body.
    fn acked(&self) -> BTreeMap<String, Value> {
        self.got().into_iter().filter(|g| g.status == 200).map(|g| (g.delivery, g.body)).collect()
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let fail = r.fail_next.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    let status = if fail { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK };
    r.got.lock().unwrap().push(Got {
        delivery: header("x-mindfleet-delivery"),
        signed: verify(&header("x-mindfleet-signature"), &body),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        status: status.as_u16(),
    });
    status
}

/// Checks `sha256=<hex>` against the HMAC-SHA256 of `body`, as a receiver would.
fn verify(signature: &str, body: &[u8]) -> bool {
    let Some(hex) = signature.strip_prefix("sha256=") else { return false };
    let Some(tag) = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    mac.verify_slice(&tag).is_ok()
}

/// A fleet file with a webhook to `port`, retrying fast; `extra` adds keys to the webhook.
fn write_fleet(dir: &Path, port: u16, extra: &str) -> std::path::PathBuf {
    let path = dir.join("fleet.toml");
    let hook = format!(
        "[[webhook]]\nname = \"chat\"\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret_env = \"{SECRET_ENV}\"\n\
         backoff_initial_secs = 0.05\nbackoff_max_secs = 0.2\n{extra}"
    );
    std::fs::write(&path, fleet_toml(&format!("[coordination]\nwindow_ms = 20\n{TRIO}\n{hook}"))).unwrap();
    path
}

/// `mindfleet run` with the secret set; killed if the test fails.
fn spawn(fleet: &Path, data: &Path) -> (KillOnDrop, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mindfleet"));
    cmd.arg("run").arg(fleet).arg("--data").arg(data).env(SECRET_ENV, SECRET);
    let (child, admin) = spawn_run(&mut cmd)
        .unwrap_or_else(|(code, log)| panic!("the fleet exited ({code:?}) before reporting its admin address:\n{log}"));
    (KillOnDrop(child), admin)
}

async fn post(http: &reqwest::Client, admin: &str, id: &str, text: &str) {
    let body = json!({"id": id, "domain": "chat", "room": "general", "from": "alice", "text": text});
    let r = http.post(format!("http://{admin}/events")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// Every reply in the fleet's outbox once nothing is pending: reply id -> entry.
async fn replies(http: &reqwest::Client, admin: &str) -> BTreeMap<String, Value> {
    poll("every event decided", || async {
        let d = get(http, format!("http://{admin}/dump")).await;
        (d["storage"]["pending"] == 0).then_some(())
    })
    .await;
    let page = get(http, format!("http://{admin}/outbox?after=0&limit=1000")).await;
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event_id"].as_str().unwrap().to_string(), e.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_is_posted_signed_and_after_two_failures_the_same_delivery_is_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let receiver = Receiver::serve(listener);
    receiver.fail_next.store(2, Ordering::SeqCst);
    let (mut fleet, admin) = spawn(&write_fleet(dir.path(), port, ""), &dir.path().join("data"));
    let http = reqwest::Client::new();

    post(&http, &admin, "ask-1", "@reviewer please review the rust auth module").await;
    let acked = poll("the reply acknowledged", || async { receiver.acked().into_iter().next() }).await;
    let outbox = replies(&http, &admin).await;
    let (id, entry) = outbox.iter().find(|(_, e)| e["in_reply_to"] == "ask-1").expect("a reply to ask-1");
    assert_eq!(&acked.0, id, "the delivery is named by the reply's event id");
    assert_eq!(&acked.1, entry, "the body is the outbox entry: {}", acked.1);
    assert_eq!(entry["kind"], "reply");
    assert_eq!(entry["persona"], "reviewer");

    // Two failures, then the same delivery again: same id, same signed body.
    let got = receiver.got();
    let statuses: Vec<u16> = got.iter().map(|g| g.status).collect();
    assert_eq!(statuses, [500, 500, 200], "{got:?}");
    assert!(got.iter().all(|g| g.signed && g.delivery == *id && g.body == *entry), "{got:?}");

    // The dump and the metrics count them.
    let d = get(&http, format!("http://{admin}/dump")).await;
    let w = &d["webhooks"][0];
    assert_eq!((w["name"].as_str(), w["delivered"].as_u64(), w["failures"].as_u64()), (Some("chat"), Some(1), Some(2)));
    assert_eq!((w["pending"].as_u64(), w["dead"].as_u64()), (Some(0), Some(0)), "{w}");
    let text = http.get(format!("http://{admin}/metrics")).send().await.unwrap().text().await.unwrap();
    let metrics = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let value = |name: &str| metric(&metrics, name, Some(("webhook", "chat")));
    assert_eq!(value("mindfleet_webhook_deliveries_total"), Some(1.0));
    assert_eq!(value("mindfleet_webhook_failures_total"), Some(2.0));
    assert_eq!(value("mindfleet_webhook_pending"), Some(0.0));
    sigterm(&fleet.0);
    assert_eq!(wait_exit(&mut fleet.0, Duration::from_secs(10)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_receiver_down_and_the_fleet_killed_every_reply_is_delivered_once_both_are_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A port nobody listens on until the receiver comes up.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let fleet_file = write_fleet(dir.path(), port, "");
    let (a, admin) = spawn(&fleet_file, &data);
    let http = reqwest::Client::new();
    for i in 0..12 {
        let text = if i % 2 == 0 { format!("@reviewer please review module {i}") } else { format!("@helper task {i}") };
        post(&http, &admin, &format!("before-{i}"), &text).await;
    }
    let before = replies(&http, &admin).await;
    assert!(before.len() >= 6, "replies to deliver: {}", before.len());
    let d = get(&http, format!("http://{admin}/dump")).await;
    assert_eq!(d["webhooks"][0]["pending"].as_u64(), Some(before.len() as u64), "all queued: {}", d["webhooks"]);
    drop(a); // SIGKILL, with every delivery still queued

    let receiver = Receiver::serve(tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap());
    let (mut b, admin) = spawn(&fleet_file, &data);
    post(&http, &admin, "after-0", "@reviewer please review the storage module").await;
    let all = replies(&http, &admin).await;
    assert!(all.len() > before.len(), "the new reply too");
    let acked = poll("every reply acknowledged", || async {
        let acked = receiver.acked();
        (acked.len() >= all.len()).then_some(acked)
    })
    .await;
    assert_eq!(acked.keys().collect::<Vec<_>>(), all.keys().collect::<Vec<_>>(), "each reply, none lost, no other");
    let got = receiver.got();
    for g in &got {
        assert!(g.signed, "{g:?}");
        assert_eq!(g.body, all[&g.delivery], "a repeat is the same delivery with the same body");
    }
    // In the order they were stored: first receipts by increasing seq.
    let mut seen = Vec::new();
    for g in &got {
        if !seen.contains(&g.delivery) {
            seen.push(g.delivery.clone());
        }
    }
    let seqs: Vec<u64> = seen.iter().map(|id| all[id]["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in seq order: {seqs:?}");
    sigterm(&b.0);
    assert_eq!(wait_exit(&mut b.0, Duration::from_secs(10)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_keeps_failing_is_a_dead_letter_until_webhooks_retry_sends_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let receiver = Receiver::serve(listener);
    receiver.fail_next.store(u32::MAX, Ordering::SeqCst);
    let (mut fleet, admin) = spawn(&write_fleet(dir.path(), port, "max_attempts = 3\n"), &dir.path().join("data"));
    let http = reqwest::Client::new();
    post(&http, &admin, "ask-1", "@reviewer please review the rust auth module").await;
    let d = poll("a dead letter", || async {
        let d = get(&http, format!("http://{admin}/dump")).await;
        (d["webhooks"][0]["dead"] == 1).then_some(d)
    })
    .await;
    let dead = &d["webhooks"][0]["dead_letters"][0];
    assert_eq!(dead["attempts"], 3, "{dead}");
    assert!(dead["error"].as_str().unwrap().contains("3 attempts failed (max_attempts); last: HTTP 500"), "{dead}");
    assert_eq!(receiver.got().len(), 3);

    // The receiver heals; the operator sends the dead letters again.
    receiver.fail_next.store(0, Ordering::SeqCst);
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(args).args(["--admin", &admin]).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, _, err) = cli(&["webhooks", "retry", "--webhook", "nope"]);
    assert_eq!(code, Some(2), "an unknown webhook is bad input, named: {err}");
    assert!(err.contains("no webhook \"nope\" (the fleet's: chat)"), "{err}");
    let (code, out, err) = cli(&["webhooks", "retry", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["retried"], 1, "{out}");
    let acked = poll("the dead letter delivered", || async { receiver.acked().into_iter().next() }).await;
    assert_eq!(acked.1["in_reply_to"], "ask-1");
    let (code, out, _) = cli(&["webhooks", "list"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("delivered 1") && out.contains("dead 0"), "{out}");
    sigterm(&fleet.0);
    assert_eq!(wait_exit(&mut fleet.0, Duration::from_secs(10)), Some(0));
}
