//! Text generation with SmolLM2-135M-Instruct (llama architecture, GGUF), and GGUF files of the
//! common small architectures on candle's models ([`general`]): the model's own
//! tokenizer and chat template, streamed generation within an honest context budget, label
//! scoring, JSON values of a schema filled (a tool's arguments, [`fill`]), and a Q4_1 -> Q8_0
//! rewrite of the weights.
//!
//! [`Llm`] is synchronous and CPU-bound like [`crate::embed::Embedder`]: callers run it on a
//! thread of their own, never on the tokio workers that carry the actors (`mindfleet-actors`'
//! `LlmWorker` runs it on its slot threads). It is `Sync`: the
//! weights are shared and each request has a KV cache of its own.
//!
//! The forward pass is our own ([`forward`], on the Q8_0 kernels of [`q8`]); candle reads the
//! GGUF file and samples.
//!
//! # Threads
//!
//! A forward pass runs on its caller's thread and the `Llm`'s own [`LlmConfig::threads`]` - 1`
//! workers (`llm-1`, `llm-2`, ...), which spin between the steps of a pass and sleep between
//! requests. Forward passes take turns process-wide: requests running at once
//! interleave pass by pass instead of oversubscribing the cores (2 threads on 2 busy cores ran
//! several times slower than 1).

pub mod adapter;
mod backend;
pub mod batch;
mod budget;
pub mod fill;
mod forward;
pub mod general;
pub mod lora;
mod q8;
mod quant;
pub mod repeat;
pub mod schema;
mod scoring;
mod tokenizer;

use std::fs::File;
use std::io::BufReader;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use candle_core::quantized::gguf_file::{Content, Value};

use crate::pool::Team;
pub use adapter::Adapter;
use backend::{KvCache, Model, Part};
use batch::{BatchConfig, Engine, Outcome, Work};
use forward::{Llama, Scratch};

pub use mindfleet_core::llm::{
    ChatMessage, Classification, Filled, GenerateRequest, Generation, LabelScore, Repetition, Sampling, Stop,
    TokenLogprob, TopLogprob, Trim, margin,
};
pub use quant::{requantize, runnable};
pub use tokenizer::GgufTokenizer;

/// The largest GGUF this loader opens; SmolLM2-135M is 98 MB as Q4_1, 145 MB as Q8_0.
const MAX_FILE_BYTES: u64 = 8 << 30;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    #[error("{file}: {message}")]
    Load { file: PathBuf, message: String },
    #[error("{file}: {message}")]
    Write { file: PathBuf, message: String },
    #[error("tokenizing: {0}")]
    Tokenize(String),
    #[error("request: {0}")]
    Request(String),
    /// An OpenAI-compatible endpoint could not be reached or refused the request.
    #[error("{url}: {message}")]
    Endpoint { url: String, message: String },
    #[error(
        "context: the system message and the last user message take {needed} tokens, with {max_tokens} to generate more than the context of {context}"
    )]
    ContextOverflow { needed: usize, max_tokens: usize, context: usize },
    #[error("model: {0}")]
    Model(#[from] candle_core::Error),
    /// A schema to fill that has a construct [`schema`] does not read (the field named).
    #[error("schema: {0}")]
    Schema(#[from] schema::SchemaError),
}

/// A conversation's prompt as the model reads it: the chat template's ids, fitted to the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub trimmed: Option<Trim>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlmConfig {
    /// Upper bound on prompt plus generated tokens; the model's trained length bounds it too.
    pub max_context: usize,
    /// Threads inference runs on; `None` takes [`default_threads`].
    pub threads: Option<usize>,
}

impl Default for LlmConfig {
    fn default() -> LlmConfig {
        LlmConfig { max_context: 2048, threads: None }
    }
}

/// The inference threads of an [`Llm`] whose config names none: `CANDLE_NUM_THREADS`, else
/// `RAYON_NUM_THREADS`, else the physical cores (as for the embedding model).
pub fn default_threads() -> usize {
    candle_core::utils::get_num_threads()
}

