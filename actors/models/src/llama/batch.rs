//! Continuous batching: many requests decoded together, one forward pass for all of them.
//!
//! A model of this size reading one token reads all its weights: generation is bound by memory
//! bandwidth, so the tokens of several sequences cost little more in one pass than one token
//! does alone. An [`Engine`] holds the sequences being answered. Each [`Engine::step`] is one
//! pass over every one of them: the next token of each sequence that is generating (or scoring
//! a label), and a piece of the prompt of each that is still reading one, at most
//! [`BatchConfig::step_tokens`] prompt tokens in all, so a long prompt joining does not hold up
//! the others' next tokens for long. Requests join between passes ([`Engine::admit`]) and leave
//! when done, so a short answer never waits for a long one.
//!
//! What a request gets does not depend on its company: every product, norm and attention row
//! of a pass is computed for one token at a time in the same order as when the request runs
//! alone ([`super::forward::Llama::forward_batch`]), so greedy answers are the same token for
//! token, batched or not, and with a reused prefix or without.
//!
//! On the general path ([`super::general`]) the engine takes one request at a time: a batch of
//! one, the prompt read in one pass, and no prefix kept.
//!
//! **Prefix reuse.** The prompts of one persona share a long beginning (the chat template, its
//! role and instructions). With [`BatchConfig::prefix_reuse`], when a request ends the keys and
//! values of its prompt are kept (its cache moves there, cut back to the prompt), and a new
//! prompt starts from a copy of the kept prompt it shares the longest beginning with, reading
//! only the rest. An answer's keys and values are kept with its prompt, and a later prompt that
//! quotes the answer as the assistant's turn (a lesson continuing its reply's conversation)
//! reads it in the ids the model wrote ([`Written`]), so it goes on from them: the text
//! tokenized anew is seldom those ids (`Al` `ice` where the model wrote `Alice`).
//!
//! **Memory.** Keys and values are bounded by [`BatchConfig::kv_bytes`]: a request reserves, when
//! it joins, room for its prompt and its longest answer, and waits outside the batch while that
//! does not fit beside the others; kept prefixes use what the batch does not, least recently
//! used first out.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling as CandleSampling};
use mindfleet_core::llm::Filled;
use serde_json::Value;

use super::adapter::Adapter;
use super::backend::{KvCache, Part};
use super::fill::{Filling, Walker};
use super::forward::Scratch;
use super::repeat::Guard;
use super::schema::Shape;
use super::scoring::Scoring;
use super::tokenizer::Written;
use super::{
    AnswerText, ChatMessage, Classification, GenerateRequest, Generation, Llm, LlmError, Sampling, Stop, TokenLogprob,
    Trim, ms,
};

/// Prompt tokens per pass by default: one pass for most prompts, bounded attention scratch for
/// long ones.
pub const STEP_TOKENS: usize = 512;

/// Least tokens in common with a kept prompt for it to be reused (fewer save little and
/// cost a copy).
const MIN_REUSE: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Most requests in one pass (1: one request at a time).
    pub max_batch: usize,
    /// Bound on the bytes of keys and values held: the requests' in the batch and the kept
    /// prefixes'.
    pub kv_bytes: usize,
    /// Keep prompts read and start new prompts from their longest common beginning.
    pub prefix_reuse: bool,
    /// Most prompt tokens read in one pass.
    pub step_tokens: usize,
}

impl BatchConfig {
    /// One request at a time, nothing kept: what [`Llm::generate`] and [`Llm::classify`] run.
    pub fn single() -> BatchConfig {
        BatchConfig { max_batch: 1, kv_bytes: usize::MAX, prefix_reuse: false, step_tokens: STEP_TOKENS }
    }
}

/// What a request asks.
#[derive(Debug, Clone)]
pub enum Work {
    Generate(GenerateRequest),
    /// The log-probability of each label as the beginning of the answer.
    Classify {
        messages: Vec<ChatMessage>,
        labels: Vec<String>,
    },
    /// A JSON value of `schema` as the answer, in at most `max_tokens` tokens ([`super::fill`]).
    Fill {
        messages: Vec<ChatMessage>,
        schema: Value,
        max_tokens: usize,
    },
}

