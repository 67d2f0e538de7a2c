//! LoRA adapters: low-rank deltas on a llama model's projections, trained on a persona's study
//! data.
//!
//! The serving pass ([`super::llama`]) runs on Q8_0 weights and has no backward pass (nor has
//! candle's quantized matmul), so training runs a pass of its own in candle: the base weights
//! frozen, dequantized to f32 from the same file, and for each target projection `W` of each
//! layer two small matrices `A` (`rank` x in) and `B` (out x `rank`) as variables, the
//! projection becoming `x W^T + (alpha / rank) (x A^T) B^T`. `B` starts at zero, so an adapter
//! that has not trained is the base model (a test checks this pass's logits against the serving
//! pass's). Everything here is composed of candle operations that have a backward pass: the
//! norms, rotary embeddings and softmax are written out rather than taken from candle's fused
//! kernels, which have none.

use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use candle_core::{D, DType, Device, Tensor, Var};

pub use super::adapter::Target;
use super::adapter::{Adapter, Delta as Served};
use super::llama::LlamaConfig;
use super::{ChatMessage, GgufTokenizer};

/// The shape of an adapter and how it trains.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    pub targets: Vec<Target>,
    /// AdamW's learning rate.
    pub learning_rate: f64,
}

impl Default for LoraConfig {
    /// Rank 8 on every projection, alpha 16, learning rate 1e-3 (about 2.4 M values for
    /// SmolLM2-135M).
    fn default() -> LoraConfig {
        LoraConfig { rank: 8, alpha: 16.0, targets: Target::ALL.to_vec(), learning_rate: 1e-3 }
    }
}

/// One training example: a chat's tokens, and where the answer the model learns to write begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub ids: Vec<u32>,
    pub from: usize,
}

