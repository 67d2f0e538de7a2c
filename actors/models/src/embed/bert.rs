//! The forward pass of a BERT encoder (all-MiniLM-L6-v2 and its kin) on the CPU, in f32.
//!
//! Built for throughput on a batch of texts of mixed lengths:
//!
//! - No padding: the tokens of a batch are packed one sequence after another, the linear
//!   layers run on all of them at once and attention runs per (sequence, head) on that
//!   sequence's real length, so a short text never pays for the longest one.
//! - Weights are transposed once at load to `[in, out]`; query, key and value are one
//!   `[hidden, 3 * hidden]` matmul. A chunk's products run on a kernel of our own over a
//!   second copy of the weights laid out in strips that stream from memory in order
//!   ([`few`]); longer chunks, and CPUs without AVX-512, go straight to the `gemm` crate. A
//!   batch of at most a chunk's tokens is one chunk whose products share all threads.
//! - A batch is cut into chunks of whole sequences of about [`CHUNK_TOKENS`] tokens; each chunk
//!   goes through every layer on one thread with buffers that fit in its core's cache, and
//!   the chunks of a batch are shared among the threads of the model's own pool. Threads
//!   meet once per batch, not once per op. A batch too small to give every thread a chunk
//!   runs its matmuls on all threads instead: ours on a [`Team`] (threads that spin between
//!   products, so they meet in microseconds), `gemm`'s on the pool.
//! - Bias, GELU, residual and LayerNorm are fused passes over rows ([`rows`]); GELU (exact,
//!   erf) and the softmax use polynomial `erf` / `exp` that the compiler vectorises, built for
//!   AVX-512 and AVX2 and chosen at run time.
//! - Buffers are kept between calls.

use std::path::Path;
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;
use serde::Deserialize;

use super::EmbedError;
use crate::pool::Team;
use rows::{
    add_bias_rows, attention_small, bias_gelu_rows, embed_row, layer_norm_rows, residual_layer_norm_rows, softmax_rows,
};

/// Tokens a chunk aims at: the matmuls stay efficient and a chunk's activations (about
/// 3.5 KiB per token at hidden size 384) stay in a core's L2 cache.
pub const CHUNK_TOKENS: usize = 256;
/// Sequences up to this long take attention in plain loops: gemm's set-up per call costs
/// more than the work of a short sequence's heads.
const SMALL_ATTENTION: usize = 64;
/// Below this many tokens, a lone chunk runs its matmuls on one thread: splitting costs more.
const PARALLEL_MATMUL_TOKENS: usize = 48;
/// `config.json` is a few hundred bytes; anything past this is not a model config.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The sizes of a BERT encoder, from its `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub layer_norm_eps: f32,
    pub vocab: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
}

/// The fields we read; the file has many more, which are ignored.
#[derive(Deserialize)]
struct RawConfig {
    hidden_size: usize,
    num_attention_heads: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    hidden_act: String,
    vocab_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default)]
    position_embedding_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_type_vocab() -> usize {
    2
}

