//! Gemma 3 on candle's quantized tensors: candle-transformers' `quantized_gemma3` (0.11.1),
//! ported here for what that model gets wrong or cannot do.
//!
//! - **The sliding window.** Five layers in six attend to the last `sliding_window` positions only
//!   (a query at `i` sees keys at `j` with `i - j < window`, as llama.cpp's `is_masked_swa` and
//!   transformers' Gemma 3 mask). candle applies the window only to a pass from position 0 (and
//!   one position too wide, `i - j <= window`); a token read alone attends to every position.
//!   Here a local layer's cache keeps only the last `window - 1` positions, which with the token
//!   read make its window: a token costs O(window) on those layers, whatever the sequence's
//!   length, and O(length) only on the global ones.
//! - **A pass that continues a sequence.** The mask of a pass of several tokens at position `p`
//!   covers the keys cached before `p` (candle's masks them all out), so a sequence can be
//!   continued by several tokens in one pass.
//! - **The feed-forward's activation** is GELU (tanh approximation), as Gemma was trained with
//!   (`gelu_pytorch_tanh`; llama.cpp's `LLM_FFN_GELU`), not candle's SiLU.
//! - **The rotary tables** are sized by the context we run and shared by the layers of one
//!   frequency, not 131,072 positions for each layer (2.4 GB for the 18 layers of the 270M).
//!
//! The rest (norms, the scaled embedding, query and key norms, two rotary frequencies) is candle's
//! as it was, on candle's quantized matrix products.

use std::io::{Read, Seek};

use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{DType, Device, IndexOp, Module, Result, Tensor};
use candle_nn::Embedding;
use candle_transformers::quantized_nn::RmsNorm;

/// Layers in a period of the pattern: the last of each is global, the others local.
const DEFAULT_PATTERN: usize = 6;
const DEFAULT_GLOBAL_FREQ: f32 = 1_000_000.0;
const DEFAULT_LOCAL_FREQ: f32 = 10_000.0;

/// The rotary embedding's cosines and sines, one row per position.
struct Rotary {
    cos: Tensor,
    sin: Tensor,
}

impl Rotary {
    /// `scale` multiplies the positions (linear rope scaling: 1 / factor).
    fn new(head_dim: usize, freq: f32, scale: f32, positions: usize, device: &Device) -> Result<Rotary> {
        let inv: Vec<f32> = (0..head_dim).step_by(2).map(|i| 1.0 / freq.powf(i as f32 / head_dim as f32)).collect();
        let inv = Tensor::new(inv.as_slice(), device)?.unsqueeze(0)?;
        let at = (Tensor::arange(0, positions as u32, device)?.to_dtype(DType::F32)? * f64::from(scale))?;
        let angles = at.unsqueeze(1)?.matmul(&inv)?;
        Ok(Rotary { cos: angles.cos()?, sin: angles.sin()? })
    }

    /// `x` (batch, heads, tokens, head_dim) rotated for the positions from `at` on.
    fn apply(&self, x: &Tensor, at: usize) -> Result<Tensor> {
        let tokens = x.dim(2)?;
        let cos = self.cos.narrow(0, at, tokens)?;
        let sin = self.sin.narrow(0, at, tokens)?;
        candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin)
    }
}

struct Layer {
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    out: QMatMul,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    attn_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
    post_ffn_norm: RmsNorm,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    /// A local layer's window; `None` for a global layer.
    window: Option<usize>,
    /// Keys and values (batch, kv heads, positions, head_dim) of the last positions read: all of
    /// them on a global layer, the last `window - 1` on a local one.
    cache: Option<(Tensor, Tensor)>,
}

pub struct Gemma3 {
    embed: Embedding,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    local: Rotary,
    global: Rotary,
    /// Positions read: the next pass continues from here, or starts anew at 0.
    len: usize,
    /// Positions the rotary tables cover.
    context: usize,
}