pub struct Llm {
    model: Model,
    tokenizer: GgufTokenizer,
    context: usize,
    team: Team,
    threads: usize,
    file: PathBuf,
    /// The tokens sorted for [`Llm::fill`], on the first fill.
    vocab: OnceLock<fill::Vocab>,
}

impl Llm {
    /// Loads a GGUF with the default [`LlmConfig`].
    pub fn load(path: &Path) -> Result<Llm, LlmError> {
        Llm::load_with(path, LlmConfig::default())
    }

    /// Loads a GGUF of one of the [`general::ARCHITECTURES`]: a dense llama on the fast path
    /// (our forward pass on Q8_0 kernels, batched), any other on the general path (candle's
    /// model of the architecture, one request at a time). [`Llm::path`] says which. A file
    /// neither can run (another architecture, a tensor type candle does not read, a truncated or
    /// altered file) is refused with its path and what is wrong.
    pub fn load_with(path: &Path, config: LlmConfig) -> Result<Llm, LlmError> {
        Llm::load_on(path, config, false)
    }

    /// As [`Llm::load_with`], on the general path whatever the architecture (a llama file
    /// compared with its fast path, say).
    pub fn load_general(path: &Path, config: LlmConfig) -> Result<Llm, LlmError> {
        Llm::load_on(path, config, true)
    }

    fn load_on(path: &Path, config: LlmConfig, general: bool) -> Result<Llm, LlmError> {
        let load_err = |message: String| LlmError::Load { file: path.to_path_buf(), message };
        let threads = config.threads.unwrap_or_else(default_threads);
        if threads == 0 {
            return Err(LlmError::Request("threads must be at least 1".into()));
        }
        if config.max_context == 0 {
            return Err(LlmError::Request("max_context must be at least 1".into()));
        }
        let (mut reader, content) = open_gguf(path)?;
        let arch = match content.metadata.get("general.architecture").map(Value::to_string) {
            Some(Ok(a)) => a.clone(),
            _ => return Err(load_err("no general.architecture in the metadata".into())),
        };
        if !general::ARCHITECTURES.contains(&arch.as_str()) {
            return Err(load_err(format!(
                "architecture {arch:?} is not supported (supported: {})",
                general::ARCHITECTURES.join(", ")
            )));
        }
        let trained = content.metadata.get(&format!("{arch}.context_length")).and_then(|v| v.to_u64().ok());
        let trained = trained.ok_or_else(|| load_err(format!("no {arch}.context_length in the metadata")))?;
        let context = config.max_context.min(usize::try_from(trained).unwrap_or(usize::MAX));
        let tokenizer = GgufTokenizer::from_gguf(&content).map_err(load_err)?;
        // The fast path takes a dense llama whose heads it can rotate whole.
        let fast = match (general, arch.as_str()) {
            (false, "llama") => check_tensors(&content).and_then(|()| forward::LlamaConfig::read(&content).map(drop)),
            _ => Err("not asked for".into()),
        };
        let (model, team) = match fast {
            Ok(()) => {
                let model = Llama::load(&content, &mut reader, context).map_err(load_err)?;
                let team = Team::new(threads, "llm")
                    .map_err(|e| LlmError::Request(format!("starting {threads} inference threads: {e}")))?;
                (Model::Fast(Box::new(model)), team)
            }
            Err(why) => {
                if arch == "llama" && !general {
                    tracing::info!(file = %path.display(), why, "llama file on the general path");
                }
                let model = general::General::load(content, &mut reader, context, threads).map_err(load_err)?;
                // candle runs on a pool of its own; the team is the caller's thread alone.
                let team = Team::new(1, "llm")
                    .map_err(|e| LlmError::Request(format!("starting the inference thread: {e}")))?;
                (Model::General(Box::new(model)), team)
            }
        };
        Ok(Llm { model, tokenizer, context, team, threads, file: path.to_path_buf(), vocab: OnceLock::new() })
    }

