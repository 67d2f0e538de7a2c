//! The forward pass of a llama-architecture model (SmolLM2 and its kin) from a GGUF file, on
//! the CPU, with the weights in Q8_0 ([`super::q8`]).
//!
//! Built for the two shapes of work a small model does here:
//!
//! - reading a prompt: all its tokens go through each matrix at once, as tiles of 4 tokens by
//!   4 weight rows, so the weights come from memory once per prompt rather than once per token;
//! - generating: one token at a time, where the time is reading the weights, so the products
//!   that share an input are fused (query, key and value in one matrix; gate and up in one)
//!   and each product is split among the threads once.
//!
//! Weights of any type candle reads (Q4_1, F16, ...) are requantized to Q8_0 at load; Q8_0 is
//! taken as it is. Norms and rotary embeddings are f32, as in llama.cpp and candle, the rotary
//! embeddings in the interleaved ("normal") form of GGUF llama weights. Attention, with grouped
//! key/value heads, multiplies bf16 values (keys and values kept in bf16, queries and
//! probabilities rounded to it) with the bf16 dot-product instruction where the CPU has it (the
//! same steps elsewhere) and sums in f32. The KV cache is the caller's ([`KvCache`]), so requests
//! share the weights and nothing else.

use std::io::{Read, Seek};

use super::adapter::{Adapter, Target};
use super::q8::{Activations, Out, Q8Matrix};
use crate::pool::Team;
use candle_core::Device;
use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::Content;

/// The sizes of a llama model, from its GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub layers: usize,
    pub vocab: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
}

impl LlamaConfig {
    fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    pub(super) fn read(content: &Content) -> Result<LlamaConfig, String> {
        let get = |key: &str| {
            let v = content.metadata.get(key).ok_or_else(|| format!("no {key} in the metadata"))?;
            v.to_u32().map(|n| n as usize).map_err(|e| format!("{key}: {e}"))
        };
        let float = |key: &str, default: f32| match content.metadata.get(key) {
            None => Ok(default),
            Some(v) => v.to_f32().map_err(|e| format!("{key}: {e}")),
        };
        if content.metadata.get("llama.expert_count").and_then(|v| v.to_u32().ok()).unwrap_or(0) > 1 {
            return Err("llama.expert_count: mixtures of experts are not supported".into());
        }
        let hidden = get("llama.embedding_length")?;
        let heads = get("llama.attention.head_count")?;
        let kv_heads = get("llama.attention.head_count_kv").or_else(|_| get("llama.attention.head_count"))?;
        let ffn = get("llama.feed_forward_length")?;
        let layers = get("llama.block_count")?;
        for (key, v) in [("embedding_length", hidden), ("attention.head_count", heads), ("block_count", layers)] {
            if v == 0 {
                return Err(format!("llama.{key}: must be at least 1"));
            }
        }
        if !hidden.is_multiple_of(heads) || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "llama.attention.head_count {heads} and head_count_kv {kv_heads} do not divide embedding_length {hidden}"
            ));
        }
        let head_dim = hidden / heads;
        if let Ok(rope) = get("llama.rope.dimension_count")
            && rope != head_dim
        {
            return Err(format!("llama.rope.dimension_count: {rope}, only whole heads ({head_dim}) are supported"));
        }
        let vocab = content
            .tensor_infos
            .get("token_embd.weight")
            .map(|t| t.shape.dims()[0])
            .ok_or("missing tensor token_embd.weight")?;
        Ok(LlamaConfig {
            hidden,
            heads,
            kv_heads,
            head_dim,
            ffn,
            layers,
            vocab,
            rms_eps: float("llama.attention.layer_norm_rms_epsilon", 1e-5)?,
            rope_base: float("llama.rope.freq_base", 10_000.0)?,
        })
    }
}

struct Layer {
    attn_norm: Vec<f32>,
    /// Query, key and value rows, in that order.
    qkv: Q8Matrix,
    out: Q8Matrix,
    ffn_norm: Vec<f32>,
    /// Gate rows, then up rows.
    gate_up: Q8Matrix,
    down: Q8Matrix,
}

pub struct Llama {
    cfg: LlamaConfig,
    /// Token embeddings; also the output projection when the file has none of its own.
    embed: Q8Matrix,
    output: Option<Q8Matrix>,
    norm: Vec<f32>,
    layers: Vec<Layer>,
    /// cos and sin of each position's angle for each pair of a head, `[position][pair]`.
    rope: Vec<(f32, f32)>,
    context: usize,
}