#[derive(Debug)]
pub enum Outcome {
    Generated(Result<Generation, LlmError>),
    Classified(Result<Classification, LlmError>),
    Filled(Result<Filled, LlmError>),
}

/// Where a generated request's text goes as it comes; `Break` cancels the request.
pub type OnToken<'a> = Box<dyn FnMut(&str) -> ControlFlow<()> + 'a>;

/// A request tokenized and checked, ready to join a batch.
pub struct Ready<'a, T> {
    tag: T,
    /// The adapter it is answered with, if any ([`Ready::with_adapter`]).
    adapter: Option<Arc<Adapter>>,
    prompt: Vec<u32>,
    trimmed: Option<Trim>,
    /// Tokens it may hold in its cache at most.
    tokens: usize,
    task: Task<'a>,
}

impl<T> Ready<'_, T> {
    /// The request answered with `adapter` applied to the model's projections.
    pub fn with_adapter(mut self, adapter: Arc<Adapter>) -> Self {
        self.adapter = Some(adapter);
        self
    }
}

/// Figures of an engine since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchStats {
    pub passes: u64,
    /// Requests in passes, summed over passes: over `passes`, the mean batch.
    pub batched: u64,
    /// Tokens read in passes (prompt pieces and generated tokens), and the seconds the passes
    /// took.
    pub tokens: u64,
    pub busy_s: f64,
    /// Of those, the seconds of the passes that read prompt tokens (the others read generated
    /// tokens or labels only): batching shares the weights' reads of the others among their
    /// rows, while a prompt's tokens cost each their own products, batched or not.
    pub prompt_busy_s: f64,
    /// Prompt tokens of the requests admitted, and how many of them came from a kept prefix.
    pub prompt_tokens: u64,
    pub reused_tokens: u64,
    /// Requests in the batch now.
    pub active: usize,
    /// Bytes of keys and values now: reserved by the batch, and held by kept prefixes.
    pub kv_reserved: usize,
    pub kv_prefixes: usize,
    /// The most `kv_reserved + kv_prefixes` has been.
    pub kv_peak: usize,
    pub prefixes: usize,
}

pub struct Engine<'a, T> {
    llm: &'a Llm,
    config: BatchConfig,
    active: Vec<Seq<'a, T>>,
    kept: Vec<Kept>,
    /// The answers given, in the ids they were written in (with prefix reuse).
    written: Written,
    scratch: Scratch,
    stats: BatchStats,
    tick: u64,
}

/// A prompt's keys and values, kept for the prompts that begin like it.
struct Kept {
    /// The adapter the prompt was read with: its keys and values serve prompts read with it.
    adapter: Option<Arc<Adapter>>,
    ids: Vec<u32>,
    cache: KvCache,
    /// What `cache` holds ([`KvCache::bytes`]).
    bytes: usize,
    used: u64,
}

struct Seq<'a, T> {
    tag: T,
    adapter: Option<Arc<Adapter>>,
    cache: KvCache,
    prompt: Vec<u32>,
    trimmed: Option<Trim>,
    /// What the next pass reads for it: the rest of its prompt, or its last token.
    input: Vec<u32>,
    reserved: usize,
    admitted: Instant,
    task: Task<'a>,
}

enum Task<'a> {
    Generate(Box<Gen<'a>>),
    Classify(Box<Scoring>),
    Fill(Box<Filling>),
}

struct Gen<'a> {
    max_tokens: usize,
    top_logprobs: Option<usize>,
    sampler: LogitsProcessor,
    /// The penalty and bans of the request's [`super::Repetition`], when it asks for any.
    guard: Option<Guard>,
    answer: AnswerText,
    on_token: OnToken<'a>,
    text: String,
    tokens_out: usize,
    /// The ids it wrote (an end of turn not among them).
    wrote: Vec<u32>,
    logprobs: Vec<TokenLogprob>,
    ttft_ms: Option<f64>,
    prompt_ms: Option<f64>,
    generating: Option<Instant>,
}

