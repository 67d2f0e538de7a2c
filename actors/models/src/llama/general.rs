//! The general path: a GGUF file of a common architecture (`qwen2`, `qwen3`, `gemma3`, `phi3`,
//! `llama`) run by candle-transformers' own quantized model of it (`gemma3`: our port of it,
//! [`gemma3`]), for the files the fast path ([`super::forward`]) does not take.
//!
//! candle's models keep one sequence's keys and values inside themselves and cannot go back in
//! it, so here a request's cache ([`Cache`]) is the ids it has read, and the model holds the
//! keys and values of whichever sequence it read last. A pass that continues that sequence reads
//! only its new tokens; any other (another request, or one rolled back to score its next label)
//! is read again from its first token. Requests therefore run one at a time on this path (the
//! engine does not batch them, see [`super::batch`]), and what a request gets is what it gets
//! alone.
//!
//! candle's models read several tokens in one pass only from the sequence's start (their
//! attention masks and, for `qwen3`, their caches assume it), so after the first pass their
//! tokens are read one at a time; our `gemma3` reads a continuation in one pass.

use std::io::{Read, Seek};
use std::sync::Mutex;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_phi3, quantized_qwen2, quantized_qwen3};

mod gemma3;

/// The architectures this path runs, by their `general.architecture`.
pub const ARCHITECTURES: [&str; 5] = ["qwen2", "qwen3", "gemma3", "phi3", "llama"];

enum Weights {
    Qwen2(Box<quantized_qwen2::ModelWeights>),
    Qwen3(Box<quantized_qwen3::ModelWeights>),
    Gemma3(Box<gemma3::Gemma3>),
    Phi3(Box<quantized_phi3::ModelWeights>),
    Llama(Box<quantized_llama::ModelWeights>),
}

impl Weights {
    fn forward(&mut self, x: &Tensor, at: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Qwen2(m) => m.forward(x, at),
            Weights::Qwen3(m) => m.forward(x, at),
            Weights::Gemma3(m) => m.forward(x, at),
            Weights::Phi3(m) => m.forward(x, at),
            Weights::Llama(m) => m.forward(x, at),
        }
    }

    /// Forgets the sequence read. `phi3` starts anew by itself when a pass reads from position 0
    /// (and has no way to be told).
    fn clear(&mut self) {
        match self {
            Weights::Qwen2(m) => m.clear_kv_cache(),
            Weights::Qwen3(m) => m.clear_kv_cache(),
            Weights::Gemma3(m) => m.clear(),
            Weights::Llama(m) => m.clear_kv_cache(),
            Weights::Phi3(_) => {}
        }
    }

    /// Whether a pass of several tokens can continue a sequence (candle's models read several
    /// only from position 0).
    fn continues_several(&self) -> bool {
        matches!(self, Weights::Gemma3(_))
    }
}

/// A request's place on the general path: the ids it has read.
pub type Cache = Vec<u32>;

struct State {
    weights: Weights,
    /// The ids whose keys and values the weights hold.
    read: Vec<u32>,
}

pub struct General {
    architecture: String,
    state: Mutex<State>,
    /// Threads candle's products run on.
    pool: rayon::ThreadPool,
    vocab: usize,
    context: usize,
    kv_per_token: usize,
}