/// The keys and values of the tokens read so far, one request's, in bf16: half the bytes of
/// f32 for a generation step to read and a kept prompt to hold, and the values the bf16
/// dot-product instruction multiplies. A key or value is rounded to bf16 once, when its token is
/// read, so every way of reading the cache sees the same numbers.
pub struct KvCache {
    /// Per layer and key head (`[layer * kv_heads + head]`), bf16 bits: the keys in blocks of
    /// [`KEY_BLOCK`] positions, each `[head_dim / 2][KEY_BLOCK][2]` (a pair of dimensions of the
    /// block's keys side by side, as attention scores them, see its module), the last block
    /// filled as far as `len`.
    keys: Vec<Vec<u16>>,
    /// As `keys`, the values in pairs of positions, `[position / 2][head_dim][2]` (a position
    /// that begins a pair and ends the cache has a zero partner).
    values: Vec<Vec<u16>>,
    len: usize,
    /// Values of one token in one head (`head_dim`).
    width: usize,
}

/// Positions of a block of keys (see [`KvCache`]): the lanes of an AVX-512 register.
const KEY_BLOCK: usize = LANES;

impl KvCache {
    /// Forgets every token from `len` on (a prompt read once, continued several ways).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Tokens read.
    pub fn len(&self) -> usize {
        self.len
    }

    /// A cache of the first `len` tokens of this one (all of them when it has fewer), with room
    /// for `room` tokens in all, so reading up to that many never moves it.
    pub fn prefix(&self, len: usize, room: usize) -> KvCache {
        let len = len.min(self.len);
        let cut = |v: &Vec<Vec<u16>>, values: fn(usize, usize) -> usize| {
            v.iter()
                .map(|run| {
                    let mut kept = Vec::with_capacity(values(room.max(len), self.width));
                    kept.extend_from_slice(&run[..values(len, self.width)]);
                    kept
                })
                .collect()
        };
        KvCache { keys: cut(&self.keys, key_values), values: cut(&self.values, value_len), len, width: self.width }
    }

    /// Makes room for `tokens` tokens in all, so reading up to that many never moves the cache.
    pub fn reserve(&mut self, tokens: usize) {
        let runs = self.keys.iter_mut().map(|run| (run, key_values(tokens, self.width)));
        for (run, values) in runs.chain(self.values.iter_mut().map(|run| (run, value_len(tokens, self.width)))) {
            run.reserve(values.saturating_sub(run.len()));
        }
    }

    /// Writes the key and value of position `at` of each key head of layer `l` (`heads` of
    /// them), from `keys` and `values` (the heads side by side), rounded to bf16. A position
    /// that begins a pair of values has its partner zeroed.
    fn push(&mut self, l: usize, heads: usize, at: usize, keys: &[f32], values: &[f32]) {
        let d = self.width;
        let (block, lane) = (at / KEY_BLOCK * KEY_BLOCK * d, at % KEY_BLOCK);
        for (run, k) in self.keys[l * heads..(l + 1) * heads].iter_mut().zip(keys.chunks_exact(d)) {
            run.resize(key_values(at + 1, d), 0);
            for (i, k) in k.iter().enumerate() {
                run[block + (i / 2 * KEY_BLOCK + lane) * 2 + i % 2] = attention::narrow(*k);
            }
        }
        let pair = at / 2 * 2 * d;
        for (run, v) in self.values[l * heads..(l + 1) * heads].iter_mut().zip(values.chunks_exact(d)) {
            if at.is_multiple_of(2) {
                run.truncate(pair);
            }
            run.resize(pair + 2 * d, 0);
            for (i, v) in v.iter().enumerate() {
                run[pair + 2 * i + at % 2] = attention::narrow(*v);
            }
        }
    }

    /// Bytes the cache holds, room made included.
    pub fn bytes(&self) -> usize {
        self.keys.iter().chain(&self.values).map(|l| l.capacity() * std::mem::size_of::<u16>()).sum()
    }
}

/// Values a head's keys of `tokens` positions take, whole blocks (see [`KvCache`]).
fn key_values(tokens: usize, d: usize) -> usize {
    tokens.div_ceil(KEY_BLOCK) * KEY_BLOCK * d
}

