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
//! taken as it is. Norms, rotary embeddings and attention are f32, as in llama.cpp and candle:
//! rotary embeddings in the interleaved ("normal") form of GGUF llama weights, attention with
//! grouped key/value heads. Keys and values are kept in f16, as llama.cpp keeps them. The KV
//! cache is the caller's ([`KvCache`]), so requests share the weights and nothing else.

use std::io::{Read, Seek};

use super::adapter::{Adapter, Target};
use super::q8::{Activations, Out, Q8Matrix};
use super::team::Team;
use candle_core::Device;
use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::Content;
use half::f16;

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

/// The keys and values of the tokens read so far, one request's, in f16 as llama.cpp keeps them:
/// half the bytes a generation step reads and a kept prompt holds. A key or value is rounded to
/// f16 once, when its token is read, and widened back exactly wherever it is used, so every
/// way of reading the cache sees the same numbers.
pub struct KvCache {
    /// Per layer, `[position][kv_heads * head_dim]`, f16 bits.
    keys: Vec<Vec<u16>>,
    values: Vec<Vec<u16>>,
    len: usize,
    /// Values of one token in one layer (`kv_heads * head_dim`).
    width: usize,
}

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
        let cut = |v: &Vec<Vec<u16>>| {
            v.iter()
                .map(|layer| {
                    let mut kept = Vec::with_capacity(room.max(len) * self.width);
                    kept.extend_from_slice(&layer[..len * self.width]);
                    kept
                })
                .collect()
        };
        KvCache { keys: cut(&self.keys), values: cut(&self.values), len, width: self.width }
    }

    /// Makes room for `tokens` tokens in all, so reading up to that many never moves the cache.
    pub fn reserve(&mut self, tokens: usize) {
        for layer in self.keys.iter_mut().chain(&mut self.values) {
            layer.reserve((tokens * self.width).saturating_sub(layer.len()));
        }
    }

    /// Bytes the cache holds, room made included.
    pub fn bytes(&self) -> usize {
        self.keys.iter().chain(&self.values).map(|l| l.capacity() * std::mem::size_of::<u16>()).sum()
    }
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

    pub fn cache(&self) -> KvCache {
        KvCache {
            keys: vec![Vec::new(); self.cfg.layers],
            values: vec![Vec::new(); self.cfg.layers],
            len: 0,
            width: self.cfg.kv_dim(),
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
        let prompt: usize = parts.iter().filter(|p| p.prompt).map(|p| p.ids.len()).sum();
        s.rows.clear();
        for &k in &order {
            let p = &parts[k];
            s.rows.extend((0..p.ids.len()).map(|i| (k, p.cache.len + i)));
        }
        let n = s.rows.len();
        let x = grow(&mut s.x, n * h);
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
                let pos = p.cache.len;
                let (keys, values) = (&mut p.cache.keys[l], &mut p.cache.values[l]);
                keys.truncate(pos * kv);
                values.truncate(pos * kv);
                for (row, (_, at)) in rows.by_ref().take(p.ids.len()) {
                    let (q, rest) = row.split_at_mut(h);
                    let (k, v) = rest.split_at_mut(kv);
                    self.rotate(q, *at);
                    self.rotate(k, *at);
                    keys.extend(k.iter().map(|k| f16::from_f32(*k).to_bits()));
                    values.extend(v.iter().map(|v| f16::from_f32(*v).to_bits()));
                }
            }
            let attn = grow(&mut s.attn, n * h);
            let caches: Vec<(&[u16], &[u16])> =
                parts.iter().map(|p| (p.cache.keys[l].as_slice(), p.cache.values[l].as_slice())).collect();
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
        // The last token of each part, normed, through the output projection together (in
        // Q8_0 whatever their kind: the projection has no bf16 weights).
        let mut last = vec![0; parts.len()];
        let mut end = 0;
        for &k in &order {
            end += parts[k].ids.len();
            last[k] = end - 1;
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

    /// Causal attention of each new token's queries (in `qkv`; `rows` gives its part and
    /// position) over the keys and values of its part's cache up to its position, into `out`;
    /// (token, key head) pairs, each with the query heads that share the key head, are dealt
    /// out to the shares in turn, so each has as many early (short) rows as late ones, and
    /// there are a few shares a thread, for threads that arrive late.
    fn attention(
        &self,
        team: &Team,
        qkv: &[f32],
        caches: &[(&[u16], &[u16])],
        rows: &[(usize, usize)],
        out: &mut [f32],
    ) {
        let cfg = &self.cfg;
        let items = rows.len() * cfg.kv_heads;
        let out = Out::new(out, cfg.hidden);
        let shares = 4 * team.threads();
        team.run(shares, &|t| {
            let items = (t..items).step_by(shares);
            #[cfg(target_arch = "x86_64")]
            {
                if super::q8::wide::available() && fused::available() {
                    // SAFETY: the CPU has the features `attend_wide` is compiled for.
                    return unsafe { attend_wide(cfg, items, qkv, caches, rows, out) };
                }
                if fused::available() {
                    // SAFETY: the CPU has the features `attend_fused` is compiled for.
                    return unsafe { fused::attend_fused(cfg, items, qkv, caches, rows, out) };
                }
            }
            attend(cfg, items, qkv, caches, rows, out, Loops { scores: scores_heads, weigh: weigh_heads });
        });
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

/// Attention's two inner loops: the scores of each query head of a group against a run of keys
/// (like [`scores_heads`]), and
/// the values weighted by the scores of each query head of a group (like [`weigh_heads`]).
struct Loops<S, W> {
    scores: S,
    weigh: W,
}

/// Attention for the (token, key head) `items` of one thread (see [`Llama::attention`]): for
/// each query head that shares the key head, the query's score against every key up to its
/// position ([`scores_one_by_one`]: in [`dot`]'s order with fused multiply-adds, times the
/// scale) and their [`softmax`]; then the values weighted by each head's scores, each output
/// summed over positions in order with fused multiply-adds.
/// Every way of computing the two loops gives the same bits, so a row's attention depends only
/// on its own queries and cache.
#[inline(always)]
fn attend(
    cfg: &LlamaConfig,
    items: std::iter::StepBy<std::ops::Range<usize>>,
    qkv: &[f32],
    caches: &[(&[u16], &[u16])],
    rows: &[(usize, usize)],
    out: Out,
    loops: Loops<
        impl Fn(&[f32], usize, &[u16], usize, f32, &mut [f32]),
        impl Fn(&[f32], usize, &[u16], usize, &mut [f32]),
    >,
) {
    let Loops { scores: scores_of, weigh } = loops;
    let (h, kv, d) = (cfg.hidden, cfg.kv_dim(), cfg.head_dim);
    let group = cfg.heads / cfg.kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    let width = h + 2 * kv;
    let mut scores = Vec::new();
    for item in items {
        let (i, g) = (item / cfg.kv_heads, item % cfg.kv_heads);
        let (part, pos) = rows[i];
        let (keys, values) = caches[part];
        scores.resize(group * (pos + 1), 0.0);
        // The group's query heads, side by side in the row.
        let qs = &qkv[i * width + g * group * d..i * width + (g + 1) * group * d];
        scores_of(qs, group, &keys[g * d..], kv, scale, &mut scores);
        for scores in scores.chunks_exact_mut(pos + 1) {
            softmax(scores);
        }
        // SAFETY: (token i, the group's heads) is this thread's item alone, within `out`.
        let out = unsafe { out.slice(i, g * group * d, group * d) };
        weigh(&scores, group, &values[g * d..], kv, out);
    }
}

/// For each of `heads` query heads, `out` (their outputs side by side) = the values from the
/// first of `values`, `stride` apart, weighted by the head's `scores` (theirs side by side, one
/// per position each) and summed over positions in order.
#[inline(always)]
fn weigh_heads(scores: &[f32], heads: usize, values: &[u16], stride: usize, out: &mut [f32]) {
    let (len, d) = (scores.len() / heads, out.len() / heads);
    for (scores, out) in scores.chunks_exact(len).zip(out.chunks_exact_mut(d)) {
        weigh_by_chunks(scores, values, stride, out);
    }
}

/// `out` = the values from the first of `values`, `stride` apart, weighted by `scores` and
/// summed over positions in order, a fused multiply-add a position.
#[inline(always)]
fn weigh_by_chunks(scores: &[f32], values: &[u16], stride: usize, out: &mut [f32]) {
    for (c, out) in out.chunks_mut(LANES).enumerate() {
        let mut acc = [0.0f32; LANES];
        for (s, v) in scores.iter().zip(values[c * LANES..].chunks(stride)) {
            for (a, v) in acc.iter_mut().zip(&v[..out.len()]) {
                *a = s.mul_add(widen(*v), *a);
            }
        }
        out.copy_from_slice(&acc[..out.len()]);
    }
}
/// [`weigh_heads`] for `G` heads of `C` registers of 16 values, every output kept in its
/// register over the positions, each position's values loaded once for all heads (the same
/// sums in the same order).
///
/// # Safety
/// The CPU must have AVX-512 F; `out` must be `G * 16 * C` long, `scores` `G` runs of the same
/// length, and each position's values exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn weigh_wide<const G: usize, const C: usize>(scores: &[f32], values: &[u16], stride: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let len = scores.len() / G;
    let mut acc = [[_mm512_setzero_ps(); C]; G];
    let v = values.as_ptr();
    for j in 0..len {
        let vals: [__m512; C] = std::array::from_fn(|c| unsafe { load_f16(v.add(j * stride + c * LANES)) });
        for (g, acc) in acc.iter_mut().enumerate() {
            let s = _mm512_set1_ps(scores[g * len + j]);
            for (acc, v) in acc.iter_mut().zip(&vals) {
                *acc = _mm512_fmadd_ps(s, *v, *acc);
            }
        }
    }
    for (g, acc) in acc.iter().enumerate() {
        for (c, acc) in acc.iter().enumerate() {
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((g * C + c) * LANES), *acc) };
        }
    }
}

