//! `mindfleet replay DATA_DIR --live`: the events a recorded history's personas were handed,
//! sent again, in the same order, to a fresh fleet that asks its model and its tools again (a
//! new model, new prompts, a new build), and what each persona did compared with what it did
//! then, event by event: verdict, plan, reply, tool calls. A regression test of behaviour.
//!
//! Both sides are read the same way: the recorded history replayed exactly, and the live fleet's
//! own history (it records too) replayed after it stopped; each gives every commit a persona
//! made. An event's outcome for a persona is its last commit on it (a deferral taken up later
//! ends in the later one).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;
use mindfleet_core::messages::PersonaCommit;
use mindfleet_replay::{HistoryReader, Options, Outcome};
use serde::Serialize;

use crate::Fleet;

/// How long the live fleet may take over one event before the next is sent anyway.
const PER_EVENT: Duration = Duration::from_secs(300);

/// What changed between the recorded run and the live one.
#[derive(Debug, Clone, Serialize)]
pub struct LiveReport {
    /// Events sent again, and (persona, event) outcomes compared.
    pub events: usize,
    pub compared: usize,
    /// How many outcomes changed, by what changed.
    pub changed: Changed,
    /// Each outcome that changed, in the order the events were sent.
    pub differences: Vec<Difference>,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Changed {
    pub verdict: usize,
    pub plan: usize,
    pub reply: usize,
    pub tool_calls: usize,
}

/// One persona's outcome on one event, then and now.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    pub event: String,
    pub persona: String,
    /// The event's text.
    pub text: String,
    pub recorded: Handled,
    pub live: Handled,
    /// What differs: `verdict`, `plan`, `reply`, `tool_calls`.
    pub changed: Vec<&'static str>,
}

/// What a persona did with one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Handled {
    pub verdict: String,
    /// The plan's steps, by action.
    pub plan: Vec<String>,
    pub reply: Option<String>,
    /// `server.tool(arguments)` of each call the plan made.
    pub tool_calls: Vec<String>,
}

impl Handled {
    fn of(c: &PersonaCommit) -> Handled {
        let steps = c.plan.as_ref().map(|p| p.plan.steps.as_slice()).unwrap_or_default();
        Handled {
            verdict: c.decision.verdict.as_str().to_string(),
            plan: steps.iter().map(|s| s.action.as_str().to_string()).collect(),
            reply: c.reply.as_ref().map(|(e, _)| e.text.clone()),
            tool_calls: steps
                .iter()
                .filter_map(|s| s.call.as_ref())
                .map(|c| format!("{}({})", c.tool, c.arguments))
                .collect(),
        }
    }
}

/// What each persona did with each event, by (persona, event id).
type ByEvent = BTreeMap<(String, String), Handled>;

/// Each persona's last commit on each event, and the events people sent, of a data dir's history.
fn outcomes(data_dir: &Path) -> anyhow::Result<(ByEvent, mindfleet_replay::Kept)> {
    let reader = HistoryReader::open(data_dir)?;
    let report = mindfleet_replay::replay(&reader, &Options { keep: true, ..Options::default() })?;
    if let Outcome::Refused(r) = &report.outcome {
        anyhow::bail!("{}: the history of {} is refused at row {}: {}", data_dir.display(), r.persona, r.row, r.reason);
    }
    let mut by = BTreeMap::new();
    for (persona, c) in &report.kept.commits {
        by.insert((persona.clone(), c.decision.event_id.clone()), Handled::of(c));
    }
    Ok((by, report.kept))
}

/// Sends the events of `data_dir`'s history to a fleet of `config` one at a time, each once the
/// fleet is idle again, and compares. The fleet keeps its data in `live_data` (a new directory),
/// else in a temporary one.
pub async fn live(data_dir: &Path, mut config: FleetConfig, live_data: Option<&Path>) -> anyhow::Result<LiveReport> {
    let (recorded, kept) = outcomes(data_dir)?;
    let scratch = tempfile::tempdir()?;
    let live_dir = live_data.unwrap_or(scratch.path());
    anyhow::ensure!(
        !live_dir.join("fleet.redb").exists(),
        "{}: the live run's data dir holds a fleet already",
        live_dir.display()
    );
    config.storage.data_dir = live_dir.to_path_buf();
    config.storage.record = true;
    config.admin.addr = "127.0.0.1:0".parse()?;
    let fleet = Fleet::start(config).await?;
    while fleet.dump(None).await.map_err(|e| anyhow::anyhow!("{e}"))?.llm.status == "loading" {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut texts = BTreeMap::new();
    for e in kept.events.values() {
        texts.insert(e.id.clone(), e.text.clone());
        let input = EventInput {
            id: Some(e.id.clone()),
            ts: None,
            domain: e.domain.clone(),
            room: e.room.clone(),
            from: e.from.clone(),
            sender_kind: e.sender_kind,
            text: e.text.clone(),
            persona: e.persona.clone(),
            mentions: e.mentions.clone(),
            priority: e.priority,
            urgent: e.urgent,
            in_reply_to: e.in_reply_to.clone(),
        };
        fleet.inject(input).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        fleet.wait_idle(PER_EVENT).await;
    }
    fleet.shutdown(PER_EVENT).await;
    let (now, _) = outcomes(live_dir)?;
    let mut report =
        LiveReport { events: texts.len(), compared: 0, changed: Changed::default(), differences: Vec::new() };
    let order: BTreeMap<&str, u64> = kept.events.iter().map(|(seq, e)| (e.id.as_str(), *seq)).collect();
    let mut differences = Vec::new();
    for ((persona, event), then) in &recorded {
        let Some(text) = texts.get(event) else { continue }; // a reply of another persona
        report.compared += 1;
        let live = now.get(&(persona.clone(), event.clone())).cloned().unwrap_or_default();
        let mut changed = Vec::new();
        for (what, differs, count) in [
            ("verdict", then.verdict != live.verdict, &mut report.changed.verdict),
            ("plan", then.plan != live.plan, &mut report.changed.plan),
            ("reply", then.reply != live.reply, &mut report.changed.reply),
            ("tool_calls", then.tool_calls != live.tool_calls, &mut report.changed.tool_calls),
        ] {
            if differs {
                changed.push(what);
                *count += 1;
            }
        }
        if !changed.is_empty() {
            differences.push((
                order.get(event.as_str()).copied().unwrap_or(u64::MAX),
                Difference {
                    event: event.clone(),
                    persona: persona.clone(),
                    text: text.clone(),
                    recorded: then.clone(),
                    live,
                    changed,
                },
            ));
        }
    }
    differences.sort_by_key(|(seq, d)| (*seq, d.persona.clone()));
    report.differences = differences.into_iter().map(|(_, d)| d).collect();
    Ok(report)
}