impl BertConfig {
    /// Reads and validates `config.json`; an error names the file and the field.
    pub fn read(path: &Path) -> Result<BertConfig, EmbedError> {
        let err = |message: String| EmbedError::Load { file: path.to_path_buf(), message };
        let size = std::fs::metadata(path).map_err(|e| err(e.to_string()))?.len();
        if size > MAX_CONFIG_BYTES {
            return Err(err(format!("{size} bytes: too large for a model config")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let raw: RawConfig = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        if raw.hidden_act != "gelu" {
            return Err(err(format!(
                "hidden_act: {:?} is not supported (this forward pass computes \"gelu\", the exact erf form)",
                raw.hidden_act
            )));
        }
        if let Some(kind) = raw.position_embedding_type.as_deref().filter(|k| *k != "absolute") {
            return Err(err(format!("position_embedding_type: {kind:?} is not supported (only \"absolute\")")));
        }
        for (field, value) in [
            ("hidden_size", raw.hidden_size),
            ("num_attention_heads", raw.num_attention_heads),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("intermediate_size", raw.intermediate_size),
            ("vocab_size", raw.vocab_size),
            ("max_position_embeddings", raw.max_position_embeddings),
            ("type_vocab_size", raw.type_vocab_size),
        ] {
            if value == 0 {
                return Err(err(format!("{field}: must be at least 1")));
            }
        }
        if !raw.hidden_size.is_multiple_of(raw.num_attention_heads) {
            return Err(err(format!(
                "num_attention_heads: {} does not divide hidden_size {}",
                raw.num_attention_heads, raw.hidden_size
            )));
        }
        if !(raw.layer_norm_eps.is_finite() && raw.layer_norm_eps > 0.0) {
            return Err(err(format!("layer_norm_eps: {} is not a positive number", raw.layer_norm_eps)));
        }
        Ok(BertConfig {
            hidden: raw.hidden_size,
            heads: raw.num_attention_heads,
            layers: raw.num_hidden_layers,
            intermediate: raw.intermediate_size,
            layer_norm_eps: raw.layer_norm_eps as f32,
            vocab: raw.vocab_size,
            max_positions: raw.max_position_embeddings,
            type_vocab: raw.type_vocab_size,
        })
    }

    /// Floating-point operations (a multiply-add is two) of the products of one text of
    /// `tokens` tokens: per layer, the four linear maps and attention's scores and weighted
    /// sums (`2 * tokens^2 * hidden` each). Norms, GELU and softmax are left out.
    pub fn flops(&self, tokens: usize) -> f64 {
        let (n, h, i) = (tokens as f64, self.hidden as f64, self.intermediate as f64);
        let linear = 2.0 * n * (h * 3.0 * h + h * h + 2.0 * h * i);
        let attention = 4.0 * n * n * h;
        self.layers as f64 * (linear + attention)
    }
}

/// A linear layer's weights, `[in, out]`, and in strips for the products of a chunk.
struct Linear {
    w: Vec<f32>,
    n: usize,
    strips: Option<few::Strips>,
}

impl Linear {
    fn new(w: Vec<f32>, n: usize) -> Linear {
        let strips = few::Strips::pack(&w, w.len() / n, n);
        Linear { w, n, strips }
    }
}

/// One encoder layer; matrices are row-major `[in, out]`.
struct Layer {
    /// `[hidden, 3 * hidden]`: query, key, value side by side.
    qkv_w: Linear,
    qkv_b: Vec<f32>,
    out_w: Linear,
    out_b: Vec<f32>,
    ln1_g: Vec<f32>,
    ln1_b: Vec<f32>,
    up_w: Linear,
    up_b: Vec<f32>,
    down_w: Linear,
    down_b: Vec<f32>,
    ln2_g: Vec<f32>,
    ln2_b: Vec<f32>,
}

/// One tokenized text: its token ids and token type ids, of equal length.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub ids: &'a [u32],
    pub type_ids: &'a [u32],
}

/// What [`Bert::forward`] returns for each input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The mean of the last hidden states over the input's tokens: `hidden` values.
    Mean,
    /// Every token's last hidden state, row after row: `len * hidden` values.
    Tokens,
}

/// Buffers for one chunk, kept between calls.
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    tmp: Vec<f32>,
    up: Vec<f32>,
    scores: Vec<f32>,
}