/// Values a head's values of `tokens` positions take, whole pairs (see [`KvCache`]).
fn value_len(tokens: usize, d: usize) -> usize {
    tokens.div_ceil(2) * 2 * d
}

/// One part of a batched forward pass: tokens to read after those in its cache, and whether
/// they are a prompt's (prompt tokens' products may run on other kernels than generated
/// tokens', see [`Activations`]; a token's kind is what makes its results the same wherever
/// it is read).
pub struct Part<'a> {
    pub cache: &'a mut KvCache,
    pub ids: &'a [u32],
    pub prompt: bool,
    /// The LoRA adapter its request runs with, if any: its deltas are added to its rows'
    /// projections (in f32, row by row, so its company still changes nothing).
    pub adapter: Option<&'a Adapter>,
}

/// Buffers of one forward pass, reused by the next.
#[derive(Default)]
pub struct Scratch {
    /// Each token's part and position.
    rows: Vec<(usize, usize)>,
    x: Vec<f32>,
    normed: Vec<f32>,
    wide: Vec<f32>,
    attn: Vec<f32>,
    act: Activations,
}

/// The first `len` values of `v`, made long enough; what they hold is left for the caller to
/// overwrite (every buffer of a pass is written whole before it is read).
fn grow(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

impl Llama {
    /// Reads the weights of a llama GGUF; positions up to `context` can be run.
    pub fn load<R: Read + Seek>(content: &Content, reader: &mut R, context: usize) -> Result<Llama, String> {
        let cfg = LlamaConfig::read(content)?;
        let norm = vector(content, reader, "output_norm.weight", cfg.hidden)?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let attn_norm = vector(content, reader, &format!("blk.{l}.attn_norm.weight"), cfg.hidden)?;
            let ffn_norm = vector(content, reader, &format!("blk.{l}.ffn_norm.weight"), cfg.hidden)?;
            let mut matrix = |name: &str, rows: usize, cols: usize| {
                matrix(content, reader, &format!("blk.{l}.{name}.weight"), rows, cols)
            };
            let (h, kv, f) = (cfg.hidden, cfg.kv_dim(), cfg.ffn);
            let qkv = Q8Matrix::stack(&[matrix("attn_q", h, h)?, matrix("attn_k", kv, h)?, matrix("attn_v", kv, h)?])?
                .with_bf16();
            let out = matrix("attn_output", h, h)?.with_bf16();
            let gate_up = Q8Matrix::stack(&[matrix("ffn_gate", f, h)?, matrix("ffn_up", f, h)?])?.with_bf16();
            let down = matrix("ffn_down", h, f)?.with_bf16();
            layers.push(Layer { attn_norm, qkv, out, ffn_norm, gate_up, down });
        }
        let embed = matrix(content, reader, "token_embd.weight", cfg.vocab, cfg.hidden)?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => Some(matrix(content, reader, "output.weight", cfg.vocab, cfg.hidden)?),
            false => None,
        };
        let pairs = cfg.head_dim / 2;
        // As candle and llama.cpp compute them: each pair's frequency and angle in f32.
        let freqs: Vec<f32> =
            (0..pairs).map(|i| 1.0 / cfg.rope_base.powf((2 * i) as f32 / cfg.head_dim as f32)).collect();
        let rope = (0..context)
            .flat_map(|p| freqs.iter().map(move |f| (p as f32 * f).sin_cos()))
            .map(|(s, c)| (c, s))
            .collect();
        Ok(Llama { cfg, embed, output, norm, layers, rope, context })
    }

    /// Bytes of keys and values one token takes in a [`KvCache`].
    pub fn kv_bytes_per_token(&self) -> usize {
        self.cfg.layers * self.cfg.kv_dim() * 2 * std::mem::size_of::<u16>()
    }

    /// Bytes a [`KvCache`] of `tokens` tokens holds (keys in whole blocks).
    pub fn kv_bytes(&self, tokens: usize) -> usize {
        let d = self.cfg.head_dim;
        let per_layer = self.cfg.kv_heads * (key_values(tokens, d) + value_len(tokens, d));
        self.cfg.layers * per_layer * std::mem::size_of::<u16>()
    }

    pub fn cache(&self) -> KvCache {
        KvCache {
            keys: vec![Vec::new(); self.cfg.layers * self.cfg.kv_heads],
            values: vec![Vec::new(); self.cfg.layers * self.cfg.kv_heads],
            len: 0,
            width: self.cfg.head_dim,
        }
    }

    /// Reads each part's `ids` after the tokens of its cache, in one pass: the weights are read
    /// once for every token of every part, and each part attends to its own cache only. Returns
    /// the logits after the last token of each part, in order. A part's logits are the same, bit
    /// for bit, as when it is read alone or in other pieces: every product, norm and attention
    /// row is computed for one token at a time, in the same order, whatever else is in the pass.
    pub fn forward_batch(&self, team: &Team, s: &mut Scratch, parts: &mut [Part]) -> Result<Vec<Vec<f32>>, String> {
        let cfg = &self.cfg;
        let (h, kv) = (cfg.hidden, cfg.kv_dim());
        for p in parts.iter() {
            if p.ids.is_empty() {
                return Err("no tokens to read".into());
            }
            if p.cache.len + p.ids.len() > self.context {
                return Err(format!("{} tokens in a context of {}", p.cache.len + p.ids.len(), self.context));
            }
            if let Some(bad) = p.ids.iter().find(|id| **id as usize >= cfg.vocab) {
                return Err(format!("token {bad} is not in the vocabulary of {}", cfg.vocab));
            }
        }
        if parts.is_empty() {
            return Ok(Vec::new());
        }
        // Each token's part and position, the prompts' parts first (their rows are the first
        // `prompt` of every product).
        let order: Vec<usize> = (0..parts.len())
            .filter(|k| parts[*k].prompt)
            .chain((0..parts.len()).filter(|k| !parts[*k].prompt))
            .collect();
        let mut prompt: usize = parts.iter().filter(|p| p.prompt).map(|p| p.ids.len()).sum();
        s.rows.clear();
        for &k in &order {
            let p = &parts[k];
            s.rows.extend((0..p.ids.len()).map(|i| (k, p.cache.len + i)));
        }
        let mut n = s.rows.len();
        let mut x = grow(&mut s.x, n * h);
        for (row, id) in x.chunks_exact_mut(h).zip(order.iter().flat_map(|k| parts[*k].ids)) {
            self.embed.dequantize_row(*id as usize, row);
        }
        let qkv_width = h + 2 * kv;
        for (layer, l) in self.layers.iter().zip(0..) {
            // Attention.
            rms_norm(x, grow(&mut s.normed, n * h), &layer.attn_norm, cfg.rms_eps);
            s.act.prepare(&s.normed[..n * h], h, prompt);
            let qkv = grow(&mut s.wide, n * qkv_width);
            s.act.matmul(team, &layer.qkv, qkv);
            let adapted = [(Target::Q, 0..h), (Target::K, h..h + kv), (Target::V, h + kv..qkv_width)];
            adapt(parts, &s.rows, l, &adapted, &s.normed[..n * h], qkv);
            let mut rows = qkv.chunks_exact_mut(qkv_width).zip(&s.rows);
            for &k in &order {
                let p = &mut parts[k];
                for (row, (_, at)) in rows.by_ref().take(p.ids.len()) {
                    let (q, rest) = row.split_at_mut(h);
                    let (k, v) = rest.split_at_mut(kv);
                    self.rotate(q, *at);
                    self.rotate(k, *at);
                    p.cache.push(l, cfg.kv_heads, *at, k, v);
                }
            }
            if l + 1 == self.layers.len() {
                // Past the last layer's keys and values only each part's last token counts
                // (its logits), so the rest of the layer runs for those rows alone: each row's
                // sums are its own, so theirs are the same bits.
                let last: Vec<usize> = order
                    .iter()
                    .scan(0, |end, &k| {
                        *end += parts[k].ids.len();
                        Some(*end - 1)
                    })
                    .collect();
                for (i, &r) in last.iter().enumerate() {
                    qkv.copy_within(r * qkv_width..(r + 1) * qkv_width, i * qkv_width);
                    x.copy_within(r * h..(r + 1) * h, i * h);
                    s.rows[i] = s.rows[r];
                }
                (n, prompt) = (last.len(), parts.iter().filter(|p| p.prompt).count());
                s.rows.truncate(n);
                x = &mut std::mem::take(&mut x)[..n * h];
            }
            let attn = grow(&mut s.attn, n * h);
            let caches: Vec<(&[u16], &[u16])> = parts
                .iter()
                .flat_map(|p| {
                    let heads = l * cfg.kv_heads..(l + 1) * cfg.kv_heads;
                    p.cache.keys[heads.clone()].iter().zip(&p.cache.values[heads]).map(|(k, v)| (&k[..], &v[..]))
                })
                .collect();
            self.attention(team, qkv, &caches, &s.rows, attn);
            s.act.prepare(attn, h, prompt);
            let out = grow(&mut s.normed, n * h);
            s.act.matmul(team, &layer.out, out);
            adapt(parts, &s.rows, l, &[(Target::O, 0..h)], &s.attn[..n * h], out);
            add(x, out);
            // Feed-forward.
            rms_norm(x, grow(&mut s.normed, n * h), &layer.ffn_norm, cfg.rms_eps);
            s.act.prepare(&s.normed[..n * h], h, prompt);
            let gate_up = grow(&mut s.wide, n * 2 * cfg.ffn);
            s.act.matmul(team, &layer.gate_up, gate_up);
            let adapted = [(Target::Gate, 0..cfg.ffn), (Target::Up, cfg.ffn..2 * cfg.ffn)];
            adapt(parts, &s.rows, l, &adapted, &s.normed[..n * h], gate_up);
            let hidden = grow(&mut s.attn, n * cfg.ffn);
            for (hid, gu) in hidden.chunks_exact_mut(cfg.ffn).zip(gate_up.chunks_exact(2 * cfg.ffn)) {
                swiglu(hid, &gu[..cfg.ffn], &gu[cfg.ffn..]);
            }
            s.act.prepare(hidden, cfg.ffn, prompt);
            let down = grow(&mut s.normed, n * h);
            s.act.matmul(team, &layer.down, down);
            adapt(parts, &s.rows, l, &[(Target::Down, 0..h)], &s.attn[..n * cfg.ffn], down);
            add(x, down);
        }
        // The last token of each part (the last layer kept one row a part, as `order` lists
        // them; a model has at least one layer), normed, through the output projection together
        // (in Q8_0 whatever their kind: the projection has no bf16 weights).
        let mut last = vec![0; parts.len()];
        for (i, &k) in order.iter().enumerate() {
            last[k] = i;
        }
        let normed = grow(&mut s.normed, parts.len() * h);
        for ((p, out), row) in parts.iter_mut().zip(normed.chunks_exact_mut(h)).zip(last) {
            rms_norm(&x[row * h..(row + 1) * h], out, &self.norm, cfg.rms_eps);
            p.cache.len += p.ids.len();
        }
        s.act.prepare(normed, h, 0);
        let mut logits = vec![0.0; parts.len() * cfg.vocab];
        s.act.matmul(team, self.output.as_ref().unwrap_or(&self.embed), &mut logits);
        Ok(logits.chunks_exact(cfg.vocab).map(<[f32]>::to_vec).collect())
    }

    /// Rotates each head of `x` (queries or keys of one token) to position `pos`.
    fn rotate(&self, x: &mut [f32], pos: usize) {
        let pairs = self.cfg.head_dim / 2;
        let table = &self.rope[pos * pairs..(pos + 1) * pairs];
        for head in x.chunks_exact_mut(self.cfg.head_dim) {
            for (pair, (cos, sin)) in head.chunks_exact_mut(2).zip(table) {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * cos - b * sin;
                pair[1] = a * sin + b * cos;
            }
        }
    }
}