impl<'a, T> Engine<'a, T> {
    pub fn new(llm: &'a Llm, config: BatchConfig) -> Engine<'a, T> {
        let config =
            BatchConfig { max_batch: config.max_batch.max(1), step_tokens: config.step_tokens.max(1), ..config };
        // The general path reads one request at a time, a prompt in one pass from its start, and
        // keeps no keys and values a later prompt could start from (see `super::general`).
        let config = match llm.batches() {
            true => config,
            false => BatchConfig { max_batch: 1, step_tokens: usize::MAX, prefix_reuse: false, ..config },
        };
        Engine {
            llm,
            config,
            active: Vec::new(),
            kept: Vec::new(),
            written: Written::default(),
            scratch: Scratch::default(),
            stats: BatchStats::default(),
            tick: 0,
        }
    }

    pub fn config(&self) -> BatchConfig {
        self.config
    }

    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    pub fn stats(&self) -> BatchStats {
        BatchStats { active: self.active.len(), prefixes: self.kept.len(), ..self.stats }
    }

    /// Tokenizes and checks a request; a bad one is answered at once (the error, with its tag).
    pub fn prepare(&self, work: Work, tag: T, on_token: OnToken<'a>) -> Result<Ready<'a, T>, Box<(T, Outcome)>> {
        match work {
            Work::Generate(req) => match self.prepare_generate(req, on_token) {
                Ok((prompt, trimmed, tokens, task)) => Ok(Ready { tag, adapter: None, prompt, trimmed, tokens, task }),
                Err(e) => Err(Box::new((tag, Outcome::Generated(Err(e))))),
            },
            Work::Classify { messages, labels } => match self.prepare_classify(&messages, labels) {
                Ok((prompt, trimmed, tokens, task)) => Ok(Ready { tag, adapter: None, prompt, trimmed, tokens, task }),
                Err(e) => Err(Box::new((tag, Outcome::Classified(Err(e))))),
            },
            Work::Fill { messages, schema, max_tokens } => match self.prepare_fill(&messages, &schema, max_tokens) {
                Ok((prompt, trimmed, tokens, task)) => Ok(Ready { tag, adapter: None, prompt, trimmed, tokens, task }),
                Err(e) => Err(Box::new((tag, Outcome::Filled(Err(e))))),
            },
        }
    }

    fn prepare_generate(
        &self,
        req: GenerateRequest,
        on_token: OnToken<'a>,
    ) -> Result<(Vec<u32>, Option<Trim>, usize, Task<'a>), LlmError> {
        if req.max_tokens == 0 {
            return Err(LlmError::Request("max_tokens must be at least 1".into()));
        }
        if req.stop.iter().any(String::is_empty) {
            return Err(LlmError::Request("an empty stop string".into()));
        }
        let (seed, sampling) = match req.sampling {
            Sampling::Greedy => (0, CandleSampling::ArgMax),
            Sampling::TopP { temperature, top_p, seed } => {
                if !(temperature > 0.0 && temperature.is_finite() && top_p > 0.0 && top_p <= 1.0) {
                    return Err(LlmError::Request(format!(
                        "top-p sampling needs temperature > 0 and 0 < top_p <= 1, not {temperature} and {top_p}"
                    )));
                }
                (seed, CandleSampling::TopP { p: top_p, temperature })
            }
        };
        let r = req.repetition;
        if !(r.penalty > 0.0 && r.penalty.is_finite()) {
            return Err(LlmError::Request(format!("the repetition penalty must be above 0, not {}", r.penalty)));
        }
        let guard = if r.penalty != 1.0 || r.no_repeat_ngram > 0 || r.no_copy_ngram > 0 {
            // The message answered, as it reads without the turn around it.
            let question = match req.messages.iter().rev().find(|m| m.role == "user") {
                Some(m) if r.penalty != 1.0 || r.no_copy_ngram > 0 => self.llm.tokenizer.encode_plain(&m.content)?,
                _ => Vec::new(),
            };
            Some(Guard::new(r, question))
        } else {
            None
        };
        let prompt = self.llm.prompt_as(&req.messages, req.max_tokens, &self.written)?;
        let tokens = prompt.ids.len() + req.max_tokens;
        let generation = Gen {
            max_tokens: req.max_tokens,
            top_logprobs: req.top_logprobs,
            sampler: LogitsProcessor::from_sampling(seed, sampling),
            guard,
            answer: AnswerText::new(&req.stop, r.stop_repeated_sentence),
            on_token,
            text: String::new(),
            tokens_out: 0,
            wrote: Vec::new(),
            logprobs: Vec::new(),
            ttft_ms: None,
            prompt_ms: None,
            generating: None,
        };
        Ok((prompt.ids, prompt.trimmed, tokens, Task::Generate(Box::new(generation))))
    }

    fn prepare_classify(
        &self,
        messages: &[ChatMessage],
        labels: Vec<String>,
    ) -> Result<(Vec<u32>, Option<Trim>, usize, Task<'a>), LlmError> {
        if labels.is_empty() || labels.iter().any(String::is_empty) {
            return Err(LlmError::Request("classify needs labels, none empty".into()));
        }
        let ids: Vec<Vec<u32>> = labels.iter().map(|l| self.llm.tokenizer.encode_plain(l)).collect::<Result<_, _>>()?;
        let longest = ids.iter().map(Vec::len).max().unwrap_or(1);
        let prompt = self.llm.prompt_as(messages, longest, &self.written)?;
        let tokens = prompt.ids.len() + longest;
        Ok((prompt.ids, prompt.trimmed, tokens, Task::Classify(Box::new(Scoring::new(labels, ids)))))
    }

    /// The prompt of a fill ends with the beginning of its answer (`{"name": "`, say), which
    /// counts in its `max_tokens`.
    fn prepare_fill(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
        max_tokens: usize,
    ) -> Result<(Vec<u32>, Option<Trim>, usize, Task<'a>), LlmError> {
        if max_tokens == 0 {
            return Err(LlmError::Request("max_tokens must be at least 1".into()));
        }
        let (walker, opening) = Walker::new(Shape::compile(schema)?);
        let prompt = self.llm.prompt_as(messages, max_tokens, &self.written)?;
        let opening = self.llm.tokenizer.encode_plain(&opening)?;
        if opening.len() > max_tokens {
            return Err(LlmError::Request(format!(
                "max_tokens {max_tokens}: the answer's opening alone takes {}",
                opening.len()
            )));
        }
        let (start, tokens) = (prompt.ids.len(), prompt.ids.len() + max_tokens);
        let mut ids = prompt.ids;
        ids.extend(opening);
        Ok((ids, prompt.trimmed, tokens, Task::Fill(Box::new(Filling::new(walker, max_tokens, start)))))
    }

    /// Whether `ready` can join the batch now: a place in it, and room for its keys and values
    /// beside the others' (kept prefixes make room). Alone, a request always joins.
    pub fn has_room(&self, ready: &Ready<'_, T>) -> bool {
        self.active.is_empty()
            || (self.active.len() < self.config.max_batch
                && self.stats.kv_reserved + self.llm.model.kv_bytes(ready.tokens) <= self.config.kv_bytes)
    }

    /// Adds `ready` to the batch; its prompt is read from the next pass on.
    pub fn admit(&mut self, ready: Ready<'a, T>) {
        let Ready { tag, adapter, prompt, trimmed, tokens, task } = ready;
        // The kept prompt to start from is found before kept prompts make room for this one.
        let cache = self.start(adapter.as_ref(), &prompt, tokens);
        let reserved = self.llm.model.kv_bytes(tokens);
        self.stats.kv_reserved += reserved;
        self.make_room(0);
        self.stats.prompt_tokens += prompt.len() as u64;
        self.stats.reused_tokens += cache.len() as u64;
        let input = prompt[cache.len()..].to_vec();
        crate::busy::begin(1);
        self.active.push(Seq { tag, adapter, cache, prompt, trimmed, input, reserved, admitted: Instant::now(), task });
        self.note_peak();
    }

    /// A cache for `prompt` read with `adapter`, with room for `tokens`: a copy of the longest
    /// beginning a prompt kept with the same adapter shares with it (all but its last token,
    /// whose logits are needed), else an empty one.
    fn start(&mut self, adapter: Option<&Arc<Adapter>>, prompt: &[u32], tokens: usize) -> KvCache {
        self.tick += 1;
        let best = self
            .kept
            .iter_mut()
            .filter(|k| same(k.adapter.as_ref(), adapter))
            .map(|k| {
                let common = k.ids.iter().zip(prompt).take_while(|(a, b)| a == b).count();
                (common.min(prompt.len() - 1), k)
            })
            .max_by_key(|(common, _)| *common);
        match best {
            Some((common, k)) if common >= MIN_REUSE => {
                k.used = self.tick;
                k.cache.prefix(common, tokens)
            }
            _ => {
                let mut cache = self.llm.model.cache();
                cache.reserve(tokens);
                cache
            }
        }
    }

    /// Keeps the keys and values of `prompt` read (the cache of a request that ended, cut back
    /// to its prompt and the answer's tokens read), for the prompts that begin like it.
    fn keep(&mut self, adapter: Option<Arc<Adapter>>, prompt: Vec<u32>, mut cache: KvCache) {
        self.tick += 1;
        // A prompt kept already, or one that begins with this one: nothing new to keep.
        if let Some(k) =
            self.kept.iter_mut().find(|k| same(k.adapter.as_ref(), adapter.as_ref()) && k.ids.starts_with(&prompt))
        {
            k.used = self.tick;
            return;
        }
        cache.truncate(prompt.len());
        let bytes = cache.bytes();
        // Kept prompts this one begins with are kept within it.
        let mut freed = 0;
        self.kept.retain(|k| {
            let within = same(k.adapter.as_ref(), adapter.as_ref()) && prompt.starts_with(&k.ids);
            freed += within as usize * k.bytes;
            !within
        });
        self.stats.kv_prefixes -= freed;
        if bytes > self.config.kv_bytes.saturating_sub(self.stats.kv_reserved) {
            return;
        }
        self.make_room(bytes);
        self.stats.kv_prefixes += bytes;
        self.kept.push(Kept { adapter, ids: prompt, cache, bytes, used: self.tick });
        self.note_peak();
    }

    /// Drops the least recently used kept prompts until `more` bytes fit beside what is held.
    fn make_room(&mut self, more: usize) {
        while !self.kept.is_empty() && self.stats.kv_reserved + self.stats.kv_prefixes + more > self.config.kv_bytes {
            let oldest = (0..self.kept.len()).min_by_key(|i| self.kept[*i].used).expect("not empty");
            let k = self.kept.swap_remove(oldest);
            self.stats.kv_prefixes -= k.bytes;
        }
    }

    fn note_peak(&mut self) {
        self.stats.kv_peak = self.stats.kv_peak.max(self.stats.kv_reserved + self.stats.kv_prefixes);
    }

    /// One forward pass over the batch; the requests it finished, with their tags.
    pub fn step(&mut self) -> Vec<(T, Outcome)> {
        if self.active.is_empty() {
            return Vec::new();
        }
        // Every request's next token; prompt pieces within the pass's budget, oldest first.
        let mut budget = self.config.step_tokens;
        let mut parts = Vec::with_capacity(self.active.len());
        let mut which = Vec::with_capacity(self.active.len());
        for (i, s) in self.active.iter_mut().enumerate() {
            let reading = s.cache.len() < s.prompt.len();
            let take = if reading { s.input.len().min(budget) } else { s.input.len() };
            if take == 0 {
                continue;
            }
            if reading {
                budget -= take;
            }
            parts.push(Part {
                cache: &mut s.cache,
                ids: &s.input[..take],
                prompt: reading,
                adapter: s.adapter.as_deref(),
            });
            which.push((i, take));
        }
        self.stats.passes += 1;
        self.stats.batched += parts.len() as u64;
        self.stats.tokens += parts.iter().map(|p| p.ids.len() as u64).sum::<u64>();
        let reads_prompt = parts.iter().any(|p| p.prompt);
        let started = Instant::now();
        let logits = self.llm.forward_batch(&mut self.scratch, &mut parts);
        let took = started.elapsed().as_secs_f64();
        self.stats.busy_s += took;
        if reads_prompt {
            self.stats.prompt_busy_s += took;
        }
        drop(parts);
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                // A pass failed for all: every request in it ends with the error.
                return which.iter().rev().map(|(i, _)| self.retire(*i, Err(e.to_string()))).collect();
            }
        };
        let mut done = Vec::new();
        for ((i, take), logits) in which.into_iter().zip(logits).rev() {
            self.active[i].input.drain(..take);
            if self.active[i].cache.len() < self.active[i].prompt.len() {
                continue;
            }
            if self.active[i].input.is_empty() && self.active[i].cache.len() == self.active[i].prompt.len() {
                self.prompt_read(i);
            }
            if let Some(ended) = self.advance(i, &logits) {
                done.push(self.retire(i, ended));
            }
        }
        done
    }