fn grow(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

pub struct Bert {
    cfg: BertConfig,
    /// `[vocab, hidden]`, `[max_positions, hidden]`, `[type_vocab, hidden]`.
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    ln_g: Vec<f32>,
    ln_b: Vec<f32>,
    layers: Vec<Layer>,
    threads: usize,
    /// `None` with one thread: the caller's thread does the work.
    pool: Option<rayon::ThreadPool>,
    /// The caller's thread and `threads - 1` workers: the products of a lone chunk on our own
    /// kernel ([`few`]) are shared among them, two dozen a text, so they must start and end in
    /// far less time than a rayon pool's sleeping threads take to wake.
    team: Team,
    scratch: Mutex<Vec<Scratch>>,
}

impl Bert {
    /// Loads the weights of `model.safetensors` (plain or `bert.`-prefixed names) for the
    /// sizes of `cfg`, to run on `threads` threads.
    pub fn load(cfg: BertConfig, weights: &Path, threads: usize) -> Result<Bert, EmbedError> {
        // SAFETY: the file is mapped read-only and the cache never rewrites a model in place
        // (a pull renames a new directory into place); the map is dropped once the weights are
        // copied out below.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(weights) }
            .map_err(|e| EmbedError::Load { file: weights.to_path_buf(), message: e.to_string() })?;
        let w = Weights { st: &st, file: weights };
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let word = w.plain("embeddings.word_embeddings.weight", &[cfg.vocab, h])?;
        let position = w.plain("embeddings.position_embeddings.weight", &[cfg.max_positions, h])?;
        let token_type = w.plain("embeddings.token_type_embeddings.weight", &[cfg.type_vocab, h])?;
        let ln_g = w.plain("embeddings.LayerNorm.weight", &[h])?;
        let ln_b = w.plain("embeddings.LayerNorm.bias", &[h])?;
        let layers = (0..cfg.layers)
            .map(|l| {
                let p = format!("encoder.layer.{l}");
                let q = w.linear(&format!("{p}.attention.self.query"), h, h)?;
                let k = w.linear(&format!("{p}.attention.self.key"), h, h)?;
                let v = w.linear(&format!("{p}.attention.self.value"), h, h)?;
                let qkv_w = Tensor::cat(&[&q.0, &k.0, &v.0], 1).and_then(|t| t.flatten_all()?.to_vec1());
                let qkv_b = Tensor::cat(&[&q.1, &k.1, &v.1], 0).and_then(|t| t.to_vec1());
                let (out_w, out_b) = w.linear_vecs(&format!("{p}.attention.output.dense"), h, h)?;
                let (up_w, up_b) = w.linear_vecs(&format!("{p}.intermediate.dense"), h, i)?;
                let (down_w, down_b) = w.linear_vecs(&format!("{p}.output.dense"), i, h)?;
                Ok(Layer {
                    qkv_w: Linear::new(qkv_w.map_err(|e| w.err(&format!("{p}.attention.self"), e))?, 3 * h),
                    qkv_b: qkv_b.map_err(|e| w.err(&format!("{p}.attention.self"), e))?,
                    out_w: Linear::new(out_w, h),
                    out_b,
                    ln1_g: w.plain(&format!("{p}.attention.output.LayerNorm.weight"), &[h])?,
                    ln1_b: w.plain(&format!("{p}.attention.output.LayerNorm.bias"), &[h])?,
                    up_w: Linear::new(up_w, i),
                    up_b,
                    down_w: Linear::new(down_w, h),
                    down_b,
                    ln2_g: w.plain(&format!("{p}.output.LayerNorm.weight"), &[h])?,
                    ln2_b: w.plain(&format!("{p}.output.LayerNorm.bias"), &[h])?,
                })
            })
            .collect::<Result<Vec<_>, EmbedError>>()?;
        let threads = threads.max(1);
        let pool = if threads > 1 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("embed-{i}"))
                .start_handler(|_| crate::lower_model_thread_priority())
                .build()
                .map_err(|e| EmbedError::Load { file: weights.to_path_buf(), message: format!("thread pool: {e}") })?;
            Some(pool)
        } else {
            None
        };
        let team = Team::new(threads, "embed-team")
            .map_err(|e| EmbedError::Load { file: weights.to_path_buf(), message: format!("threads: {e}") })?;
        let scratch = Mutex::new(Vec::new());
        Ok(Bert { cfg, word, position, token_type, ln_g, ln_b, layers, threads, pool, team, scratch })
    }

    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// Runs the encoder over a batch; one vector per input, in order (see [`Output`]).
    pub fn forward(&self, inputs: &[Input<'_>], output: Output) -> Result<Vec<Vec<f32>>, EmbedError> {
        for (n, input) in inputs.iter().enumerate() {
            self.validate(n, input)?;
        }
        let lens: Vec<usize> = inputs.iter().map(|i| i.ids.len()).collect();
        // A batch of a few rows in all is one chunk whose products share the threads: the
        // weights stream from memory once, not once a thread.
        let total: usize = lens.iter().sum();
        let chunks =
            if few::takes(total) { std::iter::once(0..lens.len()).collect() } else { chunks(&lens, self.threads) };
        let run = |range: &std::ops::Range<usize>, par: Parallelism| {
            let mut scratch = self.scratch.lock().map(|mut s| s.pop()).unwrap_or_default().unwrap_or_default();
            let out = self.run_chunk(&inputs[range.clone()], &mut scratch, par, output);
            if let Ok(mut s) = self.scratch.lock() {
                s.push(scratch);
            }
            out
        };
        let per_chunk: Vec<Vec<Vec<f32>>> = match &self.pool {
            None => chunks.iter().map(|r| run(r, Parallelism::None)).collect(),
            Some(pool) if chunks.len() >= self.threads => {
                pool.install(|| chunks.par_iter().map(|r| run(r, Parallelism::None)).collect())
            }
            // Too few chunks for every thread: each chunk's products share them.
            Some(_) => chunks
                .iter()
                .map(|r| {
                    let tokens: usize = lens[r.clone()].iter().sum();
                    let par = if tokens >= PARALLEL_MATMUL_TOKENS || few::takes(tokens) {
                        Parallelism::Rayon(self.threads)
                    } else {
                        Parallelism::None
                    };
                    run(r, par)
                })
                .collect(),
        };
        Ok(per_chunk.into_iter().flatten().collect())
    }

    /// `dst = x × w` for the `t` dense rows of `x` and a layer's weights `w`: up to a chunk's
    /// rows on our own kernel (on the team with `par`), more on `gemm` (on the pool's threads
    /// with `par`).
    fn linear(&self, dst: &mut [f32], x: &[f32], t: usize, w: &Linear, par: Parallelism) {
        let (k, n) = (w.w.len() / w.n, w.n);
        let shared = matches!(par, Parallelism::Rayon(_));
        match (&w.strips, &self.pool) {
            (Some(strips), _) if t <= few::FEW_ROWS => few::matmul(dst, n, x, t, strips, shared.then_some(&self.team)),
            (_, Some(pool)) if shared => {
                pool.install(|| matmul(dst, n, Mat::rows(x, t, k), Mat::rows(&w.w, k, n), 1.0, par))
            }
            _ => matmul(dst, n, Mat::rows(x, t, k), Mat::rows(&w.w, k, n), 1.0, par),
        }
    }

    fn validate(&self, n: usize, input: &Input<'_>) -> Result<(), EmbedError> {
        let err = |m: String| Err(EmbedError::Input(format!("input {n}: {m}")));
        let len = input.ids.len();
        if len == 0 {
            return err("no tokens".into());
        }
        if len > self.cfg.max_positions {
            return err(format!("{len} tokens, more than the model's {} positions", self.cfg.max_positions));
        }
        if input.type_ids.len() != len {
            return err(format!("{len} token ids but {} token type ids", input.type_ids.len()));
        }
        if let Some((p, id)) = input.ids.iter().enumerate().find(|(_, id)| **id as usize >= self.cfg.vocab) {
            return err(format!("token id {id} at {p} is outside the vocabulary of {}", self.cfg.vocab));
        }
        if let Some((p, t)) = input.type_ids.iter().enumerate().find(|(_, t)| **t as usize >= self.cfg.type_vocab) {
            return err(format!("token type {t} at {p} is outside the {} types", self.cfg.type_vocab));
        }
        Ok(())
    }

    /// Every layer over the packed tokens of `inputs` (validated).
    fn run_chunk(&self, inputs: &[Input<'_>], s: &mut Scratch, par: Parallelism, output: Output) -> Vec<Vec<f32>> {
        let BertConfig { hidden: h, heads, intermediate: inter, layer_norm_eps: eps, .. } = self.cfg;
        let t: usize = inputs.iter().map(|i| i.ids.len()).sum();
        let longest = inputs.iter().map(|i| i.ids.len()).max().unwrap_or(0);
        let d = h / heads;
        let x = grow(&mut s.x, t * h);
        let qkv = grow(&mut s.qkv, t * 3 * h);
        let ctx = grow(&mut s.ctx, t * h);
        let tmp = grow(&mut s.tmp, t * h);
        let up = grow(&mut s.up, t * inter);
        let scores = grow(&mut s.scores, longest * longest);

        // Embeddings: word + position + token type, then LayerNorm.
        let mut rows = x.chunks_exact_mut(h);
        for input in inputs {
            for (p, (id, ty)) in input.ids.iter().zip(input.type_ids).enumerate() {
                let (Some(row), Some(w), Some(pe), Some(te)) = (
                    rows.next(),
                    self.word.get(*id as usize * h..(*id as usize + 1) * h),
                    self.position.get(p * h..(p + 1) * h),
                    self.token_type.get(*ty as usize * h..(*ty as usize + 1) * h),
                ) else {
                    unreachable!("inputs are validated and the buffer holds every token");
                };
                embed_row(row, w, pe, te);
            }
        }
        layer_norm_rows(x, &self.ln_g, &self.ln_b, eps);

        let scale = 1.0 / (d as f32).sqrt();
        for layer in &self.layers {
            self.linear(qkv, x, t, &layer.qkv_w, par);
            add_bias_rows(qkv, &layer.qkv_b);
            // The short sequences' attention in plain loops, on the team when the products
            // share it (each sequence a share, with rows of its own).
            let mut small = Vec::new();
            let mut rest = &mut ctx[..t * h];
            let mut start = 0;
            for input in inputs {
                let len = input.ids.len();
                let (seq_ctx, after) = std::mem::take(&mut rest).split_at_mut(len * h);
                rest = after;
                if len <= SMALL_ATTENTION {
                    small.push(Mutex::new((&qkv[start * 3 * h..(start + len) * 3 * h], seq_ctx)));
                }
                start += len;
            }
            let attend = |i: usize| {
                let mut seq = small[i].lock().unwrap_or_else(|e| e.into_inner());
                let (seq_qkv, seq_ctx) = &mut *seq;
                let len = seq_qkv.len() / (3 * h);
                attention_small(seq_qkv, seq_ctx, &mut vec![0.0; 2 * len * d], len, heads, scale);
            };
            match par {
                Parallelism::Rayon(_) => self.team.run(small.len(), &attend),
                _ => (0..small.len()).for_each(attend),
            }
            drop(small);
            let mut start = 0;
            for input in inputs {
                let len = input.ids.len();
                if len <= SMALL_ATTENTION {
                    start += len;
                    continue;
                }
                let sc = &mut scores[..len * len];
                for head in 0..heads {
                    let base = start * 3 * h + head * d;
                    let q = Mat { data: &qkv[base..], rows: len, cols: d, rs: 3 * h, cs: 1 };
                    // Kᵀ: element (i, j) is key j's i-th value.
                    let kt = Mat { data: &qkv[base + h..], rows: d, cols: len, rs: 1, cs: 3 * h };
                    matmul(sc, len, q, kt, scale, Parallelism::None);
                    softmax_rows(sc, len);
                    let v = Mat { data: &qkv[base + 2 * h..], rows: len, cols: d, rs: 3 * h, cs: 1 };
                    matmul(&mut ctx[start * h + head * d..], h, Mat::rows(sc, len, len), v, 1.0, Parallelism::None);
                }
                start += len;
            }
            self.linear(tmp, ctx, t, &layer.out_w, par);
            residual_layer_norm_rows(x, tmp, &layer.out_b, &layer.ln1_g, &layer.ln1_b, eps);
            self.linear(up, x, t, &layer.up_w, par);
            bias_gelu_rows(up, &layer.up_b);
            self.linear(tmp, up, t, &layer.down_w, par);
            residual_layer_norm_rows(x, tmp, &layer.down_b, &layer.ln2_g, &layer.ln2_b, eps);
        }

        let mut start = 0;
        inputs
            .iter()
            .map(|input| {
                let len = input.ids.len();
                let rows = &x[start * h..(start + len) * h];
                start += len;
                match output {
                    Output::Tokens => rows.to_vec(),
                    Output::Mean => {
                        let mut mean = vec![0.0f32; h];
                        for row in rows.chunks_exact(h) {
                            for (m, v) in mean.iter_mut().zip(row) {
                                *m += v;
                            }
                        }
                        mean.iter_mut().for_each(|m| *m /= len as f32);
                        mean
                    }
                }
            })
            .collect()
    }
}

/// Reads tensors out of the safetensors file, naming it and the tensor on error.
struct Weights<'a> {
    st: &'a candle_core::safetensors::MmapedSafetensors,
    file: &'a Path,
}

