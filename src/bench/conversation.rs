//! `mindfleet bench conversation`: conversation memory under a steady stream of chat messages,
//! with the real MiniLM: how far embedding falls behind intake (the lag the dump reports),
//! whether the promotion to `work` keeps it bounded, and how long a recall takes.

use std::time::{Duration, Instant};

use mindfleet_core::event::EventInput;
use serde_json::{Value, json};

use super::{percentile, round};
use mindfleet::client::Client;
use mindfleet::fleet::Fleet;

/// Topics the messages rotate through, so recall has something to tell apart.
const TOPICS: [&str; 6] = [
    "the deploy to production failed when the canary ran out of memory",
    "lunch on Friday is pizza at noon",
    "the database migration must run before the release",
    "the login page is slow for users in Europe",
    "we should rotate the API keys every quarter",
    "the new office plants arrived this morning",
];

/// `personas` personas in one room, `rate` messages per second for `seconds`; samples every
/// persona's conversation lag each 250 ms, then times `recalls` recalls through the admin API.
pub async fn conversation(personas: usize, rate: f64, seconds: u64, recalls: usize) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let mut cfg = mindfleet::defaults::synthetic_fleet(personas, dir.path().to_path_buf());
    cfg.conversation.enabled = true;
    for p in &mut cfg.personas {
        p.rooms = vec!["general".into()];
        // Quiet listeners: the load measured is conversation memory's, not replies'.
        p.dormant = true;
    }
    let max_lag = cfg.conversation.max_lag;
    let fleet = Fleet::start(cfg).await?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let (mut sent, mut lags, mut next_sample) = (0u64, Vec::new(), Duration::ZERO);
    while started.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        let text = format!("{} (update {sent})", TOPICS[sent as usize % TOPICS.len()]);
        let e = EventInput {
            domain: "chat".into(),
            room: "general".into(),
            from: format!("user{}", sent % 7),
            text,
            ..Default::default()
        };
        fleet.inject(e).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        sent += 1;
        if started.elapsed() >= next_sample {
            next_sample += Duration::from_millis(250);
            let d = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            lags.extend(d.personas.iter().filter_map(|p| p.conversation.as_ref()).map(|c| c.lag_ms as f64));
        }
    }
    let intake_s = started.elapsed().as_secs_f64();
    let expected = sent * personas as u64;
    let drained_at = Instant::now();
    let d = loop {
        let d = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let stored: u64 = d.personas.iter().filter_map(|p| p.conversation.as_ref()).map(|c| c.stored).sum();
        if stored >= expected || drained_at.elapsed() > Duration::from_secs(300) {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let drain_s = drained_at.elapsed().as_secs_f64();
    let convo: Vec<_> = d.personas.iter().filter_map(|p| p.conversation.clone()).collect();
    let stored: u64 = convo.iter().map(|c| c.stored).sum();
    let api = Client::new(&fleet.addr.to_string(), None);
    let mut took = Vec::with_capacity(recalls);
    let mut on_topic = 0;
    for i in 0..recalls {
        let persona = d.personas[i % personas].name.clone();
        let topic = TOPICS[i % TOPICS.len()];
        let t = Instant::now();
        let v = api
            .ai("recall", &[("persona", persona), ("text", topic.to_string()), ("limit", "5".into())])
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        took.push(t.elapsed().as_secs_f64() * 1000.0);
        let first = v["recall"]["items"][0]["text"].as_str().unwrap_or("");
        on_topic += usize::from(first.starts_with(topic));
    }
    fleet.shutdown(Duration::from_secs(5)).await;
    lags.sort_by(f64::total_cmp);
    took.sort_by(f64::total_cmp);
    Ok(json!({
        "bench": "conversation",
        "model": mindfleet_models::fetch::MINILM.name,
        "personas": personas,
        "rate_per_s": rate,
        "seconds": seconds,
        "messages": sent,
        "taken_in": expected,
        "stored": stored,
        "embedded_per_s": round(stored as f64 / (intake_s + drain_s), 1),
        "max_lag_s": max_lag.as_secs_f64(),
        "lag_p50_ms": round(percentile(&mut lags, 0.5), 0),
        "lag_p99_ms": round(percentile(&mut lags, 0.99), 0),
        "lag_max_ms": convo.iter().map(|c| c.max_lag_ms).max().unwrap_or(0),
        "promotions": convo.iter().map(|c| c.promotions).sum::<u64>(),
        "drain_s": round(drain_s, 2),
        "recalls": recalls,
        "recall_p50_ms": round(percentile(&mut took, 0.5), 1),
        "recall_p99_ms": round(percentile(&mut took, 0.99), 1),
        "recall_first_on_topic": round(on_topic as f64 / recalls.max(1) as f64, 3),
    }))
}