    /// The request's prompt is read: its time noted.
    fn prompt_read(&mut self, i: usize) {
        let s = &mut self.active[i];
        match &mut s.task {
            Task::Generate(g) => {
                g.prompt_ms = Some(ms(s.admitted));
                g.generating = Some(Instant::now());
            }
            Task::Fill(f) => {
                f.prompt_ms = Some(ms(s.admitted));
                f.generating = Some(Instant::now());
            }
            Task::Classify(_) => {}
        }
    }

    /// Takes the logits of the request's last pass; how it ended, when it did.
    fn advance(&mut self, i: usize, logits: &[f32]) -> Option<Result<Ended, String>> {
        let s = &mut self.active[i];
        match &mut s.task {
            Task::Generate(g) => {
                g.next(self.llm, s.admitted, logits, &mut s.input).map(|stop| Ok(Ended::Generated(stop)))
            }
            Task::Classify(c) => c.next(logits, &mut s.input, &mut s.cache, s.prompt.len()).map(|()| Ok(Ended::Scored)),
            Task::Fill(f) => {
                f.next(&self.llm.tokenizer, self.llm.vocab(), logits, &mut s.input, &mut s.cache).map(|filled| {
                    filled.map(Ended::Filled).map_err(|e| match e {
                        LlmError::Request(why) => why,
                        e => e.to_string(),
                    })
                })
            }
        }
    }

