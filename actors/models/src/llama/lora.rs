//! LoRA adapters: low-rank deltas on a llama model's projections, trained on a persona's study
//! data.
//!
//! The serving pass ([`super::forward`]) has no backward pass (nor has candle's quantized
//! matmul), so training runs a pass of its own in candle: the base weights frozen, and for each
//! target projection `W` of each layer two small matrices `A` (`rank` x in) and `B` (out x
//! `rank`) as variables, the projection becoming `x W^T + (alpha / rank) (x A^T) B^T`. The
//! frozen products run on the serving pass's own kernels, on the same Q8_0 weights read from
//! the same file (see `Frozen`), and give only the input's gradient. `B` starts at zero, so an
//! adapter that has not trained is the base model (a test checks this pass's logits against
//! the serving pass's). The norms, rotary embeddings, attention and gated units are operations
//! of our own with their backward passes (`ops`); candle composes the rest (the adapter's
//! products, the residual sums, the loss) and runs the backward pass. A step reads its
//! examples side by side in one pass (each seeing only itself), so the products are as tall as
//! the examples together.

use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file::Content;
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor, Var};

pub use super::adapter::Target;
use super::adapter::{Adapter, Delta as Served};
use super::forward::LlamaConfig;
use super::q8::{Activations, Q8Matrix};
use super::{ChatMessage, GgufTokenizer};
use crate::pool::Team;

mod ops;
use ops::{Attention, RmsNorm, Rope, SwiGlu};

/// The shape of an adapter and how it trains.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    pub targets: Vec<Target>,
    /// AdamW's learning rate.
    pub learning_rate: f64,
    /// Threads of the frozen projections' products.
    pub threads: usize,
}

impl Default for LoraConfig {
    /// Rank 8 on every projection, alpha 16, learning rate 1e-3 (about 2.4 M values for
    /// SmolLM2-135M).
    fn default() -> LoraConfig {
        LoraConfig { rank: 8, alpha: 16.0, targets: Target::ALL.to_vec(), learning_rate: 1e-3, threads: 1 }
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

/// One layer's frozen weights.
struct Layer {
    attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
    /// By target.
    weights: BTreeMap<Target, Frozen>,
}

/// A frozen projection `W` (`[out, in]`), applied as `x W^T` on the serving pass's kernels
/// (Q8_0 weights, rows in bf16 on AMX where the CPU has it, see [`super::q8`]): the forward pass
/// computes what serving computes for prompt rows. Its backward pass gives the input's
/// gradient alone, `g W`, by the same kernels on `W^T` kept the same way (quantized along the
/// other axis); candle's matmul would also compute the weight's gradient, a matrix of the
/// weight's size each step that nothing reads.
#[derive(Clone)]
struct Frozen {
    w: Arc<Q8Matrix>,
    w_t: Arc<Q8Matrix>,
    team: Arc<Team>,
    pause: Arc<Pause>,
}

/// What a trainer calls before each product: it returns when training may go on (it blocks
/// while the machine has more pressing work). Products take milliseconds, so training yields
/// within one.
pub type PauseFn = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct Pause(std::sync::RwLock<Option<PauseFn>>);

impl Frozen {
    fn new(w: &Tensor, team: &Arc<Team>, pause: &Arc<Pause>) -> Result<Frozen, String> {
        let (out, inp) = w.dims2().map_err(err)?;
        let values = |t: &Tensor| t.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(err);
        let w_t = values(&w.t().map_err(err)?.contiguous().map_err(err)?)?;
        Ok(Frozen {
            w: Arc::new(Q8Matrix::quantize(&values(w)?, out, inp)?.with_bf16()),
            w_t: Arc::new(Q8Matrix::quantize(&w_t, inp, out)?.with_bf16()),
            team: team.clone(),
            pause: pause.clone(),
        })
    }

    fn apply(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1(self.clone())
    }

    /// Row-major `x` times `w`'s rows.
    fn product(&self, x: &[f32], w: &Q8Matrix) -> Vec<f32> {
        if let Some(pause) = self.pause.0.read().expect("not poisoned").as_ref() {
            pause();
        }
        let rows = x.len() / w.cols();
        let mut a = Activations::default();
        a.prepare(x, w.cols(), rows);
        let mut out = vec![0.0; rows * w.rows()];
        a.matmul(&self.team, w, &mut out);
        out
    }
}

impl CustomOp1 for Frozen {
    fn name(&self) -> &'static str {
        "frozen-projection"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("a frozen projection of a strided input".into()))?;
        let y = self.product(&storage.as_slice::<f32>()?[start..end], &self.w);
        let rows = (end - start) / self.w.cols();
        Ok((CpuStorage::F32(y), Shape::from((rows, self.w.rows()))))
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let g = grad.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        let rows = g.len() / self.w_t.cols();
        Ok(Some(Tensor::from_vec(self.product(&g, &self.w_t), (rows, self.w_t.rows()), &Device::Cpu)?))
    }
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
    output: Frozen,
    norm: RmsNorm,
    layers: Vec<Layer>,
    /// Per layer, by target.
    deltas: Vec<BTreeMap<Target, Delta>>,
    /// cos and sin of each position's angle for each pair of a head, `[position][pair]`.
    cos: Arc<Vec<f32>>,
    sin: Arc<Vec<f32>>,
    /// AdamW's first and second moments of each variable, by tensor name (none before the
    /// first step).
    moments: BTreeMap<String, (Tensor, Tensor)>,
    steps: usize,
    pause: Arc<Pause>,
}