    /// Which path runs the model: `fast llama (q8 kernels)`, or `candle {architecture}`.
    pub fn path(&self) -> String {
        self.model.path()
    }

    /// Whether requests are read together in one pass (the fast path), or one at a time.
    pub fn batches(&self) -> bool {
        self.model.batches()
    }

    /// Whether a LoRA adapter can be trained for it: on the fast path only (the trainer runs
    /// our own llama forward pass); a model on candle's path cannot train.
    pub fn trains(&self) -> bool {
        self.model.trains()
    }

    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    fn vocab(&self) -> &fill::Vocab {
        self.vocab.get_or_init(|| fill::Vocab::of(&self.tokenizer))
    }

    /// The most tokens a prompt and its answer can have together.
    pub fn context(&self) -> usize {
        self.context
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The prompt [`Llm::generate`] reads for `messages`, with room for `max_tokens` after it.
    /// When the context is too small, the conversation is trimmed (logged, and reported in
    /// `trimmed`): the system message and the last user message are kept whole, the oldest
    /// other messages go first, and the last of them left is cut in the middle (marked `…`)
    /// rather than dropped when enough of it fits. When the system and last user message alone
    /// do not fit, the error is [`LlmError::ContextOverflow`].
    pub fn prompt(&self, messages: &[ChatMessage], max_tokens: usize) -> Result<Prompt, LlmError> {
        self.prompt_as(messages, max_tokens, &tokenizer::Written::default())
    }

    /// [`Llm::prompt`], with an assistant turn the model wrote (in `written`) in its own ids.
    fn prompt_as(
        &self,
        messages: &[ChatMessage],
        max_tokens: usize,
        written: &tokenizer::Written,
    ) -> Result<Prompt, LlmError> {
        budget::fit(&self.tokenizer, written, messages, max_tokens, self.context)
    }

    /// Answers the conversation, giving each piece of text to `on_token` as it comes (whole
    /// characters only, never the start of a stop string); `Break` from it ends the answer.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        on_token: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError> {
        self.generate_with(req, None, on_token)
    }

    /// As [`Llm::generate`], with `adapter` applied to the model's projections.
    pub fn generate_with(
        &self,
        req: &GenerateRequest,
        adapter: Option<Arc<Adapter>>,
        on_token: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, LlmError> {
        if adapter.is_some() && !self.batches() {
            return Err(LlmError::Request(self.no_adapter()));
        }
        match self.alone(Work::Generate(req.clone()), adapter, Box::new(on_token)) {
            Outcome::Generated(g) => g,
            _ => unreachable!("a generation is answered with one"),
        }
    }

    /// Runs one request on an [`Engine`] of its own, to the end.
    fn alone<'a>(&'a self, work: Work, adapter: Option<Arc<Adapter>>, on_token: batch::OnToken<'a>) -> Outcome {
        let mut engine = Engine::new(self, BatchConfig::single());
        match engine.prepare(work, (), on_token) {
            Err(refused) => refused.1,
            Ok(ready) => {
                engine.admit(match adapter {
                    Some(a) => ready.with_adapter(a),
                    None => ready,
                });
                loop {
                    if let Some(((), outcome)) = engine.step().pop() {
                        return outcome;
                    }
                }
            }
        }
    }

    /// The sampled token's log-probability and the `k` most likely tokens at its position.
    fn token_logprob(&self, logits: &[f32], token: u32, k: usize) -> TokenLogprob {
        let lp = log_softmax(logits);
        let text = |id: usize| String::from_utf8_lossy(self.tokenizer.token_bytes(id as u32)).into_owned();
        let mut order: Vec<usize> = (0..lp.len()).collect();
        let k = k.min(order.len());
        if k > 0 {
            order.select_nth_unstable_by(k - 1, |a, b| lp[*b].total_cmp(&lp[*a]));
        }
        order.truncate(k);
        order.sort_by(|a, b| lp[*b].total_cmp(&lp[*a]));
        TokenLogprob {
            token: text(token as usize),
            logprob: lp[token as usize] as f32,
            top: order.into_iter().map(|id| TopLogprob { token: text(id), logprob: lp[id] as f32 }).collect(),
        }
    }