/// For each of `heads` queries (side by side in `qs`), its scores (theirs side by side in
/// `scores`, one per key each) against the keys `stride` apart from the first of `keys`.
#[inline(always)]
fn scores_heads(qs: &[f32], heads: usize, keys: &[u16], stride: usize, scale: f32, scores: &mut [f32]) {
    let (d, len) = (qs.len() / heads, scores.len() / heads);
    for (q, scores) in qs.chunks_exact(d).zip(scores.chunks_exact_mut(len)) {
        scores_one_by_one(q, keys, stride, scale, scores);
    }
}

/// The scores of `q` against `scores.len()` keys, `stride` apart from the first of `keys`,
/// one at a time.
#[inline(always)]
fn scores_one_by_one(q: &[f32], keys: &[u16], stride: usize, scale: f32, scores: &mut [f32]) {
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot_by(q, &keys[j * stride..j * stride + q.len()], widen, f32::mul_add) * scale;
    }
}

/// [`attend`], for AVX-512: the scores of 16 keys at a time, their 16 partial sums added in
/// [`dot`]'s order by exchanging halves between registers, and the heads of a group
/// weighted together, so the same bits.
///
/// # Safety
/// The CPU must have the features [`super::q8::wide::available`] and [`fused::available`]
/// check.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2,fma")]
unsafe fn attend_wide(
    cfg: &LlamaConfig,
    items: std::iter::StepBy<std::ops::Range<usize>>,
    qkv: &[f32],
    caches: &[(&[u16], &[u16])],
    rows: &[(usize, usize)],
    out: Out,
) {
    let scores_of = |qs: &[f32], heads: usize, keys: &[u16], stride: usize, scale: f32, scores: &mut [f32]| {
        let (d, len) = (qs.len() / heads, scores.len() / heads);
        if !d.is_multiple_of(LANES) {
            return scores_heads(qs, heads, keys, stride, scale, scores);
        }
        let last = (len.max(1) - 1) * stride + d;
        assert!(keys.len() >= last, "keys of {len} positions");
        let whole = len / LANES * LANES;
        for b in (0..whole).step_by(LANES) {
            let at = keys[b * stride..].as_ptr();
            // SAFETY: the CPU has the features, and the 16 keys from b exist (above).
            unsafe {
                match (heads, d) {
                    (3, 64) => scores_group::<3, 4>(qs, at, stride, scale, &mut scores[b..], len),
                    _ => {
                        for (q, scores) in qs.chunks_exact(d).zip(scores.chunks_exact_mut(len)) {
                            scores_wide(q, at, stride, scale, &mut scores[b..b + LANES]);
                        }
                    }
                }
            }
        }
        for (q, scores) in qs.chunks_exact(d).zip(scores.chunks_exact_mut(len)) {
            for (j, s) in scores.iter_mut().enumerate().skip(whole) {
                // SAFETY: as above; key j exists.
                *s = unsafe { score_wide(q, keys[j * stride..].as_ptr()) } * scale;
            }
        }
    };
    let weigh = |scores: &[f32], heads: usize, values: &[u16], stride: usize, out: &mut [f32]| {
        let len = scores.len() / heads;
        let last = (len.max(1) - 1) * stride + out.len() / heads;
        assert!(values.len() >= last, "values of {len} positions");
        // SAFETY: the CPU has the features; `out` is heads * 16 * C long and the values exist
        // (above).
        unsafe {
            match (heads, out.len() / heads) {
                (1, 64) => weigh_wide::<1, 4>(scores, values, stride, out),
                (2, 64) => weigh_wide::<2, 4>(scores, values, stride, out),
                (3, 64) => weigh_wide::<3, 4>(scores, values, stride, out),
                (4, 64) => weigh_wide::<4, 4>(scores, values, stride, out),
                (1, 32) => weigh_wide::<1, 2>(scores, values, stride, out),
                (1, 128) => weigh_wide::<1, 8>(scores, values, stride, out),
                _ => weigh_heads(scores, heads, values, stride, out),
            }
        }
    };
    attend(cfg, items, qkv, caches, rows, out, Loops { scores: scores_of, weigh })
}