/// Adds the deltas of the adapters of the rows' parts to a product of layer `l`: for each row
/// (`rows` gives its part) whose part has an adapter, each `(target, columns)`'s delta of the
/// row's input (a row of `input`) to those columns of its row of `out`.
fn adapt(
    parts: &[Part],
    rows: &[(usize, usize)],
    l: usize,
    targets: &[(Target, std::ops::Range<usize>)],
    input: &[f32],
    out: &mut [f32],
) {
    if parts.iter().all(|p| p.adapter.is_none()) {
        return;
    }
    let (width_in, width_out) = (input.len() / rows.len(), out.len() / rows.len());
    for (i, (part, _)) in rows.iter().enumerate() {
        let Some(adapter) = parts[*part].adapter else { continue };
        let x = &input[i * width_in..(i + 1) * width_in];
        for (target, columns) in targets {
            adapter.add(l, *target, x, &mut out[i * width_out + columns.start..i * width_out + columns.end]);
        }
    }
}

/// A vector of `len` values as f32.
fn vector<R: Read + Seek>(content: &Content, reader: &mut R, name: &str, len: usize) -> Result<Vec<f32>, String> {
    let err = |e: String| format!("tensor {name}: {e}");
    let t = content.tensor(reader, name, &Device::Cpu).map_err(|e| err(e.to_string()))?;
    let v =
        t.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).map_err(|e| err(e.to_string()))?;
    if v.len() != len {
        return Err(err(format!("{} values, expected {len}", v.len())));
    }
    Ok(v)
}