    /// The log-probability of each label as the beginning of the answer to `messages`, best
    /// first. The prompt is read once; each label continues from a copy of its KV cache. Long
    /// labels score lower by having more tokens: compare labels of like length (`yes`/`no`).
    /// A conversation too long for the context is trimmed as for [`Llm::generate`] (logged).
    pub fn classify(&self, messages: &[ChatMessage], labels: &[&str]) -> Result<Classification, LlmError> {
        let work =
            Work::Classify { messages: messages.to_vec(), labels: labels.iter().map(|l| l.to_string()).collect() };
        match self.alone(work, None, Box::new(|_| ControlFlow::Continue(()))) {
            Outcome::Classified(c) => c,
            _ => unreachable!("a classification is answered with one"),
        }
    }

    /// A JSON value of `schema` (a tool's input schema, in the part of JSON Schema that
    /// [`schema`] reads) as the answer to `messages`, in at most `max_tokens` tokens: the JSON
    /// text is written here and the model decides only the values, so the value validates
    /// ([`fill`]). Greedy: the same conversation gives the same value. A schema with a
    /// construct not read is refused ([`LlmError::Schema`], naming the field).
    pub fn fill(
        &self,
        messages: &[ChatMessage],
        schema: &serde_json::Value,
        max_tokens: usize,
    ) -> Result<Filled, LlmError> {
        let work = Work::Fill { messages: messages.to_vec(), schema: schema.clone(), max_tokens };
        match self.alone(work, None, Box::new(|_| ControlFlow::Continue(()))) {
            Outcome::Filled(f) => f,
            _ => unreachable!("a fill is answered with one"),
        }
    }

