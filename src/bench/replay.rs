//! `mindfleet bench replay`: a backlog of stored chat events replayed at start (the restart
//! after a crash), with conversation memory off and on side by side: how long until every
//! delivery is decided, and, with it on, until every message is embedded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_runtime::config::FleetConfig;
use mindfleet_runtime::event::EventInput;
use mindfleet_runtime::storage::{Storage, lock_data_dir};
use serde_json::{Value, json};

use super::round;
use crate::fleet::Fleet;

const DEADLINE: Duration = Duration::from_secs(600);

/// The backlog: `events` chat messages in one room of `personas`, stored while no persona runs.
async fn backlog(cfg: &FleetConfig, events: usize) -> anyhow::Result<()> {
    let _lock = lock_data_dir(&cfg.storage.data_dir)?;
    let storage = Storage::open(&cfg.storage)?;
    let targets: Vec<_> = cfg.personas.iter().map(|p| (Arc::<str>::from(p.name.as_str()), None)).collect();
    for i in 0..events {
        let e = EventInput {
            domain: "chat".into(),
            room: "general".into(),
            from: format!("user{}", i % 7),
            text: format!("update {i}: the rollout of item {} is at stage {}", i % 13, i % 5),
            ..Default::default()
        }
        .validate()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let (tx, rx) = ractor::concurrency::oneshot();
        storage.inject(Box::new(e), targets.clone(), tx.into());
        rx.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    storage.close().await?;
    Ok(())
}

/// Starts a fleet on the backlog; seconds until nothing is pending, and (conversation memory
/// on) until every message is embedded.
async fn drain(events: usize, personas: usize, conversation: bool) -> anyhow::Result<(f64, Option<f64>)> {
    let dir = tempfile::tempdir()?;
    let mut cfg = FleetConfig::synthetic(personas, dir.path().to_path_buf());
    cfg.conversation.enabled = conversation;
    for p in &mut cfg.personas {
        p.rooms = vec!["general".into()];
        // Listeners: the replay measured is intake and decisions, not replies.
        p.dormant = true;
    }
    backlog(&cfg, events).await?;
    let t = Instant::now();
    let fleet = Fleet::start(cfg).await?;
    let mut drained = None;
    let expected = (events * personas) as u64;
    loop {
        if drained.is_none() && fleet.storage.stats().await?.pending == 0 {
            drained = Some(t.elapsed().as_secs_f64());
        }
        let embedded = if conversation {
            let d = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            d.personas.iter().filter_map(|p| p.conversation.as_ref()).map(|c| c.stored).sum::<u64>() >= expected
        } else {
            true
        };
        if let (Some(drained), true) = (drained, embedded) {
            let embedded_s = conversation.then(|| t.elapsed().as_secs_f64());
            fleet.shutdown(Duration::from_secs(5)).await;
            return Ok((drained, embedded_s));
        }
        anyhow::ensure!(t.elapsed() < DEADLINE, "the backlog did not drain in {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn replay(events: usize, personas: usize) -> anyhow::Result<Value> {
    let (off, _) = drain(events, personas, false).await?;
    let (on, embedded) = drain(events, personas, true).await?;
    let embedded = embedded.unwrap_or(on);
    Ok(json!({
        "bench": "replay",
        "events": events,
        "personas": personas,
        "deliveries": events * personas,
        "drain_off_s": round(off, 2),
        "drain_on_s": round(on, 2),
        "drain_on_over_off": round(on / off.max(1e-3), 2),
        "embedded_s": round(embedded, 2),
        "embedded_per_s": round((events * personas) as f64 / embedded.max(1e-3), 0),
    }))
}
