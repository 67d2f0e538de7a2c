//! `mindfleet bench webhook`: the soak's load (a reply per event or more) on three fleets side by side: without a webhook, with a webhook to a local receiver that
//! acknowledges at once, and with one to a receiver that accepts connections and never answers.
//! Figures: the live receiver's deliveries per second and delivery latency (from the reply's
//! time to its receipt), the decision latency of each fleet and its ratio to the fleet without
//! a webhook; then the backlog the stalled run left, sent to the live receiver by a sender alone,
//! to measure how fast a sender drains.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use mindfleet_core::config::FleetConfig;
use mindfleet_core::time::now_us;
use mindfleet_core::webhook::{HookKind, HookRoute, WebhookConfig};
use mindfleet_server::webhook::Senders;
use mindfleet_store::{Storage, lock_data_dir};
use serde_json::{Value, json};

use super::{SoakLoad, percentile, round, soak_with};

/// What the live receiver saw: each delivery's latency (ms), and when it came.
#[derive(Default)]
struct Seen {
    latency_ms: Vec<f64>,
    first: Option<Instant>,
    last: Option<Instant>,
}

type Receipts = Arc<Mutex<Seen>>;

async fn receive(State(seen): State<Receipts>, body: Bytes) -> StatusCode {
    let at = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["at"].as_str()?.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_microsecond());
    let now = Instant::now();
    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = at {
        s.latency_ms.push((now_us() - at) as f64 / 1e3);
    }
    s.first.get_or_insert(now);
    s.last = Some(now);
    StatusCode::OK
}

/// A receiver that acknowledges every delivery at once.
async fn live_receiver() -> anyhow::Result<(SocketAddr, Receipts)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let seen = Receipts::default();
    let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, seen))
}

/// A receiver that accepts connections and never answers (a hung service).
async fn stalled_receiver() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    Ok(addr)
}

fn hook(addr: SocketAddr) -> WebhookConfig {
    WebhookConfig {
        name: "bench".into(),
        url: format!("http://{addr}/hook"),
        secret: "bench secret".into(),
        secret_env: "MINDFLEET_BENCH".into(),
        route: HookRoute {
            name: "bench".into(),
            rooms: Vec::new(),
            personas: Vec::new(),
            kinds: vec![HookKind::Reply],
        },
        max_attempts: WebhookConfig::DEFAULT_MAX_ATTEMPTS,
        max_age: WebhookConfig::DEFAULT_MAX_AGE,
        backoff_initial: WebhookConfig::DEFAULT_BACKOFF_INITIAL,
        backoff_max: WebhookConfig::DEFAULT_BACKOFF_MAX,
        timeout: WebhookConfig::DEFAULT_TIMEOUT,
    }
}

/// The decision-latency figures of a soak's result.
fn decisions(v: &Value) -> Value {
    let mut out = json!({});
    for k in
        ["achieved_per_s", "behind", "decision_p50_ms", "decision_p99_ms", "decision_p99_all_ms", "cpu_s", "drained"]
    {
        out[k] = v[k].clone();
    }
    out
}

/// The sender alone on the backlog a run left in `data`: deliveries and seconds until none is left.
async fn drain(data: &Path, to: SocketAddr) -> anyhow::Result<(u64, f64)> {
    let _lock = lock_data_dir(data)?;
    let mut cfg = mindfleet::defaults::default_fleet().storage;
    cfg.data_dir = data.to_path_buf();
    let storage = Storage::open(&cfg)?;
    let t = Instant::now();
    let senders = Senders::start(&storage, &[hook(to)]);
    let pending = |s: &mindfleet_core::stored::StorageStats| s.webhooks.get("bench").map_or(0, |w| w.pending);
    let backlog = pending(&storage.stats().await?);
    loop {
        let s = storage.stats().await?;
        if pending(&s) == 0 {
            break;
        }
        anyhow::ensure!(t.elapsed() < Duration::from_secs(600), "the backlog was not sent within 10 minutes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    drop(senders);
    storage.close().await?;
    Ok((backlog, secs))
}

pub async fn webhook(load: SoakLoad) -> anyhow::Result<Value> {
    let without = soak_with(load, 0, |_| {}).await?;
    let (live_addr, seen) = live_receiver().await?;
    let live = soak_with(load, 0, |c: &mut FleetConfig| c.webhooks = vec![hook(live_addr)]).await?;
    let stalled_dir = tempfile::tempdir()?;
    let stalled_addr = stalled_receiver().await?;
    let stalled = soak_with(load, 0, |c: &mut FleetConfig| {
        c.storage.data_dir = stalled_dir.path().to_path_buf();
        c.webhooks = vec![hook(stalled_addr)];
    })
    .await?;
    let (mut latency, span) = {
        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
        s.latency_ms.sort_by(f64::total_cmp);
        let span = s.first.zip(s.last).map_or(0.0, |(a, b)| (b - a).as_secs_f64());
        (std::mem::take(&mut s.latency_ms), span)
    };
    let (drained_backlog, drain_s) = drain(stalled_dir.path(), live_addr).await?;
    let webhook = |v: &Value| v["webhooks"][0].clone();
    let replies = |v: &Value| {
        let w = webhook(v);
        ["pending", "delivered", "dead"].iter().map(|k| w[k].as_u64().unwrap_or(0)).sum::<u64>()
    };
    let ratio =
        |a: &Value, k: &str| round(a[k].as_f64().unwrap_or(0.0) / without[k].as_f64().unwrap_or(0.0).max(1e-9), 2);
    Ok(json!({
        "bench": "webhook",
        "personas": load.personas,
        "rate_per_s": load.rate,
        "room_size": load.room_size,
        "seconds": load.seconds,
        "replies_per_s": round(replies(&live) as f64 / load.seconds as f64, 1),
        "live": {
            "replies": replies(&live),
            "delivered": latency.len(),
            "deliveries_per_s": round(latency.len() as f64 / span.max(1e-9), 1),
            "delivery_p50_ms": round(percentile(&mut latency, 0.5), 1),
            "delivery_p99_ms": round(percentile(&mut latency, 0.99), 1),
            "delivery_max_ms": round(latency.last().copied().unwrap_or(0.0), 1),
            "decisions": decisions(&live),
        },
        "stalled": {
            "replies": replies(&stalled),
            "pending_at_end": webhook(&stalled)["pending"].clone(),
            "decisions": decisions(&stalled),
        },
        "without": decisions(&without),
        "decision_p50_live_over_without": ratio(&live, "decision_p50_ms"),
        "decision_p99_all_live_over_without": ratio(&live, "decision_p99_all_ms"),
        "decision_p50_stalled_over_without": ratio(&stalled, "decision_p50_ms"),
        "decision_p99_all_stalled_over_without": ratio(&stalled, "decision_p99_all_ms"),
        "backlog": {
            "deliveries": drained_backlog,
            "seconds": round(drain_s, 2),
            "deliveries_per_s": round(drained_backlog as f64 / drain_s.max(1e-9), 1),
        },
    }))
}