impl Weights<'_> {
    fn err(&self, name: &str, e: impl std::fmt::Display) -> EmbedError {
        EmbedError::Load { file: self.file.to_path_buf(), message: format!("{name}: {e}") }
    }

    /// The tensor `name` (or `bert.{name}`), as f32 of exactly `shape`.
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<Tensor, EmbedError> {
        let t = self
            .st
            .load(name, &Device::Cpu)
            .or_else(|_| self.st.load(&format!("bert.{name}"), &Device::Cpu))
            .map_err(|_| self.err(name, "missing"))?;
        if t.dims() != shape {
            return Err(self.err(name, format!("shape {:?}, expected {shape:?}", t.dims())));
        }
        t.to_dtype(DType::F32).map_err(|e| self.err(name, e))
    }

    fn plain(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EmbedError> {
        self.tensor(name, shape)?.flatten_all().and_then(|t| t.to_vec1()).map_err(|e| self.err(name, e))
    }

    /// A linear layer stored PyTorch-style as `[out, in]`: its weight transposed to `[in, out]`
    /// and its bias.
    fn linear(&self, prefix: &str, inp: usize, out: usize) -> Result<(Tensor, Tensor), EmbedError> {
        let name = format!("{prefix}.weight");
        let w = self.tensor(&name, &[out, inp])?.t().and_then(|t| t.contiguous()).map_err(|e| self.err(&name, e))?;
        Ok((w, self.tensor(&format!("{prefix}.bias"), &[out])?))
    }

    fn linear_vecs(&self, prefix: &str, inp: usize, out: usize) -> Result<(Vec<f32>, Vec<f32>), EmbedError> {
        let (w, b) = self.linear(prefix, inp, out)?;
        let w = w.flatten_all().and_then(|t| t.to_vec1()).map_err(|e| self.err(prefix, e))?;
        let b = b.to_vec1().map_err(|e| self.err(prefix, e))?;
        Ok((w, b))
    }
}

