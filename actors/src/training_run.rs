//! A training run: a LoRA adapter trained on a persona's graded study chats, judged on
//! held-out ones against the base model, and kept or discarded
//! ([`mindfleet_core::adapter`] has the files and the verdict).
//!
//! The run is plain blocking work on the thread that calls [`run`]; what decides when it may
//! go on is the `pause` it is given, called before every product of the training pass (see
//! `mindfleet_models::llama::lora`). It checkpoints every few steps into its run's directory, and
//! a run started again with the same id takes up its checkpoint: a restart loses at most the
//! steps since the last one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::adapter::{AdapterRecord, Scores, judge};
use mindfleet_core::config::TrainingConfig;
use mindfleet_core::llm::{ChatMessage, GenerateRequest};
use mindfleet_models::llama::lora::{Example, LoraConfig, PauseFn, Target, Trainer};
use mindfleet_models::llama::{Adapter, Llm};
use mindfleet_store::adapters::{AdapterDir, CHECKPOINT, JOB, WEIGHTS};
use serde::{Deserialize, Serialize};

/// How a run trains.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub lora: LoraConfig,
    /// Passes over the training chats.
    pub epochs: usize,
    /// Chats per optimizer step.
    pub batch: usize,
    /// Steps between checkpoints.
    pub checkpoint_every: usize,
    /// Longest answer written to a held-out question when grading.
    pub answer_tokens: usize,
    pub seed: u64,
}

impl Default for TrainOptions {
    /// As `[training]`'s defaults.
    fn default() -> TrainOptions {
        TrainOptions::from(&TrainingConfig::default())
    }
}

impl From<&TrainingConfig> for TrainOptions {
    /// `[training]` of the fleet file; a checkpoint every 4 steps, held-out answers of up to 64
    /// tokens, seed 7, the products on one thread (candle's own operations and the attention
    /// take every core; a second thread of products is slower on two).
    fn from(t: &TrainingConfig) -> TrainOptions {
        let targets = t.targets.iter().filter_map(|n| Target::ALL.into_iter().find(|x| x.short() == n)).collect();
        let lora = LoraConfig { rank: t.rank, alpha: t.alpha, targets, learning_rate: t.learning_rate, threads: 1 };
        TrainOptions { lora, epochs: t.epochs, batch: t.batch, checkpoint_every: 4, answer_tokens: 64, seed: 7 }
    }
}

/// One run: whose, on what, and where.
pub struct TrainJob {
    pub id: String,
    pub persona: String,
    pub topic: Option<String>,
    /// The GGUF the adapter adapts (the fleet's local model).
    pub model: PathBuf,
    pub dir: AdapterDir,
    /// Chats ending with the answer learned; the held-out ones are never trained on.
    pub train: Vec<Vec<ChatMessage>>,
    pub held_out: Vec<Vec<ChatMessage>>,
    pub options: TrainOptions,
    pub now_us: fn() -> i64,
}

/// How long the models stay idle before a run goes on: the calls of one piece of a persona's
/// work (recall, plan, reply) follow each other within it, so a run waits for the end of the
/// piece, not only of each call.
pub const IDLE_GRACE: Duration = Duration::from_millis(300);