/// AdamW's decay rates of its moments and its epsilon (as candle's and PyTorch's defaults); no
/// weight decay.
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

impl Trainer {
    /// Reads the base weights of a llama GGUF (any type candle dequantizes; the projections kept
    /// in Q8_0 as the serving pass keeps them) and makes a fresh adapter: `A` uniform in
    /// ±1/sqrt(in) from `seed`, `B` zero. Positions up to `context`; products on `threads`.
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
        let team = Arc::new(Team::new(config.threads.max(1), "lora").map_err(err)?);
        let pause = Arc::new(Pause::default());
        let mut tensor = |name: &str| -> Result<Tensor, String> {
            let t = content.tensor(reader, name, &dev).map_err(|e| format!("tensor {name}: {e}"))?;
            t.dequantize(&dev).map_err(|e| format!("tensor {name}: {e}"))
        };
        let embed = tensor("token_embd.weight")?;
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => Frozen::new(&tensor("output.weight")?, &team, &pause)?,
            false => Frozen::new(&embed, &team, &pause)?,
        };
        let eps = cfg.rms_eps;
        let norm = |w: Tensor| -> Result<RmsNorm, String> {
            Ok(RmsNorm { weight: Arc::new(w.to_vec1::<f32>().map_err(err)?), eps })
        };
        let output_norm = norm(tensor("output_norm.weight")?)?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let mut weights = BTreeMap::new();
            for t in Target::ALL {
                weights.insert(t, Frozen::new(&tensor(&format!("blk.{l}.{}.weight", t.tensor()))?, &team, &pause)?);
            }
            layers.push(Layer {
                attn_norm: norm(tensor(&format!("blk.{l}.attn_norm.weight"))?)?,
                ffn_norm: norm(tensor(&format!("blk.{l}.ffn_norm.weight"))?)?,
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
                let (out, inp) = (layer.weights[&t].w.rows(), layer.weights[&t].w.cols());
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
        let cos = Arc::new(angles.iter().map(|a| a.1).collect());
        let sin = Arc::new(angles.iter().map(|a| a.0).collect());
        Ok(Trainer {
            cfg,
            config,
            embed,
            output,
            norm: output_norm,
            layers,
            deltas,
            cos,
            sin,
            moments: BTreeMap::new(),
            steps: 0,
            pause,
        })
    }

    /// [`Trainer::new`] on the GGUF file at `path`.
    pub fn open(path: &Path, config: LoraConfig, context: usize, seed: u64) -> Result<Trainer, String> {
        let (mut reader, content) = super::open_gguf(path).map_err(err)?;
        Trainer::new(&content, &mut reader, config, context, seed)
    }

    /// Calls `pause` before each product from now on (see [`PauseFn`]).
    pub fn set_pause(&self, pause: PauseFn) {
        *self.pause.0.write().expect("not poisoned") = Some(pause);
    }

    /// The perplexity of the examples' answers: e to the mean cross-entropy over all their
    /// answer tokens, read `batch` examples a pass.
    pub fn perplexity(&self, examples: &[Example], batch: usize) -> Result<f64, String> {
        let (mut sum, mut tokens) = (0.0, 0usize);
        for chunk in examples.chunks(batch.max(1)) {
            let n: usize = chunk.iter().map(|e| e.ids.len() - e.from).sum();
            let mean = self.losses(chunk)?.to_scalar::<f32>().map_err(err)?;
            sum += f64::from(mean) * n as f64;
            tokens += n;
        }
        if tokens == 0 {
            return Err("no answers to score".into());
        }
        Ok((sum / tokens as f64).exp())
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
        let base = self.layers[l].weights[&t].apply(x)?;
        match self.deltas[l].get(&t) {
            None => Ok(base),
            Some(d) => {
                // Scaled while it is `rank` wide: one tensor as wide as the output fewer.
                let scale = self.config.alpha / self.config.rank as f64;
                let low = (x.matmul(&d.a.as_tensor().t()?)? * scale)?.matmul(&d.b.as_tensor().t()?)?;
                base + low
            }
        }
    }

    /// The logits after each of `ids` (`[tokens, vocab]`), read from position 0.
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor, String> {
        self.hidden(&[ids]).and_then(|h| self.logits(&h)).map_err(err)
    }

    /// The output projection of hidden states (`[tokens, hidden]`), normed.
    fn logits(&self, hidden: &Tensor) -> candle_core::Result<Tensor> {
        self.output.apply(&hidden.apply_op1(self.norm.clone())?)
    }

    /// The hidden states after the last layer of sequences read side by side, each from
    /// position 0 and seeing only itself: `[tokens of all, hidden]`, in order. One pass for all
    /// makes the projections' products as tall as the sequences together.
    fn hidden(&self, seqs: &[&[u32]]) -> candle_core::Result<Tensor> {
        let cfg = &self.cfg;
        let d = cfg.head_dim;
        let dev = Device::Cpu;
        let ids: Vec<u32> = seqs.concat();
        let mut x = self.embed.index_select(&Tensor::new(ids.as_slice(), &dev)?, 0)?;
        let positions = seqs.iter().flat_map(|s| 0..s.len()).collect();
        let rope = Rope { cos: self.cos.clone(), sin: self.sin.clone(), pairs: d / 2, positions: Arc::new(positions) };
        let mut spans = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            spans.push((start, s.len()));
            start += s.len();
        }
        let attention = Attention {
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            d,
            spans: Arc::new(spans),
            scale: 1.0 / (d as f32).sqrt(),
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let h = x.apply_op1(layer.attn_norm.clone())?;
            let q = self.project(l, Target::Q, &h)?.apply_op1(rope.clone())?;
            let k = self.project(l, Target::K, &h)?.apply_op1(rope.clone())?;
            let v = self.project(l, Target::V, &h)?;
            let att = q.apply_op3(&k, &v, attention.clone())?;
            x = (x + self.project(l, Target::O, &att)?)?;
            let h = x.apply_op1(layer.ffn_norm.clone())?;
            let gate = self.project(l, Target::Gate, &h)?;
            let up = self.project(l, Target::Up, &h)?;
            let hidden = gate.apply_op2(&up, SwiGlu)?;
            x = (x + self.project(l, Target::Down, &hidden)?)?;
        }
        Ok(x)
    }

    /// The mean cross-entropy of predicting `ids[from..]`, each from the tokens before it (the
    /// answer of a prompt of `from` tokens).
    pub fn loss(&self, ids: &[u32], from: usize) -> Result<Tensor, String> {
        self.losses(&[Example { ids: ids.to_vec(), from }])
    }

    /// The mean cross-entropy of predicting each example's answer tokens, each from the tokens
    /// before it, over all those tokens; the examples read in one pass.
    fn losses(&self, examples: &[Example]) -> Result<Tensor, String> {
        if let Some(e) = examples.iter().find(|e| e.from == 0 || e.from >= e.ids.len()) {
            return Err(format!("an answer from token {} of {}", e.from, e.ids.len()));
        }
        let run = || -> candle_core::Result<Tensor> {
            // The last token predicts nothing learned; only the rows that predict the answer go
            // through the output projection.
            let seqs: Vec<&[u32]> = examples.iter().map(|e| &e.ids[..e.ids.len() - 1]).collect();
            let hidden = self.hidden(&seqs)?;
            let (mut rows, mut targets, mut start) = (Vec::new(), Vec::new(), 0u32);
            for e in examples {
                rows.extend(start + e.from as u32 - 1..start + e.ids.len() as u32 - 1);
                targets.extend_from_slice(&e.ids[e.from..]);
                start += e.ids.len() as u32 - 1;
            }
            let dev = Device::Cpu;
            let predicted = self.logits(&hidden.index_select(&Tensor::new(rows.as_slice(), &dev)?, 0)?)?;
            candle_nn::loss::cross_entropy(&predicted, &Tensor::new(targets.as_slice(), &dev)?)
        };
        run().map_err(err)
    }

    /// One optimizer step on the examples, read in one pass; returns their loss (the mean over
    /// their answer tokens) before the step.
    pub fn step(&mut self, examples: &[Example]) -> Result<f32, String> {
        if examples.is_empty() {
            return Err("a step needs at least one example".into());
        }
        let loss = self.losses(examples)?;
        let grads = loss.backward().map_err(err)?;
        self.adamw(&grads).map_err(err)?;
        loss.to_scalar::<f32>().map_err(err)
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

    /// Writes the adapter's tensors to a safetensors file (whole or not at all).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        write(self.tensors(), path)
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
        write(all, path)
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

/// Writes `tensors` to a safetensors file at `path`: aside first, then renamed over it, so that
/// a crash leaves the old file or the new one, never a part.
fn write(tensors: BTreeMap<String, Tensor>, path: &Path) -> Result<(), String> {
    let tmp = path.with_extension("partial");
    candle_core::safetensors::save(&tensors.into_iter().collect(), &tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

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

#[cfg(test)]
mod tests;