/// The scores of `q` (a multiple of 16 long) against the 16 keys from `keys`, `stride` apart.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; the keys must exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn scores_wide(q: &[f32], keys: *const u16, stride: usize, scale: f32, scores: &mut [f32]) {
    use std::arch::x86_64::*;
    // Each key's 16 partial sums, as `scores_one_by_one` forms them.
    let mut p = [_mm512_setzero_ps(); LANES];
    for (j, p) in p.iter_mut().enumerate() {
        for c in 0..q.len() / LANES {
            let (q, k) =
                unsafe { (_mm512_loadu_ps(q.as_ptr().add(c * LANES)), load_f16(keys.add(j * stride + c * LANES))) };
            *p = _mm512_fmadd_ps(q, k, *p);
        }
    }
    // SAFETY: the CPU has the features; 16 scores fit.
    unsafe { _mm512_storeu_ps(scores.as_mut_ptr(), reduce_keys(&p, scale)) };
}

/// [`scores_wide`] for the `G` query heads of a group (`C` registers of 16 values each, side by
/// side in `qs`) at once, each key loaded once for all of them: the same partial sums, added in
/// the same order. Head `h`'s 16 scores go to `scores[h * len..]`.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; the 16 keys must exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn scores_group<const G: usize, const C: usize>(
    qs: &[f32],
    keys: *const u16,
    stride: usize,
    scale: f32,
    scores: &mut [f32],
    len: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY: `qs` holds G heads of C registers; `q[c][h]` is head h's register c.
    let q: [[__m512; G]; C] = std::array::from_fn(|c| {
        std::array::from_fn(|h| unsafe { _mm512_loadu_ps(qs.as_ptr().add((h * C + c) * LANES)) })
    });
    let mut p = [[_mm512_setzero_ps(); LANES]; G];
    // Four keys at a time: their sums for every head stay in registers.
    for j in (0..LANES).step_by(4) {
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for (c, q) in q.iter().enumerate() {
            // SAFETY: keys j to j + 3 exist.
            let four: [__m512; 4] =
                std::array::from_fn(|k| unsafe { load_f16(keys.add((j + k) * stride + c * LANES)) });
            for (acc, q) in acc.iter_mut().zip(q) {
                for (acc, key) in acc.iter_mut().zip(&four) {
                    *acc = _mm512_fmadd_ps(*q, *key, *acc);
                }
            }
        }
        for (p, acc) in p.iter_mut().zip(&acc) {
            p[j..j + 4].copy_from_slice(acc);
        }
    }
    for (h, p) in p.iter().enumerate() {
        // SAFETY: head h's 16 scores are within `scores`.
        unsafe { _mm512_storeu_ps(scores.as_mut_ptr().add(h * len), reduce_keys(p, scale)) };
    }
}

