//! `mindfleet bench lora`: a persona studies a public codebase nobody here wrote (Werkzeug
//! 3.0.6, as `bench rag-eval` fetches it), then an adapter trains on its graded study chats
//! while the fleet keeps answering, and is judged on held-out chats about other passages.
//!
//! 1. Study: one session per topic through `POST /ai/study` (topics: the public names Werkzeug
//!    defines, each with its file, in an order fixed by their hash) until the training file holds at least
//!    `train` chats to train on and `held_out` held out ([`hold_out`]: every chat about one
//!    source passage in [`HOLD_OUT_EVERY`]).
//! 2. Replies on the idle fleet: `rounds` questions to the persona, each timed to its reply.
//! 3. Training by the fleet's trainer, asked as `mindfleet ai train` asks it (`[training]`
//!    defaults): in the scheduler's background slot, pausing while the models answer anything;
//!    once its first checkpoint is written, `rounds` questions again: `reply_busy_ratio` is the
//!    median reply while training over the median idle one. `train_s` is the steps' time (the
//!    run's record), `run_s` the whole run's, from the request to its record (loading, the
//!    held-out scores before and after, the pauses).
//! 4. The run's held-out scores, before (base model) and after (with the adapter): perplexity of
//!    the reference answers and the grade of the answers the model writes
//!    ([`training_run::reference_grade`]: the share of the reference answer's words it has);
//!    generation speed with and without the adapter, taking turns.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_actors::training_run::{self, TrainOptions};
use mindfleet_core::config::FleetConfig;
use mindfleet_core::llm::{ChatMessage, GenerateRequest};
use mindfleet_models::llama::{Adapter, Llm};
use mindfleet_personas::study::training::{HOLD_OUT_EVERY, TrainingChat, hold_out, read_training};
use mindfleet_personas::study::training_file;
use mindfleet_store::adapters::{AdapterDir, RECORD, WEIGHTS};
use serde_json::{Value, json};

use super::embed::peak_rss_mb;
use super::study::{PERSONA, ask, fail, session};
use super::{percentile, round};
use mindfleet::client::Client;
use mindfleet::fleet::Fleet;

/// The questions asked of the persona, idle and while training.
const QUESTION: &str = "what does a WSGI middleware do?";

/// Topics from a Python tree: each public name it defines (`def`, `class`, methods too) with
/// the file that defines it (`bind_to_environ (routing/map.py)`), each once, in an order fixed
/// by their hash.
pub fn topics(tree: &Path) -> Vec<String> {
    let mut topics = Vec::new();
    let mut stack = vec![tree.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "py") {
                let file = p.strip_prefix(tree).unwrap_or(&p).to_string_lossy().replace('\\', "/");
                let file = file.strip_prefix("werkzeug/").unwrap_or(&file).to_string();
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for line in text.lines() {
                    let line = line.trim_start();
                    let rest = line.strip_prefix("def ").or_else(|| line.strip_prefix("class "));
                    let name: String =
                        rest.unwrap_or("").chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if name.len() > 3 && !name.starts_with('_') {
                        topics.push(format!("{name} ({file})"));
                    }
                }
            }
        }
    }
    topics.sort();
    topics.dedup();
    let mut hashed: Vec<(u64, String)> =
        topics.into_iter().map(|t| (mindfleet_core::adapter::fnv1a(t.as_bytes()), t)).collect();
    hashed.sort();
    hashed.into_iter().map(|(_, t)| t).collect()
}

/// Generated tokens per second over `rounds` answers to one prompt, with `adapter` and without,
/// taking turns.
fn gen_speed(llm: &Llm, adapter: &Arc<Adapter>, rounds: usize) -> anyhow::Result<(f64, f64)> {
    let req = GenerateRequest::new(
        vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user("Write a long story about a lighthouse keeper."),
        ],
        64,
    );
    let (mut with, mut without) = ((0, 0.0), (0, 0.0));
    for _ in 0..rounds {
        for (a, acc) in [(Some(adapter.clone()), &mut with), (None, &mut without)] {
            let g = llm.generate_with(&req, a, |_| std::ops::ControlFlow::Continue(())).map_err(fail)?;
            acc.0 += g.tokens_out;
            acc.1 += g.gen_ms / 1000.0;
        }
    }
    Ok((with.0 as f64 / with.1.max(1e-9), without.0 as f64 / without.1.max(1e-9)))
}

