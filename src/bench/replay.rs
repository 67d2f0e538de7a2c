//! `mindfleet bench replay`: a backlog of stored chat events replayed at start (the restart
//! after a crash), with conversation memory off and on side by side: how long until every
//! delivery is decided, and, with it on, until every message is embedded; beside it, the bare
//! model on the same texts, so the embedding rate is read against what the model can do.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::conversation::Said;
use mindfleet_core::event::EventInput;
use mindfleet_models::embed::Embedder;
use mindfleet_store::{Storage, lock_data_dir};
use serde_json::{Value, json};

use super::round;
use mindfleet::fleet::Fleet;

const DEADLINE: Duration = Duration::from_secs(600);

/// The `i`th message of the backlog.
fn message(i: usize) -> EventInput {
    EventInput {
        domain: "chat".into(),
        room: "general".into(),
        from: format!("user{}", i % 7),
        text: format!("update {i}: the rollout of item {} is at stage {}", i % 13, i % 5),
        ..Default::default()
    }
}

/// The backlog: `events` chat messages in one room of `personas`, stored while no persona runs.
async fn backlog(cfg: &FleetConfig, events: usize) -> anyhow::Result<()> {
    let _lock = lock_data_dir(&cfg.storage.data_dir)?;
    let storage = Storage::open(&cfg.storage)?;
    let targets: Vec<_> = cfg.personas.iter().map(|p| (Arc::<str>::from(p.name.as_str()), None)).collect();
    for i in 0..events {
        let e = message(i).validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        let (tx, rx) = ractor::concurrency::oneshot();
        storage.inject(Box::new(e), targets.clone(), tx.into());
        rx.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    storage.close().await?;
    Ok(())
}

/// How a run went.
struct Drained {
    /// Seconds until nothing was pending.
    drained: f64,
    /// Conversation memory on: seconds until every message was in the index, and the texts the
    /// model embedded for them (each persona's copy of a message is the same text, embedded once).
    embedded: Option<(f64, u64)>,
    /// The embedding worker's largest batch.
    max_batch: usize,
}

/// Starts a fleet on the backlog and waits until nothing is pending and (conversation memory
/// on) every message is embedded.
async fn drain(events: usize, personas: usize, conversation: bool) -> anyhow::Result<Drained> {
    let dir = tempfile::tempdir()?;
    let mut cfg = mindfleet::defaults::synthetic_fleet(personas, dir.path().to_path_buf());
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
            let embedded_s = t.elapsed().as_secs_f64();
            let worker = fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?.embedding;
            fleet.shutdown(Duration::from_secs(5)).await;
            // What the model ran: a text asked for again while on its way is embedded once.
            let model_inputs = (worker.mean_batch * worker.batches as f64).round() as u64;
            let embedded = conversation.then_some((embedded_s, model_inputs));
            return Ok(Drained { drained, embedded, max_batch: worker.max_batch });
        }
        anyhow::ensure!(t.elapsed() < DEADLINE, "the backlog did not drain in {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Texts per second of the bare model on the backlog's texts as conversation memory writes
/// them, in calls of `batch`, on the threads the fleet's worker has.
fn model_per_s(model_dir: &Path, events: usize, batch: usize) -> anyhow::Result<f64> {
    let texts: Vec<String> = (0..events)
        .map(|i| {
            let m = message(i);
            Said { from: m.from, room: m.room, text: m.text, ..Said::default() }.content()
        })
        .collect();
    super::embed::per_s(&Embedder::load(model_dir)?, &texts, batch.max(1))
}

pub async fn replay(model_dir: &Path, events: usize, personas: usize) -> anyhow::Result<Value> {
    let off = drain(events, personas, false).await?;
    let on = drain(events, personas, true).await?;
    let (embedded_s, texts) = on.embedded.unwrap_or((on.drained, 0));
    let texts_per_s = texts as f64 / embedded_s.max(1e-3);
    let dir = model_dir.to_path_buf();
    let model = tokio::task::spawn_blocking(move || model_per_s(&dir, events, on.max_batch)).await??;
    Ok(json!({
        "bench": "replay",
        "events": events,
        "personas": personas,
        "deliveries": events * personas,
        "threads": mindfleet_models::embed::threads(),
        "drain_off_s": round(off.drained, 2),
        "drain_on_s": round(on.drained, 2),
        "drain_on_over_off": round(on.drained / off.drained.max(1e-3), 2),
        "embedded_s": round(embedded_s, 2),
        "deliveries_embedded_per_s": round((events * personas) as f64 / embedded_s.max(1e-3), 0),
        "texts_embedded": texts,
        "texts_embedded_per_s": round(texts_per_s, 0),
        "model_batch": on.max_batch,
        "model_per_s": round(model, 0),
        "embedded_vs_model": round(texts_per_s / model.max(1e-3), 2),
    }))
}