/// 16 keys' scores from their 16 partial sums each (`p[j]` key j's), added in [`dot`]'s order,
/// times `scale`.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn reduce_keys(p: &[std::arch::x86_64::__m512; LANES], scale: f32) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // `dot`'s halves for 16 keys at once: lanes l and l + 8 of each key, then l and l + 4,
    // l and l + 2, l and l + 1, two registers' halves gathered into one at each step.
    let half8 =
        |a: __m512, b: __m512| _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b));
    let half4 =
        |a: __m512, b: __m512| _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(a, b), _mm512_shuffle_f32x4::<0xDD>(a, b));
    let half2 = |a: __m512, b: __m512| _mm512_add_ps(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b));
    let half1 = |a: __m512, b: __m512| _mm512_add_ps(_mm512_shuffle_ps::<0x88>(a, b), _mm512_shuffle_ps::<0xDD>(a, b));
    let c: [__m512; 8] = std::array::from_fn(|i| half8(p[2 * i], p[2 * i + 1]));
    let e: [__m512; 4] = std::array::from_fn(|i| half4(c[2 * i], c[2 * i + 1]));
    let f = [half2(e[0], e[1]), half2(e[2], e[3])];
    let g = half1(f[0], f[1]);
    // g holds key 4m + k at lane 4k + m.
    let order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_mul_ps(_mm512_permutexvar_ps(order, g), _mm512_set1_ps(scale))
}