/// A weight matrix of `rows` x `cols` in Q8_0, requantized when the file has another type.
fn matrix<R: Read + Seek>(
    content: &Content,
    reader: &mut R,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Q8Matrix, String> {
    let err = |e: String| format!("tensor {name}: {e}");
    let t = content.tensor(reader, name, &Device::Cpu).map_err(|e| err(e.to_string()))?;
    if t.shape().dims() != [rows, cols] {
        return Err(err(format!("shape {:?}, expected [{rows}, {cols}]", t.shape().dims())));
    }
    if t.dtype() == GgmlDType::Q8_0 {
        let bytes = t.data().map_err(|e| err(e.to_string()))?;
        return Q8Matrix::from_ggml(&bytes, rows, cols).map_err(err);
    }
    let values =
        t.dequantize(&Device::Cpu).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).map_err(|e| err(e.to_string()))?;
    Q8Matrix::quantize(&values, rows, cols).map_err(err)
}

/// Partial sums a [`dot`] keeps: one AVX-512 register.
const LANES: usize = 16;

/// A dot product in a fixed order the compiler can vectorize: 16 partial sums (value k into
/// sum k % 16, in order), then halves added: sum l and l + 8, then l and l + 4, l + 2, l + 1.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    for (acc, (x, y)) in acc.iter_mut().zip(ra.iter().zip(rb)) {
        *acc += x * y;
    }
    halves(acc)
}