/// Cuts a batch (its sequences' lengths) into runs of whole sequences of about equal tokens:
/// a multiple of `threads` runs when there are enough sequences, each near [`CHUNK_TOKENS`].
fn chunks(lens: &[usize], threads: usize) -> Vec<std::ops::Range<usize>> {
    let total: usize = lens.iter().sum();
    if lens.is_empty() {
        return Vec::new();
    }
    let wanted = (threads * total.div_ceil(threads * CHUNK_TOKENS)).clamp(1, lens.len());
    let mut out = Vec::with_capacity(wanted);
    let (mut first, mut seen) = (0, 0);
    for (i, len) in lens.iter().enumerate() {
        seen += len;
        // Close chunk k once the tokens so far reach its share, k/wanted of the total.
        let k = out.len() + 1;
        if seen * wanted >= k * total || i + 1 == lens.len() {
            out.push(first..i + 1);
            first = i + 1;
        }
    }
    out
}

/// A strided matrix: element (i, j) is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// A dense row-major matrix.
    fn rows(data: &'a [f32], rows: usize, cols: usize) -> Mat<'a> {
        Mat { data, rows, cols, rs: cols, cs: 1 }
    }

    /// Elements from the first to one past the last.
    fn span(&self) -> usize {
        span(self.rows, self.cols, self.rs, self.cs)
    }
}

fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 }
}

/// `dst = beta * (lhs × rhs)`, `dst` row-major with row stride `dst_rs`.
fn matmul(dst: &mut [f32], dst_rs: usize, lhs: Mat<'_>, rhs: Mat<'_>, beta: f32, par: Parallelism) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert!(rhs.rows == k, "matmul: {m}x{k} by {}x{n}", rhs.rows);
    assert!(
        span(m, n, dst_rs, 1) <= dst.len() && lhs.span() <= lhs.data.len() && rhs.span() <= rhs.data.len(),
        "matmul: a matrix runs past its buffer"
    );
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: every element gemm reads or writes lies within the spans checked above, and
    // `dst` is a unique borrow, so it overlaps neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            false,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            0.0,
            beta,
            false,
            false,
            false,
            par,
        )
    }
}

mod few;
mod rows;
#[cfg(test)]
mod tests;