impl Gemma3 {
    /// Reads a `gemma3` GGUF's weights; positions up to `context` can be run.
    pub fn from_gguf<R: Read + Seek>(
        ct: &gguf_file::Content,
        reader: &mut R,
        context: usize,
        device: &Device,
    ) -> Result<Gemma3> {
        let md = |key: &str| {
            let key = format!("gemma3.{key}");
            ct.metadata.get(&key).ok_or_else(|| candle_core::Error::Msg(format!("cannot find {key} in metadata")))
        };
        let heads = md("attention.head_count")?.to_u32()? as usize;
        let kv_heads = md("attention.head_count_kv")?.to_u32()? as usize;
        let blocks = md("block_count")?.to_u32()? as usize;
        let hidden = md("embedding_length")?.to_u32()? as usize;
        let head_dim = md("attention.key_length")?.to_u32()? as usize;
        let eps = f64::from(md("attention.layer_norm_rms_epsilon")?.to_f32()?);
        let window = md("attention.sliding_window")?.to_u32()? as usize;
        let pattern =
            md("attention.sliding_window_type").and_then(|v| v.to_u32()).map_or(DEFAULT_PATTERN, |n| n as usize);
        let global_freq = md("rope.freq_base").and_then(|v| v.to_f32()).unwrap_or(DEFAULT_GLOBAL_FREQ);
        let local_freq = md("rope.local_freq_base").and_then(|v| v.to_f32()).unwrap_or(DEFAULT_LOCAL_FREQ);
        // The larger Gemma 3 stretch the global layers' positions (linear, factor 8), as llama.cpp
        // reads it; the local layers keep theirs.
        let linear = md("rope.scaling.type").and_then(|v| v.to_string().cloned()).is_ok_and(|t| t == "linear");
        let global_scale = match md("rope.scaling.factor").and_then(|v| v.to_f32()) {
            Ok(factor) if linear && factor > 0.0 => 1.0 / factor,
            _ => 1.0,
        };
        if window == 0 || pattern == 0 || heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            candle_core::bail!(
                "gemma3: sliding_window {window}, sliding_window_type {pattern}, {heads} heads, {kv_heads} kv heads"
            );
        }

        let tensor = |reader: &mut R, name: &str| ct.tensor(reader, name, device);
        let matrix = |reader: &mut R, name: &str| QMatMul::from_qtensor(ct.tensor(reader, name, device)?);
        let norm = |reader: &mut R, name: &str| RmsNorm::from_qtensor(ct.tensor(reader, name, device)?, eps);
        let embed = tensor(reader, "token_embd.weight")?.dequantize(device)?;
        let output_norm = norm(reader, "output_norm.weight")?;
        // Tied to the embedding unless the file has an output matrix of its own.
        let output = match tensor(reader, "output.weight") {
            Ok(t) => QMatMul::from_qtensor(t)?,
            Err(_) => matrix(reader, "token_embd.weight")?,
        };
        let mut layers = Vec::with_capacity(blocks);
        for i in 0..blocks {
            let name = |what: &str| format!("blk.{i}.{what}.weight");
            layers.push(Layer {
                q: matrix(reader, &name("attn_q"))?,
                k: matrix(reader, &name("attn_k"))?,
                v: matrix(reader, &name("attn_v"))?,
                out: matrix(reader, &name("attn_output"))?,
                q_norm: norm(reader, &name("attn_q_norm"))?,
                k_norm: norm(reader, &name("attn_k_norm"))?,
                attn_norm: norm(reader, &name("attn_norm"))?,
                post_attn_norm: norm(reader, &name("post_attention_norm"))?,
                ffn_norm: norm(reader, &name("ffn_norm"))?,
                post_ffn_norm: norm(reader, &name("post_ffw_norm"))?,
                gate: matrix(reader, &name("ffn_gate"))?,
                up: matrix(reader, &name("ffn_up"))?,
                down: matrix(reader, &name("ffn_down"))?,
                window: (!(i + 1).is_multiple_of(pattern)).then_some(window),
                cache: None,
            });
        }
        Ok(Gemma3 {
            embed: Embedding::new(embed, hidden),
            hidden,
            heads,
            kv_heads,
            head_dim,
            layers,
            norm: output_norm,
            output,
            local: Rotary::new(head_dim, local_freq, 1.0, context, device)?,
            global: Rotary::new(head_dim, global_freq, global_scale, context, device)?,
            len: 0,
            context,
        })
    }

    /// Forgets the sequence read.
    pub fn clear(&mut self) {
        self.len = 0;
        for layer in &mut self.layers {
            layer.cache = None;
        }
    }

    /// Positions each layer holds keys and values for.
    #[cfg(test)]
    pub fn cached(&self) -> Vec<usize> {
        self.layers.iter().map(|l| l.cache.as_ref().map_or(0, |(k, _)| k.dim(2).unwrap_or(0))).collect()
    }

    /// Reads `ids` (batch 1, tokens) at position `at`: 0 starts a sequence anew, anything else
    /// must continue the one read. The logits (1, vocab) after the last of them.
    pub fn forward(&mut self, ids: &Tensor, at: usize) -> Result<Tensor> {
        let (batch, tokens) = ids.dims2()?;
        if batch != 1 || tokens == 0 {
            candle_core::bail!("gemma3: a pass reads one sequence of at least one token, not {batch} x {tokens}");
        }
        if at == 0 {
            self.clear();
        } else if at != self.len {
            candle_core::bail!("gemma3: a pass at position {at} after {} positions read", self.len);
        }
        if at + tokens > self.context {
            candle_core::bail!("gemma3: positions up to {} in a context of {}", at + tokens, self.context);
        }
        // Read positions are forgotten until the pass succeeds.
        self.len = 0;
        let mut x = (self.embed.forward(ids)? * (self.hidden as f64).sqrt())?;
        for layer in &mut self.layers {
            let rotary = if layer.window.is_some() { &self.local } else { &self.global };
            let shape = Shape { heads: self.heads, kv_heads: self.kv_heads, head_dim: self.head_dim };
            let attn = layer.attention(&layer.attn_norm.forward(&x)?, at, rotary, shape)?;
            let x1 = (layer.post_attn_norm.forward(&attn)? + &x)?;
            let h = layer.ffn_norm.forward(&x1)?;
            let ffn = layer.down.forward(&(layer.gate.forward(&h)?.gelu()? * layer.up.forward(&h)?)?)?;
            x = (layer.post_ffn_norm.forward(&ffn)? + x1)?;
        }
        self.len = at + tokens;
        let last = x.i((.., tokens - 1, ..))?;
        self.output.forward(&self.norm.forward(&last)?)
    }
}