    /// Starts an [`Engine`] that answers requests together on this model.
    pub fn engine<T>(&self, config: BatchConfig) -> Engine<'_, T> {
        Engine::new(self, config)
    }

    /// The kernel products of many rows run on here: `amx`, `avx512-vnni` or `portable`.
    pub fn kernel() -> &'static str {
        q8::kernel()
    }

    /// Bytes of keys and values one token of a request takes.
    pub fn kv_bytes_per_token(&self) -> usize {
        self.model.kv_bytes_per_token()
    }

    /// One forward pass on the `Llm`'s threads over every part: the logits after the last token
    /// of each.
    fn forward_batch(&self, scratch: &mut Scratch, parts: &mut [Part]) -> Result<Vec<Vec<f32>>, LlmError> {
        // Passes of two requests at once only oversubscribe the cores (a generation on 2 cores
        // slowed fivefold): requests take turns, pass by pass.
        static ONE_PASS_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _turn = ONE_PASS_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        match &self.model {
            Model::Fast(model) => {
                let mut fast = Vec::with_capacity(parts.len());
                for p in parts.iter_mut() {
                    let KvCache::Fast(cache) = &mut *p.cache else {
                        return Err(LlmError::Request("a general path's cache on the fast path".into()));
                    };
                    fast.push(forward::Part { cache, ids: p.ids, prompt: p.prompt, adapter: p.adapter });
                }
                model.forward_batch(&self.team, scratch, &mut fast).map_err(LlmError::Request)
            }
            Model::General(model) => parts
                .iter_mut()
                .map(|p| {
                    if p.adapter.is_some() {
                        return Err(LlmError::Request(self.no_adapter()));
                    }
                    let KvCache::General(cache) = &mut *p.cache else {
                        return Err(LlmError::Request("a fast path's cache on the general path".into()));
                    };
                    model.forward(cache, p.ids).map_err(LlmError::Request)
                })
                .collect(),
        }
    }

    /// Why a LoRA adapter is refused on the general path.
    fn no_adapter(&self) -> String {
        format!(
            "{}: LoRA adapters run on the fast llama path only, and this model runs on the {} path",
            self.file.display(),
            self.path()
        )
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn log_softmax(v: &[f32]) -> Vec<f64> {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_sum = v.iter().map(|x| (*x as f64 - max).exp()).sum::<f64>().ln() + max;
    v.iter().map(|x| *x as f64 - log_sum).collect()
}

/// Generated bytes to text pieces: whole UTF-8 characters only (a character can span tokens;
/// invalid bytes become U+FFFD as in a lossy decode), and never a piece that could be the start
/// of a stop string until the next tokens show it is not.
struct TextStream {
    bytes: Vec<u8>,
    held: String,
    stops: Vec<String>,
}

impl TextStream {
    fn new(stops: &[String]) -> TextStream {
        TextStream { bytes: Vec::new(), held: String::new(), stops: stops.to_vec() }
    }

    /// The text that can be given out after `token`, and whether a stop string came (the text
    /// then ends before it, and nothing more is to come).
    fn push(&mut self, token: &[u8]) -> (String, bool) {
        self.bytes.extend_from_slice(token);
        loop {
            match std::str::from_utf8(&self.bytes) {
                Ok(s) => {
                    self.held.push_str(s);
                    self.bytes.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    self.held.push_str(std::str::from_utf8(&self.bytes[..valid]).expect("checked valid"));
                    match e.error_len() {
                        // An incomplete character at the end: wait for the next token.
                        None => {
                            self.bytes.drain(..valid);
                            break;
                        }
                        Some(bad) => {
                            self.held.push(char::REPLACEMENT_CHARACTER);
                            self.bytes.drain(..valid + bad);
                        }
                    }
                }
            }
        }
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(at);
            return (std::mem::take(&mut self.held), true);
        }
        // Keep back the longest end of the text that a stop string begins with.
        let keep = self
            .stops
            .iter()
            .flat_map(|s| s.char_indices().skip(1).map(|(i, _)| &s[..i]))
            .filter(|prefix| self.held.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let out = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        (out, false)
    }

    /// What is left at the end of the answer: the held text. The bytes of a character the
    /// answer stopped in the middle of are not text, and are dropped.
    fn finish(&mut self) -> String {
        self.bytes.clear();
        std::mem::take(&mut self.held)
    }
}

/// An answer's text as its tokens come, as the caller is given it: whole characters, ended
/// before a stop string, and, when `stop_repeated_sentence` asks, each sentence held until it
/// has ended and is not one the answer has ([`repeat::Sentences`]). An endpoint's pieces of
/// text go through it as its bytes.
pub struct AnswerText {
    stream: TextStream,
    sentences: Option<repeat::Sentences>,
}

impl AnswerText {
    pub fn new(stops: &[String], stop_repeated_sentence: bool) -> AnswerText {
        AnswerText {
            stream: TextStream::new(stops),
            sentences: stop_repeated_sentence.then(repeat::Sentences::default),
        }
    }

    /// The text that can be given out after a token's bytes, and why the answer ends when it
    /// does: [`Stop::StopString`], or [`Stop::Repetition`] (the text then ends before the
    /// stop string or the repeated sentence).
    pub fn push(&mut self, token: &[u8]) -> (String, Option<Stop>) {
        let (text, stopped) = self.stream.push(token);
        let (text, repeated) = match &mut self.sentences {
            Some(s) => {
                let judged = s.push(&text);
                (judged.text, judged.repeated)
            }
            None => (text, false),
        };
        let stop = if repeated { Some(Stop::Repetition) } else { stopped.then_some(Stop::StopString) };
        (text, stop)
    }

    /// What is left to give out when the answer ended for `stop`, and why it ended: the text
    /// held back, unless its last sentence is one the answer has (or, cut at the most tokens,
    /// the beginning of one), which makes the stop [`Stop::Repetition`].
    pub fn finish(&mut self, stop: Stop) -> (String, Stop) {
        let rest = match stop {
            Stop::Eos | Stop::MaxTokens => self.stream.finish(),
            _ => String::new(),
        };
        match (&mut self.sentences, stop) {
            (Some(s), Stop::Eos | Stop::MaxTokens | Stop::StopString) => {
                let judged = s.finish(&rest, stop == Stop::MaxTokens);
                (judged.text, if judged.repeated { Stop::Repetition } else { stop })
            }
            _ => (rest, stop),
        }
    }
}

/// What a GGUF file holds, from its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufInfo {
    pub architecture: Option<String>,
    /// `general.file_type`, llama.cpp's `llama_ftype` (3: mostly Q4_1, 7: mostly Q8_0).
    pub file_type: Option<u32>,
    /// Tensors per ggml type (`Q4_1`, `Q8_0`, `F32`, ...).
    pub tensor_types: std::collections::BTreeMap<String, usize>,
}

