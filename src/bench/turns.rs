//! `mindfleet bench turns`: seven personas in one room, each with a model budget of `--budget`
//! calls an hour, take 30 undirected human messages and 6 mentions (each naming a persona), once
//! on the `rules` brain and once on the `local` one (the pulled SmolLM2). For each brain: replies
//! per undirected message, the undirected messages nobody answered, the mentions answered by the
//! persona named, the replies drafted by the rules brain and by the model, and the wall time.
//! A budget may change how a human is answered, never whether (RUNTIME-SEMANTICS.md, "Budgets
//! never silence a human").

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;
use serde_json::{Value, json};

use super::round;
use mindfleet::fleet::Fleet;

pub const PERSONAS: [&str; 7] = ["ada", "bob", "cyd", "dee", "eve", "fay", "gus"];
const ROOM: &str = "team";
/// Longest the fleet may take to settle after the last message.
const SETTLE: Duration = Duration::from_secs(900);

/// What the humans ask, in turn (numbered, so no two messages are the same).
const QUESTIONS: [&str; 6] = [
    "how is the rollout going",
    "who can look at the failing deploy",
    "is the database migration done",
    "what is blocking the release",
    "can someone summarise the incident",
    "where are the notes from the planning meeting",
];

fn fail(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The seven personas of the bench on `brain`, each with `budget` model calls an hour.
fn fleet_config(brain: &str, budget: u64, data_dir: &Path, models: &Path) -> anyhow::Result<FleetConfig> {
    let mut toml = String::from("[fleet]\nname = \"bench-turns\"\n[admin]\naddr = \"127.0.0.1:0\"\n");
    for name in PERSONAS {
        toml.push_str(&format!(
            "[[persona]]\nname = \"{name}\"\nrole = \"{name} the generalist\"\nrooms = [\"{ROOM}\"]\n\
             brain = \"{brain}\"\ninferences_per_hour = {budget}\n"
        ));
    }
    let mut cfg = FleetConfig::from_toml(Path::new("bench-turns.toml"), &toml).map_err(fail)?;
    cfg.storage.data_dir = data_dir.to_path_buf();
    cfg.models.dir = models.to_path_buf();
    Ok(cfg)
}

fn chat(text: String) -> EventInput {
    EventInput { domain: "chat".into(), room: ROOM.into(), from: "alice".into(), text, ..Default::default() }
}

/// The figures of one brain: `undirected` messages, a mention after every fifth, on a fresh fleet.
async fn run(brain: &str, budget: u64, undirected: usize, models: &Path) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let fleet = Fleet::start(fleet_config(brain, budget, dir.path(), models)?).await?;
    // The messages go to a fleet that is up, its model loaded: what is measured is turn-taking
    // on a budget, not a cold start.
    let loading = Instant::now();
    while fleet.dump(None).await.map_err(fail)?.llm.status == "loading" {
        anyhow::ensure!(loading.elapsed() < SETTLE, "{brain}: the model did not load within {SETTLE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::ensure!(fleet.wait_idle(SETTLE).await, "{brain}: the fleet did not settle before the messages");
    let started = Instant::now();
    let (mut open, mut mentions) = (Vec::new(), Vec::new());
    for i in 0..undirected {
        let text = format!("question {i}: {}?", QUESTIONS[i % QUESTIONS.len()]);
        open.push(fleet.inject(chat(text)).await.map_err(fail)?.event_id);
        if i % 5 == 4 {
            let named = PERSONAS[mentions.len() % PERSONAS.len()];
            let text = format!("@{named} could you take question {i} yourself?");
            mentions.push((named, fleet.inject(chat(text)).await.map_err(fail)?.event_id));
        }
    }
    let settled = fleet.wait_idle(SETTLE).await;
    let wall_s = started.elapsed().as_secs_f64();
    let d = fleet.dump(None).await.map_err(fail)?;
    anyhow::ensure!(settled, "{brain}: the fleet did not settle within {SETTLE:?}");
    let mut replies_to: HashMap<&str, Vec<&str>> = HashMap::new();
    for o in &d.outbox {
        replies_to.entry(o.in_reply_to.as_str()).or_default().push(o.persona.as_str());
    }
    let to = |id: &String| replies_to.get(id.as_str()).map_or(&[][..], Vec::as_slice);
    let to_open: usize = open.iter().map(|id| to(id).len()).sum();
    let unanswered = open.iter().filter(|id| to(id).is_empty()).count();
    let by_named = mentions.iter().filter(|(named, id)| to(id).contains(named)).count();
    let by_others = mentions.iter().filter(|(named, id)| to(id).iter().any(|p| p != named)).count();
    let asked: Vec<&str> = open.iter().chain(mentions.iter().map(|(_, id)| id)).map(String::as_str).collect();
    let replies: Vec<_> = d.outbox.iter().filter(|o| asked.contains(&o.in_reply_to.as_str())).collect();
    let by_rules = replies.iter().filter(|o| o.brain == "rules").count();
    fleet.shutdown(Duration::from_secs(5)).await;
    let replay = super::replayed(dir.path())?;
    Ok(json!({
        "undirected": open.len(),
        "mentions": mentions.len(),
        "replies_per_undirected": round(to_open as f64 / open.len().max(1) as f64, 3),
        "unanswered_undirected": unanswered,
        "mentions_answered_by_named": by_named,
        "mentions_answered_by_others": by_others,
        "replies_by_rules": by_rules,
        "replies_by_model": replies.len() - by_rules,
        // Calls counted against the budgets (a plan's choice is one, of two model requests).
        "budgeted_calls": d.scheduler.budget.inferences_last_hour,
        "rules_only_grants": d.scheduler.rules_only.hard_budget + d.scheduler.rules_only.soft_call_budget
            + d.scheduler.rules_only.soft_token_budget,
        "skipped_grants": d.scheduler.skipped.hard_budget + d.scheduler.skipped.soft_call_budget
            + d.scheduler.skipped.soft_token_budget,
        "wall_s": round(wall_s, 2),
        // The run's recorded history fed to the lifecycles again (`mindfleet replay`).
        "replay": replay,
    }))
}

/// Both brains on the same messages, each on a fresh fleet; the models are in `models`.
pub async fn turns(budget: u64, undirected: usize, models: &Path) -> anyhow::Result<Value> {
    let rules = run("rules", budget, undirected, models).await?;
    let local = run("local", budget, undirected, models).await?;
    Ok(json!({
        "bench": "turns",
        "personas": PERSONAS.len(),
        "inferences_per_hour": budget,
        "rules": rules,
        "local": local,
    }))
}