    /// Takes request `i` out of the batch with its outcome.
    fn retire(&mut self, i: usize, ended: Result<Ended, String>) -> (T, Outcome) {
        let s = self.active.swap_remove(i);
        crate::busy::end(1);
        self.stats.kv_reserved -= s.reserved;
        let tokens_in = s.prompt.len();
        let read = s.cache.len();
        let mut task = s.task;
        // Its keys and values are kept for the prompts that begin like its own, with the
        // answer's tokens read: moved, not copied (a prompt read in full only).
        if self.config.prefix_reuse && ended.is_ok() && s.cache.len() >= tokens_in {
            let mut ids = s.prompt;
            if let Task::Generate(g) = &mut task {
                ids.extend_from_slice(&g.wrote[..s.cache.len() - tokens_in]);
                match self.llm.tokenizer.spell(&g.text, &g.wrote) {
                    Ok(spelled) => self.written.note(g.text.clone(), spelled),
                    Err(e) => tracing::warn!(error = %e, "an answer's text did not tokenize: not noted"),
                }
            }
            self.keep(s.adapter, ids, s.cache);
        }
        let outcome = match (task, ended) {
            (Task::Generate(g), Ok(Ended::Generated(stop))) => {
                Outcome::Generated(Ok(g.finish(stop, tokens_in, s.trimmed)))
            }
            (Task::Classify(c), Ok(Ended::Scored)) => {
                Outcome::Classified(Ok(Classification { scores: c.into_scores(), tokens_in }))
            }
            (Task::Fill(f), Ok(Ended::Filled(value))) => {
                Outcome::Filled(Ok(f.finish(value, tokens_in, read, s.trimmed)))
            }
            (_, Ok(_)) => unreachable!("a generation ends generated, a classification scored, a fill filled"),
            (Task::Generate(_), Err(e)) => Outcome::Generated(Err(LlmError::Request(e))),
            (Task::Classify(_), Err(e)) => Outcome::Classified(Err(LlmError::Request(e))),
            (Task::Fill(_), Err(e)) => Outcome::Filled(Err(LlmError::Request(e))),
        };
        (s.tag, outcome)
    }
}