/// 16 partial sums added in [`dot`]'s order.
#[inline(always)]
fn halves(mut acc: [f32; LANES]) -> f32 {
    for w in [8, 4, 2, 1] {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    acc[0]
}

/// Each row of `x` scaled to unit root mean square, times `weight`, into `out`.
fn rms_norm(x: &[f32], out: &mut [f32], weight: &[f32], eps: f32) {
    let h = weight.len();
    for (x, out) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
        let mean_sq = dot(x, x) / h as f32;
        let inv = 1.0 / (mean_sq + eps).sqrt();
        for ((o, x), w) in out.iter_mut().zip(x).zip(weight) {
            *o = x * inv * w;
        }
    }
}

/// `gate`'s SiLU times `up`, into `out`, on the shared polynomial `exp`.
fn swiglu(out: &mut [f32], gate: &[f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::q8::wide::available() {
        // SAFETY: the CPU has the features `swiglu_wide` is compiled for.
        return unsafe { swiglu_wide(out, gate, up) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::q8::wide::fused() {
        // SAFETY: the CPU has the features `swiglu_fused` is compiled for.
        return unsafe { swiglu_fused(out, gate, up) };
    }
    swiglu_plain(out, gate, up)
}

#[inline(always)]
fn swiglu_plain(out: &mut [f32], gate: &[f32], up: &[f32]) {
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + crate::math::exp(-g)) * u;
    }
}

/// [`swiglu_plain`] for AVX-512 (the same operations: the same results).
///
/// # Safety
/// The CPU must have the features [`super::q8::wide::available`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2")]
unsafe fn swiglu_wide(out: &mut [f32], gate: &[f32], up: &[f32]) {
    swiglu_plain(out, gate, up)
}

/// [`swiglu_plain`] for AVX2 and FMA: `exp`'s fused multiply-adds in instructions instead of
/// calls to `fmaf` (the same results).
///
/// # Safety
/// The CPU must have the features [`super::q8::wide::fused`] checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn swiglu_fused(out: &mut [f32], gate: &[f32], up: &[f32]) {
    swiglu_plain(out, gate, up)
}

fn add(x: &mut [f32], y: &[f32]) {
    for (x, y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

mod attention;
#[cfg(test)]
mod tests;