/// The score of `q` (a multiple of 16 long) against one key, in [`dot`]'s order.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; the key must exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn score_wide(q: &[f32], key: *const u16) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = _mm512_setzero_ps();
    for c in 0..q.len() / LANES {
        // SAFETY: the key's values exist.
        let (q, k) = unsafe { (_mm512_loadu_ps(q.as_ptr().add(c * LANES)), load_f16(key.add(c * LANES))) };
        acc = _mm512_fmadd_ps(q, k, acc);
    }
    let mut sums = [0.0f32; LANES];
    // SAFETY: 16 values fit.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), acc) };
    halves(sums)
}

/// 16 f16 values from `at`, widened (exactly) to f32.
///
/// # Safety
/// The CPU must have AVX-512 F; 16 values must exist from `at`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_f16(at: *const u16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(at.cast())) }
}

/// An f16 (its bits) as f32: exact, in plain arithmetic the compiler can inline and vectorize.
#[inline(always)]
fn widen(h: u16) -> f32 {
    f16::from_bits(h).to_f32_const()
}

/// [`attend`] compiled with fused multiply-adds for x86-64 CPUs that have them without AVX-512
/// (where a fused multiply-add is otherwise a call to the C library's `fmaf`).
#[cfg(target_arch = "x86_64")]
mod fused {
    use super::*;

    pub fn available() -> bool {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
    }

    /// # Safety
    /// The CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn attend_fused(
        cfg: &LlamaConfig,
        items: std::iter::StepBy<std::ops::Range<usize>>,
        qkv: &[f32],
        caches: &[(&[u16], &[u16])],
        rows: &[(usize, usize)],
        out: Out,
    ) {
        attend(cfg, items, qkv, caches, rows, out, Loops { scores: scores_heads, weigh: weigh_heads })
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
    dot_by(a, b, |x| x, |x, y, acc| acc + x * y)
}

/// [`dot`]'s order, each value of `b` taken as `value(b)` and each product added to its
/// partial sum by `add(x, y, sum)` (attention's scores: f16 keys, fused multiply-adds).
#[inline(always)]
fn dot_by<B: Copy>(a: &[f32], b: &[B], value: impl Fn(B) -> f32, add: impl Fn(f32, f32, f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] = add(x[l], value(y[l]), acc[l]);
        }
    }
    for (acc, (x, y)) in acc.iter_mut().zip(ra.iter().zip(rb)) {
        *acc = add(*x, value(*y), *acc);
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

/// `x` as probabilities: `e^(x - max)` (see [`crate::math::exp`]), over their sum, added in
/// [`dot`]'s order.
#[inline(always)]
fn softmax(x: &mut [f32]) {
    // The largest, lane by lane, then over the lanes: the same value in any order.
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for c in x.chunks(LANES) {
        for (m, v) in lanes.iter_mut().zip(c) {
            *m = m.max(*v);
        }
    }
    let max = lanes.into_iter().fold(f32::NEG_INFINITY, f32::max);
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *v = crate::math::exp(*v - max);
            *a += *v;
        }
    }
    for (a, v) in acc.iter_mut().zip(chunks.into_remainder()) {
        *v = crate::math::exp(*v - max);
        *a += *v;
    }
    let sum = halves(acc);
    for v in x.iter_mut() {
        *v /= sum;
    }
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

fn add(x: &mut [f32], y: &[f32]) {
    for (x, y) in x.iter_mut().zip(y) {
        *x += y;
    }
}

#[cfg(test)]
mod tests;
