//! `mindfleet bench study`: self-directed study with the real local models over a small corpus
//! (`bench/study`): how long a session takes and what it spends, how its answers grade and
//! whether they come from the passage about the topic, and how much a session under way delays
//! a person's question, side by side with the same question to the idle persona.

use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet_core::config::FleetConfig;
use mindfleet_core::dump::StudyDump;
use mindfleet_core::event::EventInput;
use mindfleet_core::record::StudySession;
use serde_json::{Value, json};

use super::{percentile, round};
use mindfleet::client::Client;
use mindfleet::fleet::Fleet;

/// Each topic and the file of the corpus that is about it.
const TOPICS: [(&str, &str); 5] = [
    ("circuit breaker probe", "breaker.md"),
    ("retry backoff jitter", "retries.md"),
    ("feature flag rollout percentage", "flags.md"),
    ("database migration backward compatible", "migrations.md"),
    ("public api rate limit", "ratelimit.md"),
];

pub(super) const PERSONA: &str = "helper";
/// Longest one session or one reply may take before the bench gives up.
pub(super) const DEADLINE: Duration = Duration::from_secs(300);

pub(super) fn fail(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

pub(super) async fn study_of(fleet: &Fleet) -> anyhow::Result<StudyDump> {
    let d = fleet.dump(Some(PERSONA.into())).await.map_err(fail)?;
    d.personas.into_iter().find_map(|p| p.study).ok_or_else(|| anyhow::anyhow!("no study in the dump"))
}

/// Waits until `n` sessions are over; the newest.
pub(super) async fn session(fleet: &Fleet, n: u64) -> anyhow::Result<StudySession> {
    let t = Instant::now();
    loop {
        let s = study_of(fleet).await?;
        if s.sessions >= n {
            return Ok(s.recent[0].clone());
        }
        anyhow::ensure!(t.elapsed() < DEADLINE, "session {n} not over after {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asks the persona a question and times it to its reply, ms.
pub(super) async fn ask(fleet: &Fleet, text: String) -> anyhow::Result<f64> {
    let e =
        EventInput { domain: "chat".into(), room: "general".into(), from: "ann".into(), text, ..Default::default() };
    let t = Instant::now();
    let ack = fleet.inject(e).await.map_err(fail)?;
    loop {
        let d = fleet.dump(None).await.map_err(fail)?;
        if d.outbox.iter().any(|o| o.in_reply_to == ack.event_id) {
            return Ok(t.elapsed().as_secs_f64() * 1000.0);
        }
        anyhow::ensure!(t.elapsed() < DEADLINE, "no reply to {} after {DEADLINE:?}", ack.event_id);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One session per topic, then `rounds` questions to the idle persona and `rounds` while a
/// session is under way (at a model stage), alternating.
pub async fn study(corpus: &Path, rounds: usize) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let toml = format!(
        "[fleet]\nname = \"bench-study\"\n[admin]\naddr = \"127.0.0.1:0\"\n\
         [[persona]]\nname = \"{PERSONA}\"\nrole = \"assistant\"\nrooms = [\"general\"]\nbrain = \"local\"\n"
    );
    let mut cfg = FleetConfig::from_toml(Path::new("bench-study.toml"), &toml).map_err(fail)?;
    cfg.storage.data_dir = dir.path().to_path_buf();
    let fleet = Fleet::start(cfg).await?;
    let api = Client::new(&fleet.addr.to_string(), None);
    api.rag("index", &json!({ "paths": [corpus] })).await.map_err(fail)?;

    let mut n = 0;
    let (mut secs, mut tokens, mut scores) = (Vec::new(), Vec::new(), Vec::new());
    let (mut answers, mut passed, mut on_topic, mut found_again, mut by_model) = (0, 0, 0, 0, 0);
    for (topic, file) in TOPICS {
        api.study(&json!({ "persona": PERSONA, "topic": topic })).await.map_err(fail)?;
        n += 1;
        let s = session(&fleet, n).await?;
        anyhow::ensure!(s.outcome == "studied", "{topic}: {}", s.outcome);
        secs.push((s.finished_us - s.started_us) as f64 / 1e6);
        tokens.push(f64::from(s.tokens));
        scores.push(s.score);
        answers += s.answers.len();
        passed += s.answers.iter().filter(|a| a.passed()).count();
        on_topic += usize::from(s.answers.first().is_some_and(|a| a.source.starts_with(file)));
        found_again += s.answers.iter().filter(|a| a.grade >= 0.5).count();
        by_model += s.answers.iter().filter(|a| a.by == "model").count();
    }

    let (mut idle_ms, mut busy_ms) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        idle_ms.push(ask(&fleet, format!("@{PERSONA} what is the capital of France? ({r})")).await?);
        let (topic, _) = TOPICS[r % TOPICS.len()];
        api.study(&json!({ "persona": PERSONA, "topic": topic })).await.map_err(fail)?;
        n += 1;
        let t = Instant::now();
        // Asked once the session is at a model stage: the question meets it head on.
        while study_of(&fleet).await?.running.is_none_or(|(_, stage)| stage == "search") {
            anyhow::ensure!(t.elapsed() < DEADLINE, "the session did not reach a model stage");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        busy_ms.push(ask(&fleet, format!("@{PERSONA} what is the capital of Italy? ({r})")).await?);
        session(&fleet, n).await?;
    }
    let training = std::fs::read_to_string(dir.path().join("training").join(format!("{PERSONA}.jsonl")))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    fleet.shutdown(Duration::from_secs(5)).await;
    for v in [&mut secs, &mut tokens, &mut idle_ms, &mut busy_ms] {
        v.sort_by(f64::total_cmp);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (idle, busy) = (percentile(&mut idle_ms, 0.5), percentile(&mut busy_ms, 0.5));
    Ok(json!({
        "bench": "study",
        "model": mindfleet_models::fetch::SMOLLM2.name,
        "sessions": TOPICS.len(),
        "session_p50_s": round(percentile(&mut secs, 0.5), 2),
        "session_max_s": round(secs.last().copied().unwrap_or(0.0), 2),
        "tokens_per_session": round(mean(&tokens), 0),
        "answers": answers,
        "answers_by_model": by_model,
        "mean_score": round(mean(&scores), 3),
        "passed": passed,
        "first_passage_on_topic": round(on_topic as f64 / TOPICS.len() as f64, 2),
        "training_lines": training,
        "rounds": rounds,
        "reply_idle_p50_ms": round(idle, 0),
        "reply_while_studying_p50_ms": round(busy, 0),
        "reply_while_studying_ratio": round(busy / idle.max(1.0), 2),
        "found_again": found_again,
    }))
}