/// The pause of a run in idle time: it waits while the process's models answer any request (a
/// person's reply, a persona's plan, an embedding) and for [`IDLE_GRACE`] after the last,
/// looking again every millisecond.
pub fn while_serving() -> PauseFn {
    Arc::new(|| {
        loop {
            match mindfleet_models::busy::idle_for() {
                Some(idle) if idle >= IDLE_GRACE => return,
                Some(idle) => std::thread::sleep(IDLE_GRACE - idle),
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    })
}

/// How a held-out answer is graded against the reference chat (0..=1).
pub type GradeFn<'a> = &'a dyn Fn(&str, &[ChatMessage]) -> f64;

/// The grade of an answer against the reference chat's answer: the share of the reference's
/// words (3 letters or more, any case) that the answer has. Lexical: it ranks answers by how
/// much of the reference they say, it does not prove them right.
pub fn reference_grade(answer: &str, reference: &[ChatMessage]) -> f64 {
    use mindfleet_core::adapter::words;
    let (said, want) = (words(answer), words(reference.last().map_or("", |m| m.content.as_str())));
    if want.is_empty() {
        return 0.0;
    }
    want.iter().filter(|w| said.contains(w)).count() as f64 / want.len() as f64
}

/// What a run trains on, written when it begins (`job.json`): a restart takes it up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Begun {
    pub persona: String,
    pub topic: Option<String>,
}

impl Begun {
    /// The `job.json` of run `id` of `persona`.
    pub fn read(dir: &AdapterDir, persona: &str, id: &str) -> Result<Begun, String> {
        let file = dir.run(persona, id).join(JOB);
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}:{}:{}: {e}", file.display(), e.line(), e.column()))
    }
}

/// What a run keeps between checkpoints besides the trainer's state: the base model's scores
/// (taken once, before any step) and the loss curve so far.
#[derive(Serialize, Deserialize)]
struct Progress {
    started_us: i64,
    before: Scores,
    losses: Vec<f32>,
    train_s: f64,
}

/// The run's file of [`Progress`], beside its checkpoint.
pub const PROGRESS: &str = "progress.json";

/// A finished run: its record (as written) and the adapter it trained, kept or not.
pub struct Trained {
    pub record: AdapterRecord,
    pub adapter: Arc<Adapter>,
}