impl<T> Drop for Engine<'_, T> {
    fn drop(&mut self) {
        crate::busy::end(self.active.len());
    }
}

/// Whether two requests are read with the same adapter (the same one in memory, or none).
fn same(a: Option<&Arc<Adapter>>, b: Option<&Arc<Adapter>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

/// How a request in the batch ended.
enum Ended {
    Generated(Stop),
    Scored,
    Filled(Value),
}

impl Gen<'_> {
    /// Samples the next token from `logits` (penalised and with tokens banned, when the request
    /// asks) and gives out its text; why it stops, when it does, else the token to read next in
    /// `input`.
    fn next(&mut self, llm: &Llm, admitted: Instant, logits: &[f32], input: &mut Vec<u32>) -> Option<Stop> {
        let guarded = self.guard.as_mut().map(|guard| {
            let mut l = logits.to_vec();
            guard.apply(&mut l, &self.wrote);
            l
        });
        let sampled = guarded.as_deref().unwrap_or(logits);
        let tensor = Tensor::from_slice(sampled, sampled.len(), &Device::Cpu);
        let next = match tensor.and_then(|t| self.sampler.sample(&t)) {
            Ok(next) => next,
            // Sampling a vector of floats fails only on a broken model; end the answer here.
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed: the answer ends");
                return Some(Stop::Eos);
            }
        };
        self.ttft_ms.get_or_insert_with(|| ms(admitted));
        if llm.tokenizer.ends_turn(next) {
            return Some(Stop::Eos);
        }
        if let Some(k) = self.top_logprobs {
            self.logprobs.push(llm.token_logprob(logits, next, k));
        }
        self.tokens_out += 1;
        self.wrote.push(next);
        let (piece, ended) = self.answer.push(llm.tokenizer.token_bytes(next));
        if !piece.is_empty() {
            self.text.push_str(&piece);
            if (self.on_token)(&piece).is_break() && ended.is_none() {
                return Some(Stop::Cancelled);
            }
        }
        if ended.is_some() {
            return ended;
        }
        if self.tokens_out == self.max_tokens {
            return Some(Stop::MaxTokens);
        }
        input.push(next);
        None
    }

    fn finish(mut self, stop: Stop, tokens_in: usize, trimmed: Option<Trim>) -> Generation {
        let (rest, stop) = self.answer.finish(stop);
        if !rest.is_empty() {
            self.text.push_str(&rest);
            let _ = (self.on_token)(&rest);
        }
        let prompt_ms = self.prompt_ms.unwrap_or(0.0);
        Generation {
            text: self.text,
            tokens_in,
            tokens_out: self.tokens_out,
            prompt_ms,
            gen_ms: self.generating.map_or(0.0, ms),
            ttft_ms: self.ttft_ms.unwrap_or(prompt_ms),
            stop,
            trimmed,
            logprobs: self.logprobs,
        }
    }
}