impl Example {
    /// A chat whose last message is the assistant's answer (as a study session keeps it), in the
    /// tokens the serving pass reads: the prompt through the chat template up to the assistant's
    /// turn, then the answer and the token that ends the turn, which is what is learned.
    pub fn from_chat(tokenizer: &GgufTokenizer, messages: &[ChatMessage]) -> Result<Example, String> {
        let Some((answer, prompt)) = messages.split_last() else {
            return Err("a chat of no messages".into());
        };
        if answer.role != "assistant" {
            return Err(format!("the last message is the {}'s, not the assistant's answer", answer.role));
        }
        if answer.content.trim().is_empty() || prompt.is_empty() {
            return Err("a chat needs a prompt and an answer that is not empty".into());
        }
        let mut ids = tokenizer.encode_chat(prompt).map_err(err)?;
        let from = ids.len();
        ids.extend(tokenizer.encode_plain(&answer.content).map_err(err)?);
        ids.push(tokenizer.im_end());
        Ok(Example { ids, from })
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One layer's frozen weights, f32, each projection `[out, in]`.
struct Layer {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    /// By target.
    weights: BTreeMap<Target, Tensor>,
}

/// The low-rank delta of one projection.
struct Delta {
    a: Var,
    b: Var,
}

/// A llama model's frozen base weights in f32 and an adapter being trained on them.
pub struct Trainer {
    cfg: LlamaConfig,
    config: LoraConfig,
    embed: Tensor,
    output: Tensor,
    norm: Tensor,
    layers: Vec<Layer>,
    /// Per layer, by target.
    deltas: Vec<BTreeMap<Target, Delta>>,
    /// cos and sin of each position's angle for each pair of a head, `[position, pairs]`.
    cos: Tensor,
    sin: Tensor,
    /// AdamW's first and second moments of each variable, by tensor name (none before the
    /// first step).
    moments: BTreeMap<String, (Tensor, Tensor)>,
    steps: usize,
}

/// AdamW's decay rates of its moments and its epsilon (as candle's and PyTorch's defaults); no
/// weight decay.
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

impl Trainer {
    /// Reads the base weights of a llama GGUF (any type candle dequantizes) and makes a fresh
    /// adapter: `A` uniform in ±1/sqrt(in) from `seed`, `B` zero. Positions up to `context`.
    pub fn new<R: Read + Seek>(
        content: &Content,
        reader: &mut R,
        config: LoraConfig,
        context: usize,
        seed: u64,
    ) -> Result<Trainer, String> {
        if config.rank == 0 || config.targets.is_empty() {
            return Err("an adapter needs a rank of at least 1 and at least one target".into());
        }
        let cfg = LlamaConfig::read(content)?;
        let dev = Device::Cpu;
        let mut tensor = |name: &str| -> Result<Tensor, String> {
            let t = content.tensor(reader, name, &dev).map_err(|e| format!("tensor {name}: {e}"))?;
            t.dequantize(&dev).map_err(|e| format!("tensor {name}: {e}"))
        };
        let embed = tensor("token_embd.weight")?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => tensor("output.weight")?,
            false => embed.clone(),
        };
        let norm = tensor("output_norm.weight")?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let mut weights = BTreeMap::new();
            for t in Target::ALL {
                weights.insert(t, tensor(&format!("blk.{l}.{}.weight", t.tensor()))?);
            }
            layers.push(Layer {
                attn_norm: tensor(&format!("blk.{l}.attn_norm.weight"))?,
                ffn_norm: tensor(&format!("blk.{l}.ffn_norm.weight"))?,
                weights,
            });
        }
        let mut rng = seed.max(1);
        let mut uniform = move |n: usize, bound: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    // xorshift64*: reproducible from the seed.
                    rng ^= rng >> 12;
                    rng ^= rng << 25;
                    rng ^= rng >> 27;
                    let u = (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
                    (2.0 * u - 1.0) * bound
                })
                .collect()
        };
        let mut deltas = Vec::with_capacity(cfg.layers);
        for layer in &layers {
            let mut by_target = BTreeMap::new();
            for &t in &config.targets {
                let (out, inp) = layer.weights[&t].dims2().map_err(err)?;
                let a =
                    Tensor::from_vec(uniform(config.rank * inp, 1.0 / (inp as f32).sqrt()), (config.rank, inp), &dev)
                        .map_err(err)?;
                let b = Tensor::zeros((out, config.rank), DType::F32, &dev).map_err(err)?;
                by_target
                    .insert(t, Delta { a: Var::from_tensor(&a).map_err(err)?, b: Var::from_tensor(&b).map_err(err)? });
            }
            deltas.push(by_target);
        }
        let pairs = cfg.head_dim / 2;
        // As the serving pass computes them: each pair's frequency and angle in f32.
        let freqs: Vec<f32> =
            (0..pairs).map(|i| 1.0 / cfg.rope_base.powf((2 * i) as f32 / cfg.head_dim as f32)).collect();
        let angles: Vec<(f32, f32)> =
            (0..context).flat_map(|p| freqs.iter().map(move |f| (p as f32 * f).sin_cos())).collect();
        let cos = Tensor::from_vec(angles.iter().map(|a| a.1).collect(), (context, pairs), &dev).map_err(err)?;
        let sin = Tensor::from_vec(angles.iter().map(|a| a.0).collect(), (context, pairs), &dev).map_err(err)?;
        Ok(Trainer { cfg, config, embed, output, norm, layers, deltas, cos, sin, moments: BTreeMap::new(), steps: 0 })
    }

    /// Optimizer steps taken.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The adapter's variables with their names (`blk.N.{target}.lora_a` and `.lora_b`), in a
    /// fixed order.
    fn vars(&self) -> Vec<(String, &Var)> {
        let mut out = Vec::new();
        for (l, deltas) in self.deltas.iter().enumerate() {
            for (t, d) in deltas {
                out.push((format!("blk.{l}.{}.lora_a", t.tensor()), &d.a));
                out.push((format!("blk.{l}.{}.lora_b", t.tensor()), &d.b));
            }
        }
        out
    }

    /// `x` ([tokens, in]) through layer `l`'s projection `t`, with the adapter's delta.
    fn project(&self, l: usize, t: Target, x: &Tensor) -> candle_core::Result<Tensor> {
        let base = x.matmul(&self.layers[l].weights[&t].t()?)?;
        match self.deltas[l].get(&t) {
            None => Ok(base),
            Some(d) => {
                let scale = self.config.alpha / self.config.rank as f64;
                let low = x.matmul(&d.a.as_tensor().t()?)?.matmul(&d.b.as_tensor().t()?)?;
                base + (low * scale)?
            }
        }
    }

    /// The logits after each of `ids` (`[tokens, vocab]`), read from position 0.
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor, String> {
        self.forward_inner(ids).map_err(err)
    }

    fn forward_inner(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        self.logits(&self.hidden(ids)?)
    }

    /// The output projection of hidden states (`[tokens, hidden]`), normed.
    fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        rms_norm(hidden, &self.norm, self.cfg.rms_eps)?.matmul(&self.output.t()?)
    }

    /// The hidden state after the last layer at each of `ids`, read from position 0.
    fn hidden(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let cfg = &self.cfg;
        let n = ids.len();
        let (heads, kv_heads, d) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
        let dev = Device::Cpu;
        let ids_t = Tensor::new(ids, &dev)?;
        let mut x = self.embed.index_select(&ids_t, 0)?;
        let cos = self.cos.narrow(0, 0, n)?;
        let sin = self.sin.narrow(0, 0, n)?;
        // 0 where a position may attend, -inf after it.
        let mask: Vec<f32> =
            (0..n).flat_map(|i| (0..n).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY })).collect();
        let mask = Tensor::from_vec(mask, (n, n), &dev)?;
        let scale = 1.0 / (d as f64).sqrt();
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm, cfg.rms_eps)?;
            let q = self.project(l, Target::Q, &h)?;
            let k = self.project(l, Target::K, &h)?;
            let v = self.project(l, Target::V, &h)?;
            let q = rope(&q.reshape((n, heads, d))?.transpose(0, 1)?, &cos, &sin)?;
            let k = rope(&k.reshape((n, kv_heads, d))?.transpose(0, 1)?, &cos, &sin)?;
            let v = v.reshape((n, kv_heads, d))?.transpose(0, 1)?.contiguous()?;
            // Each key head serves the query heads of its group.
            let group = heads / kv_heads;
            let k = repeat_heads(&k, group)?;
            let v = repeat_heads(&v, group)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?;
            let weights = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let att = weights.matmul(&v)?.transpose(0, 1)?.reshape((n, heads * d))?;
            x = (x + self.project(l, Target::O, &att)?)?;
            let h = rms_norm(&x, &layer.ffn_norm, cfg.rms_eps)?;
            let gate = self.project(l, Target::Gate, &h)?;
            let up = self.project(l, Target::Up, &h)?;
            let hidden = (gate.silu()? * up)?;
            x = (x + self.project(l, Target::Down, &hidden)?)?;
        }
        Ok(x)
    }

    /// The mean cross-entropy of predicting `ids[from..]`, each from the tokens before it (the
    /// answer of a prompt of `from` tokens).
    pub fn loss(&self, ids: &[u32], from: usize) -> Result<Tensor, String> {
        if from == 0 || from >= ids.len() {
            return Err(format!("an answer from token {from} of {}", ids.len()));
        }
        let run = || -> candle_core::Result<Tensor> {
            // Only the rows that predict the answer go through the output projection.
            let hidden = self.hidden(&ids[..ids.len() - 1])?;
            let predicted = self.logits(&hidden.narrow(0, from - 1, ids.len() - from)?)?;
            let targets = Tensor::new(&ids[from..], &Device::Cpu)?;
            candle_nn::loss::cross_entropy(&predicted, &targets)
        };
        run().map_err(err)
    }

    /// One optimizer step on the mean of the examples' losses; returns that loss before the
    /// step.
    pub fn step(&mut self, examples: &[Example]) -> Result<f32, String> {
        if examples.is_empty() {
            return Err("a step needs at least one example".into());
        }
        let mut total: Option<Tensor> = None;
        for e in examples {
            let loss = self.loss(&e.ids, e.from)?;
            total = Some(match total {
                None => loss,
                Some(t) => (t + loss).map_err(err)?,
            });
        }
        let mean = (total.expect("examples") / examples.len() as f64).map_err(err)?;
        let grads = mean.backward().map_err(err)?;
        self.adamw(&grads).map_err(err)?;
        mean.to_scalar::<f32>().map_err(err)
    }

    /// One AdamW step (as candle's `AdamW`, without weight decay), its moments kept by name so
    /// that a checkpoint holds them.
    fn adamw(&mut self, grads: &candle_core::backprop::GradStore) -> candle_core::Result<()> {
        self.steps += 1;
        let lr = self.config.learning_rate;
        let scale_m = 1.0 / (1.0 - BETA1.powi(self.steps as i32));
        let scale_v = 1.0 / (1.0 - BETA2.powi(self.steps as i32));
        let mut moments = std::mem::take(&mut self.moments);
        for (name, var) in self.vars() {
            let Some(g) = grads.get(var) else { continue };
            let (m, v) = match moments.remove(&name) {
                Some(mv) => mv,
                None => (g.zeros_like()?, g.zeros_like()?),
            };
            let m = ((m * BETA1)? + (g * (1.0 - BETA1))?)?;
            let v = ((v * BETA2)? + (g.sqr()? * (1.0 - BETA2))?)?;
            let adjusted = ((&m * scale_m)? / ((&v * scale_v)?.sqrt()? + EPS)?)?;
            var.set(&(var.as_tensor() - (adjusted * lr)?)?)?;
            moments.insert(name, (m, v));
        }
        self.moments = moments;
        Ok(())
    }

    /// The adapter's tensors by name (`blk.N.{target}.lora_a` and `.lora_b`), as they are
    /// saved.
    pub fn tensors(&self) -> BTreeMap<String, Tensor> {
        self.vars().into_iter().map(|(name, var)| (name, var.as_tensor().clone())).collect()
    }

    /// The adapter as the serving pass applies it ([`Adapter`]): its values now, in f32.
    pub fn adapter(&self) -> Result<Adapter, String> {
        let scale = (self.config.alpha / self.config.rank as f64) as f32;
        let mut layers = Vec::with_capacity(self.deltas.len());
        for deltas in &self.deltas {
            let mut by_target = BTreeMap::new();
            for (t, d) in deltas {
                let values = |v: &Var| v.as_tensor().flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(err);
                let (out, inp) = (d.b.dims()[0], d.a.dims()[1]);
                by_target.insert(*t, Served { a: values(&d.a)?, b: values(&d.b)?, inputs: inp, outputs: out });
            }
            layers.push(by_target);
        }
        Adapter::new(self.config.rank, scale, layers)
    }

    /// Writes the adapter's tensors to a safetensors file.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        candle_core::safetensors::save(&self.tensors().into_iter().collect(), path)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Replaces the adapter's values with those saved in `path` (same config and model).
    pub fn load(&mut self, path: &Path) -> Result<(), String> {
        let saved = read(path)?;
        for (name, var) in self.vars() {
            var.set(&tensor_of(&saved, &name, var.shape(), path)?).map_err(err)?;
        }
        Ok(())
    }

    /// Writes a checkpoint to `path`: the adapter, the optimizer's moments and the steps taken,
    /// so that training goes on from it ([`Trainer::resume`]) as if it had not stopped.
    pub fn checkpoint(&self, path: &Path) -> Result<(), String> {
        let mut all = self.tensors();
        for (name, (m, v)) in &self.moments {
            all.insert(format!("{name}.m"), m.clone());
            all.insert(format!("{name}.v"), v.clone());
        }
        all.insert(STEPS.into(), Tensor::new(&[self.steps as f64], &Device::Cpu).map_err(err)?);
        let tmp = path.with_extension("partial");
        candle_core::safetensors::save(&all.into_iter().collect(), &tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Takes up the training a [`Trainer::checkpoint`] left (same config and model).
    pub fn resume(&mut self, path: &Path) -> Result<(), String> {
        let saved = read(path)?;
        let steps = saved.get(STEPS).ok_or_else(|| format!("{}: no tensor {STEPS}", path.display()))?;
        let steps = steps.to_vec1::<f64>().map_err(err)?.first().copied().unwrap_or(0.0) as usize;
        let mut moments = BTreeMap::new();
        for (name, var) in self.vars() {
            var.set(&tensor_of(&saved, &name, var.shape(), path)?).map_err(err)?;
            if steps > 0 {
                let m = tensor_of(&saved, &format!("{name}.m"), var.shape(), path)?;
                let v = tensor_of(&saved, &format!("{name}.v"), var.shape(), path)?;
                moments.insert(name, (m, v));
            }
        }
        self.moments = moments;
        self.steps = steps;
        Ok(())
    }
}

/// The name of a checkpoint's step count (one f64).
const STEPS: &str = "steps";

fn read(path: &Path) -> Result<std::collections::HashMap<String, Tensor>, String> {
    candle_core::safetensors::load(path, &Device::Cpu).map_err(|e| format!("{}: {e}", path.display()))
}

/// The tensor `name` of a file read from `path`, which must have `shape`.
fn tensor_of(
    saved: &std::collections::HashMap<String, Tensor>,
    name: &str,
    shape: &candle_core::Shape,
    path: &Path,
) -> Result<Tensor, String> {
    let t = saved.get(name).ok_or_else(|| format!("{}: no tensor {name}", path.display()))?;
    if t.shape() != shape {
        return Err(format!("{}: {name} is {:?}, the adapter's is {:?}", path.display(), t.dims(), shape.dims()));
    }
    Ok(t.clone())
}

/// Each row of `x` scaled to unit root mean square, times `weight` (composed, for its backward
/// pass).
fn rms_norm(x: &Tensor, weight: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    candle_nn::ops::rms_norm_slow(x, weight, eps)
}

/// Rotary embeddings in the interleaved form GGUF llama weights take, on `[heads, tokens, d]`
/// (composed, for its backward pass).
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    candle_nn::rotary_emb::rope_i_slow(&x.unsqueeze(0)?.contiguous()?, cos, sin)?.squeeze(0)
}

/// `[kv_heads, tokens, d]` to `[kv_heads * group, tokens, d]`, each head `group` times in turn.
fn repeat_heads(x: &Tensor, group: usize) -> candle_core::Result<Tensor> {
    if group == 1 {
        return Ok(x.clone());
    }
    let (kv, n, d) = x.dims3()?;
    x.unsqueeze(1)?.expand((kv, group, n, d))?.reshape((kv * group, n, d))
}

#[cfg(test)]
mod tests;