pub async fn lora(
    tree: &Path,
    source: &str,
    model: &Path,
    train: usize,
    held: usize,
    rounds: usize,
) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let toml = format!(
        "[fleet]\nname = \"bench-lora\"\n[admin]\naddr = \"127.0.0.1:0\"\n[training]\nnew_chats = 0\n\
         [[persona]]\nname = \"{PERSONA}\"\nrole = \"assistant\"\nrooms = [\"general\"]\nbrain = \"local\"\n\
         tokens_per_hour = 1000000000\ninferences_per_hour = 1000000\n"
    );
    let mut cfg = FleetConfig::from_toml(Path::new("bench-lora.toml"), &toml).map_err(fail)?;
    cfg.storage.data_dir = dir.path().to_path_buf();
    let fleet = Fleet::start(cfg).await?;
    let api = Client::new(&fleet.addr.to_string(), None);
    api.rag("index", &json!({ "paths": [tree] })).await.map_err(fail)?;

    // 1. Study until there is enough to train on and to hold out.
    let file = training_file(dir.path(), PERSONA);
    let (mut sessions, mut study_s) = (0u64, 0.0);
    let split = |chats: Vec<TrainingChat>| hold_out(chats, HOLD_OUT_EVERY);
    let (mut trained_on, mut held_out) = (Vec::new(), Vec::new());
    for topic in topics(tree) {
        if trained_on.len() >= train && held_out.len() >= held {
            break;
        }
        api.study(&json!({ "persona": PERSONA, "topic": topic })).await.map_err(fail)?;
        sessions += 1;
        let s = session(&fleet, sessions).await?;
        study_s += (s.finished_us - s.started_us) as f64 / 1e6;
        (trained_on, held_out) = split(read_training(&file).map_err(fail)?);
        let passed = s.answers.iter().filter(|a| a.passed()).count();
        eprintln!(
            "mindfleet: session {sessions} ({topic}): {}, {passed} of {} answers kept; {} chats to train on, {} held out",
            s.outcome,
            s.answers.len(),
            trained_on.len(),
            held_out.len()
        );
    }
    anyhow::ensure!(
        trained_on.len() >= train && held_out.len() >= held,
        "{sessions} sessions gave {} chats to train on and {} held out, short of {train} and {held}",
        trained_on.len(),
        held_out.len()
    );

    // 2. Replies on the idle fleet.
    let mut idle_ms = Vec::new();
    for r in 0..rounds {
        idle_ms.push(ask(&fleet, format!("@{PERSONA} {QUESTION} ({r})")).await?);
    }

    // 3. Training by the fleet's trainer (`POST /ai/train`, as `mindfleet ai train` asks it),
    // and the same replies meanwhile.
    let asked = Instant::now();
    let queued = api.train(&json!({ "persona": PERSONA })).await.map_err(fail)?;
    let id = queued["run"].as_str().unwrap_or_default().to_string();
    let adapters = AdapterDir::new(dir.path());
    // Training is under way once its first checkpoint is written (the base model's scores
    // are taken before it).
    let run = adapters.run(PERSONA, &id);
    let (progress, finished) = (run.join(training_run::PROGRESS), run.join(RECORD));
    // A run that fails leaves no record (the trainer logs why).
    let deadline = Instant::now() + Duration::from_secs(3600);
    while !progress.exists() && !finished.exists() {
        anyhow::ensure!(Instant::now() < deadline, "run {id} did not begin within an hour");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut busy_ms = Vec::new();
    for r in 0..rounds {
        busy_ms.push(ask(&fleet, format!("@{PERSONA} {QUESTION} (busy {r})")).await?);
    }
    let still_training = !finished.exists();
    while !finished.exists() {
        anyhow::ensure!(Instant::now() < deadline, "run {id} did not finish within an hour");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let run_s = asked.elapsed().as_secs_f64();
    let record = adapters.list(PERSONA).map_err(fail)?.into_iter().find(|r| r.id == id);
    let record = record.ok_or_else(|| anyhow::anyhow!("run {id} left no record"))?;
    let sched = ractor::call_t!(fleet.scheduler.actor(), mindfleet_core::sched::SchedulerMsg::Stats, 5000);
    let preempted = sched.map(|s| s.preempted).unwrap_or(0);
    fleet.shutdown(Duration::from_secs(5)).await;

    // 4. Speed with and without the adapter (kept: its weights are there).
    let llm = Llm::load(model).map_err(fail)?;
    let r = &record;
    let (with, without) = match r.kept() {
        true => {
            let adapter = Arc::new(Adapter::read(&run.join(WEIGHTS), r.alpha).map_err(fail)?);
            let (w, wo) = gen_speed(&llm, &adapter, 3)?;
            (Some(round(w, 1)), Some(round(wo, 1)))
        }
        false => (None, None),
    };
    for v in [&mut idle_ms, &mut busy_ms] {
        v.sort_by(f64::total_cmp);
    }
    let (idle, busy) = (percentile(&mut idle_ms, 0.5), percentile(&mut busy_ms, 0.5));
    Ok(json!({
        "bench": "lora",
        "source": source,
        "model": mindfleet_models::fetch::SMOLLM2.name,
        "study_sessions": sessions,
        "study_s": round(study_s, 1),
        "train_questions": r.train_examples,
        "heldout_questions": r.held_out,
        "rank": r.rank,
        "alpha": r.alpha,
        "targets": r.targets,
        "learning_rate": r.learning_rate,
        "steps": r.steps,
        "loss_first": r.losses.first(),
        "loss_last": r.losses.last(),
        "train_s": round(r.train_s, 1),
        "run_s": round(run_s, 1),
        "train_preempted": preempted,
        "ppl_before": round(r.before.perplexity, 3),
        "ppl_after": round(r.after.perplexity, 3),
        "ppl_ratio": round(r.after.perplexity / r.before.perplexity, 3),
        "grade_before": round(r.before.grade, 3),
        "grade_after": round(r.after.grade, 3),
        "verdict": r.verdict,
        "gen_tok_s_with_adapter": with,
        "gen_tok_s_without": without,
        "reply_idle_p50_ms": round(idle, 0),
        "reply_training_p50_ms": round(busy, 0),
        "reply_busy_ratio": round(busy / idle.max(1.0), 2),
        "replies_all_during_training": still_training,
        "peak_rss_mb": round(peak_rss_mb(), 0),
    }))
}

/// `mindfleet bench lora-step`: seconds a training step of `batch` chats of about `tokens`
/// tokens takes with `[training]`'s defaults, over `steps` steps after a first one (which
/// allocates what the others reuse). The chats are made up (the time depends on their length,
/// not their words).
pub fn steps(model: &Path, batch: usize, tokens: usize, steps: usize, threads: Option<usize>) -> anyhow::Result<Value> {
    use mindfleet_models::llama::lora::{Example, Trainer};
    let llm = Llm::load(model).map_err(fail)?;
    let words = ["request", "environ", "routing", "map", "bind", "the", "of", "returns", "a", "rule", "url", "and"];
    let examples = (0..batch)
        .map(|i| {
            let answer: Vec<&str> = (0..tokens * 2 / 3).map(|w| words[(w * 7 + i) % words.len()]).collect();
            let chat = [
                ChatMessage::system("You are ann, an assistant. Answer from the project's sources."),
                ChatMessage::user(format!("What does rule {i} of the URL map do?")),
                ChatMessage::assistant(answer.join(" ")),
            ];
            Example::from_chat(llm.tokenizer(), &chat).map_err(fail)
        })
        .collect::<anyhow::Result<Vec<Example>>>()?;
    let context = examples.iter().map(|e| e.ids.len()).max().unwrap_or(1);
    let mut options = TrainOptions::default();
    options.lora.threads = threads.unwrap_or(options.lora.threads).max(1);
    let mut trainer = Trainer::open(model, options.lora.clone(), context, options.seed).map_err(fail)?;
    trainer.step(&examples).map_err(fail)?;
    let t = Instant::now();
    for _ in 0..steps {
        trainer.step(&examples).map_err(fail)?;
    }
    let step_s = t.elapsed().as_secs_f64() / steps as f64;
    let total: usize = examples.iter().map(|e| e.ids.len()).sum();
    Ok(json!({
        "bench": "lora-step",
        "batch": batch,
        "tokens_per_chat": round(total as f64 / batch as f64, 1),
        "threads": options.lora.threads,
        "steps": steps,
        "step_s": round(step_s, 2),
        "tokens_per_s": round(total as f64 / step_s, 0),
    }))
}
