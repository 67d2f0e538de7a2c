//! `mindfleet bench cognition`: how fast a fleet on the local brain thinks when many people
//! talk to it at once. Eight awake personas in one room take 64 messages, each naming one of
//! them, from eight people, injected at once, and the run waits for every named persona's
//! reply. The same run twice in one process, each on a fresh fleet and after a warm-up run
//! (see [`cognition`]): with the model's requests batched (`[llm] max_batch`, default 12) and one
//! at a time (`max_batch = 1`), prompt-prefix reuse on in both. For each: replies posted per
//! second from the first injection to the last reply, the reply latencies, the model's tokens
//! per second of its passes, the mean batch, the prefix hit rate, and the seconds of the model's
//! passes that read prompt tokens and of those of generated rows only (up to the dump after the
//! last reply): batching shares the second kind's reading of the weights among the batch's rows,
//! not the first's products.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mindfleet_core::config::{FleetConfig, LlmBackend};
use mindfleet_core::event::EventInput;
use mindfleet_core::quantile::nearest_rank;
use mindfleet_core::time::now_us;
use serde_json::{Value, json};

use super::round;
use mindfleet::fleet::Fleet;

pub const PERSONAS: [&str; 8] = ["ada", "bob", "cyd", "dee", "eve", "fay", "gus", "hal"];
const PEOPLE: [&str; 8] = ["alice", "brian", "chloe", "dmitri", "elena", "farid", "grace", "hiro"];
const ROOM: &str = "team";
/// Longest a run may take to answer every message.
const SETTLE: Duration = Duration::from_secs(1800);

/// What the people ask, each question once per person (numbered, so no two are the same).
const QUESTIONS: [&str; 8] = [
    "can you review the retry logic in the storage writer",
    "what is blocking the release this week",
    "could you explain why the deploy failed last night",
    "how do I configure the admin token for the dashboard",
    "is the database migration safe to run today",
    "can you summarise the incident from this morning",
    "where are the notes from the planning meeting",
    "which tests are flaky on main right now",
];