impl General {
    /// Reads the weights of `content` (of one of [`ARCHITECTURES`]) with candle; positions up to
    /// `context` can be run. The error says what candle could not read.
    pub fn load<R: Read + Seek>(
        content: Content,
        reader: &mut R,
        context: usize,
        threads: usize,
    ) -> Result<General, String> {
        let architecture = content
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .ok_or("no general.architecture in the metadata")?;
        let get = |key: &str| {
            content.metadata.get(&format!("{architecture}.{key}")).and_then(|v| v.to_u32().ok()).map(|n| n as usize)
        };
        let layers = get("block_count").ok_or_else(|| format!("no {architecture}.block_count in the metadata"))?;
        let heads = get("attention.head_count").unwrap_or(1);
        let kv_heads = get("attention.head_count_kv").unwrap_or(heads);
        let head_dim =
            get("attention.key_length").or_else(|| get("embedding_length").map(|e| e / heads.max(1))).unwrap_or(0);
        let vocab = content
            .tensor_infos
            .get("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or("missing tensor token_embd.weight")?;
        // Some of candle's models size their tables (and phi3 its cache) by the trained context:
        // this one runs no further than `context`.
        let mut content = content;
        let key = format!("{architecture}.context_length");
        if content.metadata.contains_key(&key) {
            content.metadata.insert(key, Value::U32(u32::try_from(context).unwrap_or(u32::MAX)));
        }
        let device = Device::Cpu;
        let why = |e: candle_core::Error| format!("candle {architecture}: {e}");
        let weights = match architecture.as_str() {
            "qwen2" => Weights::Qwen2(Box::new(
                quantized_qwen2::ModelWeights::from_gguf(content, reader, &device).map_err(why)?,
            )),
            "qwen3" => Weights::Qwen3(Box::new(
                quantized_qwen3::ModelWeights::from_gguf(content, reader, &device).map_err(why)?,
            )),
            "gemma3" => {
                Weights::Gemma3(Box::new(gemma3::Gemma3::from_gguf(&content, reader, context, &device).map_err(why)?))
            }
            "phi3" => Weights::Phi3(Box::new(
                quantized_phi3::ModelWeights::from_gguf(false, content, reader, &device).map_err(why)?,
            )),
            "llama" => Weights::Llama(Box::new(
                quantized_llama::ModelWeights::from_gguf(content, reader, &device).map_err(why)?,
            )),
            other => {
                return Err(format!("architecture {other:?}: supported are {}", ARCHITECTURES.join(", ")));
            }
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("llm-candle-{i}"))
            .start_handler(|_| crate::lower_model_thread_priority())
            .build()
            .map_err(|e| format!("starting {threads} inference threads: {e}"))?;
        Ok(General {
            architecture,
            state: Mutex::new(State { weights, read: Vec::new() }),
            pool,
            vocab,
            context,
            // f32 keys and values, as candle keeps them (gemma3's local layers keep fewer: this
            // is the most a token takes).
            kv_per_token: layers * kv_heads * head_dim * 2 * std::mem::size_of::<f32>(),
        })
    }

    pub fn architecture(&self) -> &str {
        &self.architecture
    }

    pub fn kv_bytes_per_token(&self) -> usize {
        self.kv_per_token
    }

    /// Reads `ids` after the ids of `cache`; the logits after the last of them. The cache then
    /// holds both.
    pub fn forward(&self, cache: &mut Cache, ids: &[u32]) -> Result<Vec<f32>, String> {
        if ids.is_empty() {
            return Err("no tokens to read".into());
        }
        if cache.len() + ids.len() > self.context {
            return Err(format!("{} tokens in a context of {}", cache.len() + ids.len(), self.context));
        }
        if let Some(bad) = ids.iter().find(|id| **id as usize >= self.vocab) {
            return Err(format!("token {bad} is not in the vocabulary of {}", self.vocab));
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *state;
        let continues = !cache.is_empty() && state.read == *cache;
        // Until the pass succeeds the weights hold no sequence we know.
        state.read.clear();
        let why = |e: candle_core::Error| format!("candle {}: {e}", self.architecture);
        let logits = self.pool.install(|| -> candle_core::Result<Tensor> {
            let device = Device::Cpu;
            if continues && state.weights.continues_several() {
                let x = Tensor::new(ids, &device)?.unsqueeze(0)?;
                state.weights.forward(&x, cache.len())
            } else if continues {
                let mut logits = None;
                for (i, id) in ids.iter().enumerate() {
                    let x = Tensor::new(&[*id], &device)?.unsqueeze(0)?;
                    logits = Some(state.weights.forward(&x, cache.len() + i)?);
                }
                Ok(logits.expect("ids is not empty"))
            } else {
                let all: Vec<u32> = cache.iter().chain(ids).copied().collect();
                state.weights.clear();
                let x = Tensor::new(all.as_slice(), &device)?.unsqueeze(0)?;
                state.weights.forward(&x, 0)
            }
        });
        let logits = logits.and_then(|l| l.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()).map_err(why)?;
        if logits.len() != self.vocab {
            return Err(format!(
                "candle {}: {} logits for a vocabulary of {}",
                self.architecture,
                logits.len(),
                self.vocab
            ));
        }
        cache.extend_from_slice(ids);
        state.read.clone_from(cache);
        Ok(logits)
    }
}

#[cfg(test)]
mod tests;