/// Trains, judges and stores the adapter of `job`; `llm` (the same model file) writes the
/// held-out answers that `grade` grades.
pub fn run(job: &TrainJob, llm: &Llm, grade: GradeFn<'_>, pause: Option<PauseFn>) -> Result<Trained, String> {
    if !llm.trains() {
        return Err(format!(
            "{}: LoRA training runs on the fast llama path only; this model runs on {}",
            job.model.display(),
            llm.path()
        ));
    }
    let opts = &job.options;
    let held = examples(llm, &job.held_out, "held-out")?;
    let examples = examples(llm, &job.train, "training")?;
    if examples.is_empty() {
        return Err(format!("{}: no training chats", job.persona));
    }
    let context = examples.iter().chain(&held).map(|e| e.ids.len()).max().unwrap_or(1);
    let mut trainer = Trainer::open(&job.model, opts.lora.clone(), context, opts.seed)?;
    if let Some(p) = &pause {
        trainer.set_pause(p.clone());
    }
    let dir = job.dir.run(&job.persona, &job.id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_json(&dir.join(JOB), &Begun { persona: job.persona.clone(), topic: job.topic.clone() })?;
    let (checkpoint, progress_file) = (dir.join(CHECKPOINT), dir.join(PROGRESS));
    let mut progress = match std::fs::read(&progress_file) {
        Ok(bytes) if checkpoint.exists() => {
            trainer.resume(&checkpoint)?;
            serde_json::from_slice::<Progress>(&bytes).map_err(|e| format!("{}: {e}", progress_file.display()))?
        }
        _ => {
            let before = scores(&trainer, llm, None, &held, &job.held_out, grade, opts)?;
            Progress { started_us: (job.now_us)(), before, losses: Vec::new(), train_s: 0.0 }
        }
    };
    let per_epoch = examples.len().div_ceil(opts.batch.max(1));
    let total = per_epoch * opts.epochs.max(1);
    while trainer.steps() < total {
        let step = trainer.steps();
        let order = shuffled(examples.len(), opts.seed ^ (step / per_epoch) as u64);
        let at = (step % per_epoch) * opts.batch;
        let batch: Vec<Example> =
            order[at..(at + opts.batch).min(order.len())].iter().map(|&i| examples[i].clone()).collect();
        let t = Instant::now();
        progress.losses.push(trainer.step(&batch)?);
        progress.train_s += t.elapsed().as_secs_f64();
        if trainer.steps() % opts.checkpoint_every.max(1) == 0 && trainer.steps() < total {
            trainer.checkpoint(&checkpoint)?;
            write_json(&progress_file, &progress)?;
        }
    }
    let adapter = Arc::new(trainer.adapter()?);
    let after = scores(&trainer, llm, Some(adapter.clone()), &held, &job.held_out, grade, opts)?;
    let verdict = judge(&progress.before, &after, held.len());
    let lora = &opts.lora;
    let record = AdapterRecord {
        id: job.id.clone(),
        persona: job.persona.clone(),
        topic: job.topic.clone(),
        base_model: job.model.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        data_hash: format!("{:016x}", data_hash(&job.train)),
        train_examples: examples.len(),
        held_out: held.len(),
        rank: lora.rank,
        alpha: lora.alpha,
        targets: lora.targets.iter().map(|t| t.short().to_string()).collect(),
        learning_rate: lora.learning_rate,
        steps: trainer.steps(),
        losses: progress.losses,
        before: progress.before,
        after,
        verdict,
        train_s: to_micro(progress.train_s),
        started_us: progress.started_us,
        finished_us: (job.now_us)(),
    };
    if record.kept() {
        trainer.save(&dir.join(WEIGHTS))?;
    }
    job.dir.write(&record).map_err(|e| format!("{}: {e}", dir.display()))?;
    for f in [checkpoint, progress_file, dir.join(JOB)] {
        let _ = std::fs::remove_file(f);
    }
    Ok(Trained { record, adapter })
}

fn examples(llm: &Llm, chats: &[Vec<ChatMessage>], what: &str) -> Result<Vec<Example>, String> {
    chats
        .iter()
        .enumerate()
        .map(|(i, c)| Example::from_chat(llm.tokenizer(), c).map_err(|e| format!("{what} chat {}: {e}", i + 1)))
        .collect()
}

/// The held-out scores of the base model with `adapter` (none: the base model alone).
fn scores(
    trainer: &Trainer,
    llm: &Llm,
    adapter: Option<Arc<Adapter>>,
    held: &[Example],
    chats: &[Vec<ChatMessage>],
    grade: GradeFn<'_>,
    opts: &TrainOptions,
) -> Result<Scores, String> {
    if held.is_empty() {
        return Ok(Scores { perplexity: f64::NAN, grade: 0.0 });
    }
    let perplexity = trainer.perplexity(held, opts.batch)?;
    let mut sum = 0.0;
    for chat in chats {
        let prompt = chat[..chat.len() - 1].to_vec();
        let req = GenerateRequest::new(prompt, opts.answer_tokens);
        let answer = llm
            .generate_with(&req, adapter.clone(), |_| std::ops::ControlFlow::Continue(()))
            .map_err(|e| e.to_string())?;
        sum += grade(&answer.text, chat);
    }
    Ok(Scores { perplexity: to_micro(perplexity), grade: to_micro(sum / chats.len() as f64) })
}

/// `x` to six decimals: a record's figures read back from its JSON are then the same bits
/// (serde_json reads a number of fewer than 16 digits exactly, a longer one within a unit in
/// the last place).
fn to_micro(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// `0..n` in an order fixed by `seed` (Fisher-Yates on xorshift64*).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = seed.max(1);
    for i in (1..n).rev() {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        let j = (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// FNV-1a of the chats' roles and texts, in order.
fn data_hash(chats: &[Vec<ChatMessage>]) -> u64 {
    let mut bytes = Vec::new();
    for m in chats.iter().flatten() {
        bytes.extend_from_slice(m.role.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(m.content.as_bytes());
        bytes.push(0);
    }
    mindfleet_core::adapter::fnv1a(&bytes)
}

fn write_json(path: &std::path::Path, value: &impl Serialize) -> Result<(), String> {
    let tmp = path.with_extension("partial");
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