fn fail(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The eight personas on the local brain, the model decoding `max_batch` requests together.
fn fleet_config(max_batch: usize, record: bool, data_dir: &Path, models: &Path) -> anyhow::Result<FleetConfig> {
    let mut toml = format!(
        "[fleet]\nname = \"bench-cognition\"\nbrain = \"local\"\n[admin]\naddr = \"127.0.0.1:0\"\n\
         [llm]\nmax_batch = {max_batch}\n"
    );
    for name in PERSONAS {
        toml.push_str(&format!(
            "[[persona]]\nname = \"{name}\"\nrole = \"engineer\"\nrooms = [\"{ROOM}\"]\n\
             inferences_per_hour = 100000\ntokens_per_hour = 100000000\n"
        ));
    }
    let mut cfg = FleetConfig::from_toml(Path::new("bench-cognition.toml"), &toml).map_err(fail)?;
    cfg.storage.data_dir = data_dir.to_path_buf();
    cfg.storage.record = record;
    cfg.models.dir = models.to_path_buf();
    Ok(cfg)
}

/// The 64 messages: person `p` asks persona `(p + q) % 8` question `q`.
fn messages() -> Vec<(&'static str, EventInput)> {
    let mut out = Vec::new();
    for q in 0..QUESTIONS.len() {
        for (p, from) in PEOPLE.iter().enumerate() {
            let named = PERSONAS[(p + q) % PERSONAS.len()];
            let text = format!("@{named} {} (question {})", QUESTIONS[q], out.len() + 1);
            let input = EventInput {
                domain: "chat".into(),
                room: ROOM.into(),
                from: (*from).into(),
                text,
                ..Default::default()
            };
            out.push((named, input));
        }
    }
    out
}

/// One run on a fresh fleet: its figures, and each message's reply by the persona it names.
/// Recording its history (`record`), the history is replayed after it (`replay`).
pub(crate) async fn run(
    max_batch: usize,
    record: bool,
    models: &Path,
) -> anyhow::Result<(Value, HashMap<String, String>)> {
    let dir = tempfile::tempdir()?;
    let cfg = fleet_config(max_batch, record, dir.path(), models)?;
    anyhow::ensure!(matches!(cfg.llm, LlmBackend::Local(l) if l.prefix_reuse), "prefix reuse is on in both runs");
    let fleet = Fleet::start(cfg).await?;
    // What is measured is answering, not a cold start: the model is loaded (by a question
    // nobody is asked to answer) and the fleet idle before the messages.
    let loading = Instant::now();
    while fleet.dump(None).await.map_err(fail)?.llm.status == "loading" {
        anyhow::ensure!(loading.elapsed() < SETTLE, "the model did not load within {SETTLE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::ensure!(fleet.wait_idle(SETTLE).await, "the fleet did not settle before the messages");
    let before = fleet.dump(None).await.map_err(fail)?.llm;
    let start_us = now_us();
    let started = Instant::now();
    let mut asked = Vec::new();
    for (named, input) in messages() {
        let at = now_us();
        let text = input.text.clone();
        asked.push((named, fleet.inject(input).await.map_err(fail)?.event_id, at, text));
    }
    // Every message answered by the persona it names.
    let mut replies: HashMap<String, (i64, String, String)> = HashMap::new();
    loop {
        for (_, o) in fleet.storage.outbox_after(0, 100_000).map_err(fail)? {
            replies.entry(format!("{}/{}", o.persona, o.in_reply_to)).or_insert((o.at_us, o.text, o.brain));
        }
        if asked.iter().all(|(named, id, _, _)| replies.contains_key(&format!("{named}/{id}"))) {
            break;
        }
        anyhow::ensure!(started.elapsed() < SETTLE, "max_batch {max_batch}: not every message answered in {SETTLE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut latencies = Vec::new();
    let (mut last_us, mut by_model) = (start_us, 0);
    let mut texts = HashMap::new();
    for (named, id, at, text) in &asked {
        let (reply_us, reply, brain) = &replies[&format!("{named}/{id}")];
        latencies.push((reply_us - at) as f64 / 1000.0);
        last_us = last_us.max(*reply_us);
        by_model += usize::from(brain != "rules");
        texts.insert(format!("{named}: {text}"), reply.clone());
    }
    latencies.sort_by(f64::total_cmp);
    let seconds = (last_us - start_us) as f64 / 1e6;
    let llm = fleet.dump(None).await.map_err(fail)?.llm;
    let b = llm.batching.clone().unwrap_or_default();
    let b0 = before.batching.unwrap_or_default();
    let prompt = b.prompt_tokens - b0.prompt_tokens;
    fleet.shutdown(Duration::from_secs(5)).await;
    let replay = if record { super::replayed(dir.path())? } else { Value::Null };
    let pct = |p: f64| nearest_rank(&latencies, p).unwrap_or(0.0);
    Ok((
        json!({
            "personas": PERSONAS.len(),
            "messages": asked.len(),
            "decisions_per_s": round(asked.len() as f64 / seconds, 3),
            "seconds": round(seconds, 2),
            "reply_p50_ms": round(pct(0.50), 0),
            "reply_p99_ms": round(pct(0.99), 0),
            "replies_by_model": by_model,
            "replies_by_rules": asked.len() - by_model,
            "model_calls": llm.requests - before.requests,
            // Calls and prompt tokens by what they were for.
            "by_purpose": llm.by_purpose.iter().map(|(k, p)| {
                let b = before.by_purpose.get(k).cloned().unwrap_or_default();
                (k.clone(), json!([p.calls - b.calls, p.tokens_in - b.tokens_in, p.tokens_out - b.tokens_out]))
            }).collect::<serde_json::Map<_, _>>(),
            "model_tokens_in": llm.tokens_in - before.tokens_in,
            "model_tokens_out": llm.tokens_out - before.tokens_out,
            "model_tok_s": round(b.model_tok_s, 1),
            // The model's time: passes that read prompt tokens, passes of generated rows only.
            "prompt_pass_s": round(b.prompt_pass_s - b0.prompt_pass_s, 2),
            "generation_pass_s": round(b.generation_pass_s - b0.generation_pass_s, 2),
            "max_batch": b.max_batch,
            "mean_batch": round(b.mean_batch, 2),
            "prefix_hit_rate": round(
                if prompt > 0 { (b.reused_tokens - b0.reused_tokens) as f64 / prompt as f64 } else { 0.0 },
                3
            ),
            "kv_peak_mb": round(b.kv_peak_bytes as f64 / (1 << 20) as f64, 1),
            "kv_bound_mb": round(b.kv_bound_bytes as f64 / (1 << 20) as f64, 0),
            // The run's recorded history fed to the lifecycles again (`mindfleet replay`).
            "replay": replay,
        }),
        texts,
    ))
}

/// Both runs on the same messages, batched first, after a batched run whose figures are not
/// kept; the models are in `models`.
///
/// The process's first run finds its heap cold: the model's keys and values grow it up to the
/// KV bound, and the kernel zeroes every new page (about half a second of the model's thread
/// here), which the run after it does not pay. The warm-up pays it, so both measured runs start
/// as a fleet that has been answering for a while does.
pub async fn cognition(models: &Path) -> anyhow::Result<Value> {
    let max_batch = mindfleet_core::config::LocalLlm::DEFAULT_MAX_BATCH;
    run(max_batch, true, models).await?;
    let (batched, batched_texts) = run(max_batch, true, models).await?;
    let (unbatched, unbatched_texts) = run(1, true, models).await?;
    let same = batched_texts.iter().filter(|(k, v)| unbatched_texts.get(*k) == Some(v)).count();
    let ratio =
        batched["decisions_per_s"].as_f64().unwrap_or(0.0) / unbatched["decisions_per_s"].as_f64().unwrap_or(1.0);
    Ok(json!({
        "bench": "cognition",
        "batched": batched,
        "unbatched": unbatched,
        "speedup": round(ratio, 2),
        // A reply depends on the persona's state when it was asked (its load, what it recalled),
        // which the pace of the run changes; the model's answer to one prompt does not
        // (tests/llm.rs checks that bit for bit).
        "identical_replies": same,
    }))
}