/// Reads the header of a GGUF file, checking that every tensor lies within the file.
pub fn inspect(path: &Path) -> Result<GgufInfo, LlmError> {
    let (_, content) = open_gguf(path)?;
    let mut tensor_types = std::collections::BTreeMap::new();
    for info in content.tensor_infos.values() {
        *tensor_types.entry(format!("{:?}", info.ggml_dtype)).or_insert(0) += 1;
    }
    Ok(GgufInfo {
        architecture: content.metadata.get("general.architecture").and_then(|v| v.to_string().ok()).cloned(),
        file_type: content.metadata.get("general.file_type").and_then(|v| v.to_u32().ok()),
        tensor_types,
    })
}

/// Opens a GGUF file and reads its header, with the errors naming the file and what is wrong.
pub(crate) fn open_gguf(path: &Path) -> Result<(BufReader<File>, Content), LlmError> {
    let load_err = |message: String| LlmError::Load { file: path.to_path_buf(), message };
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => load_err("missing".into()),
        _ => load_err(e.to_string()),
    })?;
    let len = file.metadata().map_err(|e| load_err(e.to_string()))?.len();
    if len > MAX_FILE_BYTES {
        return Err(load_err(format!("{len} bytes, more than the {MAX_FILE_BYTES} a model may have")));
    }
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader).map_err(|e| load_err(format!("not a readable GGUF file: {e}")))?;
    // Every tensor must lie within the file: a truncated download names its first lost tensor.
    let mut infos: Vec<_> = content.tensor_infos.iter().collect();
    infos.sort_by_key(|(_, info)| info.offset);
    for (name, info) in infos {
        let (elems, block) = (info.shape.elem_count(), info.ggml_dtype.block_size());
        if elems % block != 0 {
            return Err(load_err(format!("tensor {name}: {elems} values are not whole blocks of {block}")));
        }
        let end = content.tensor_data_offset + info.offset + (elems / block * info.ggml_dtype.type_size()) as u64;
        if end > len {
            return Err(load_err(format!("truncated: tensor {name} ends at byte {end}, the file has {len}")));
        }
    }
    Ok((reader, content))
}

/// The tensors [`Llama::load`] reads for a dense llama, so that a missing one is
/// named (the output projection may be tied to the embeddings).
fn check_tensors(content: &Content) -> Result<(), String> {
    let blocks = match content.metadata.get("llama.block_count").map(Value::to_u32) {
        Some(Ok(n)) => n,
        _ => return Err("no llama.block_count in the metadata".into()),
    };
    let per_block =
        ["attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "ffn_norm", "ffn_gate", "ffn_down", "ffn_up"];
    let moe = content.metadata.get("llama.expert_count").and_then(|v| v.to_u32().ok()).unwrap_or(0) > 1;
    let names = ["token_embd.weight".to_string(), "output_norm.weight".to_string()].into_iter().chain(
        (0..blocks).flat_map(|b| {
            per_block
                .iter()
                .filter(move |t| !(moe && t.starts_with("ffn_") && !t.ends_with("norm")))
                .map(move |t| format!("blk.{b}.{t}.weight"))
        }),
    );
    for name in names {
        if !content.tensor_infos.contains_key(&name) {
            return Err(format!("missing tensor {name}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