#[derive(Clone, Copy)]
struct Shape {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Layer {
    /// Attention for `x` (1, tokens, hidden) at positions from `at`, after those cached.
    fn attention(&mut self, x: &Tensor, at: usize, rotary: &Rotary, s: Shape) -> Result<Tensor> {
        let tokens = x.dim(1)?;
        let split = |t: Tensor, heads: usize| t.reshape((1, tokens, heads, s.head_dim))?.transpose(1, 2);
        let q = self.q_norm.forward(&split(self.q.forward(x)?, s.heads)?.contiguous()?)?;
        let k = self.k_norm.forward(&split(self.k.forward(x)?, s.kv_heads)?.contiguous()?)?;
        let v = split(self.v.forward(x)?, s.kv_heads)?;
        let q = rotary.apply(&q, at)?;
        let k = rotary.apply(&k, at)?;
        let (k, v) = match self.cache.take() {
            Some((ck, cv)) => (Tensor::cat(&[&ck, &k], 2)?, Tensor::cat(&[&cv, &v], 2)?),
            None => (k, v.contiguous()?),
        };
        // Keys for the positions from `first` to `at + tokens`.
        let keys = k.dim(2)?;
        let first = at + tokens - keys;
        // What the next token needs: on a local layer, the last `window - 1` positions.
        let keep = self.window.map_or(keys, |w| keys.min(w - 1));
        self.cache = Some((k.narrow(2, keys - keep, keep)?, v.narrow(2, keys - keep, keep)?));

        let n_rep = s.heads / s.kv_heads;
        let k = candle_transformers::utils::repeat_kv(k, n_rep)?.contiguous()?;
        let v = candle_transformers::utils::repeat_kv(v, n_rep)?.contiguous()?;
        let scores = (q.matmul(&k.t()?)? / (s.head_dim as f64).sqrt())?;
        // One token whose cache holds only what it may see needs no mask.
        let scores = if tokens == 1 && self.window.is_none_or(|w| keys <= w) {
            scores
        } else {
            scores.broadcast_add(&mask(at, tokens, first, keys, self.window, x.device())?)?
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let out = weights.matmul(&v)?.transpose(1, 2)?.reshape((1, tokens, s.heads * s.head_dim))?;
        self.out.forward(&out)
    }
}

/// The additive mask (tokens, keys) of queries at `at..at + tokens` over keys at
/// `first..first + keys`: a query sees the keys not after it and, on a local layer, less than
/// `window` positions before it.
fn mask(at: usize, tokens: usize, first: usize, keys: usize, window: Option<usize>, device: &Device) -> Result<Tensor> {
    let sees = |query: usize, key: usize| key <= query && window.is_none_or(|w| query - key < w);
    let values: Vec<f32> = (at..at + tokens)
        .flat_map(|query| (first..first + keys).map(move |key| if sees(query, key) { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Tensor::from_vec(values, (tokens, keys), device)?.reshape((1, 1, tokens, keys))
}
