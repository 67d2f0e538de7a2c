//! An adapter as the serving pass applies it: for each target projection of each layer, the
//! low-rank delta `(alpha / rank) (x A^T) B^T` added to the projection's output, in f32 (see
//! [`super::lora`], which trains them).

use std::collections::BTreeMap;

/// A projection of a layer an adapter can change, by its name in the GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [Target::Q, Target::K, Target::V, Target::O, Target::Gate, Target::Up, Target::Down];

    /// The tensor's name in a layer of a GGUF llama file (`blk.N.{name}.weight`).
    pub fn tensor(self) -> &'static str {
        match self {
            Target::Q => "attn_q",
            Target::K => "attn_k",
            Target::V => "attn_v",
            Target::O => "attn_output",
            Target::Gate => "ffn_gate",
            Target::Up => "ffn_up",
            Target::Down => "ffn_down",
        }
    }

    /// Its short name, as configs write it (`q`, `k`, `v`, `o`, `gate`, `up`, `down`).
    pub fn short(self) -> &'static str {
        match self {
            Target::Q => "q",
            Target::K => "k",
            Target::V => "v",
            Target::O => "o",
            Target::Gate => "gate",
            Target::Up => "up",
            Target::Down => "down",
        }
    }
}

/// A LoRA adapter's values, ready for the serving pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Adapter {
    rank: usize,
    scale: f32,
    /// Per layer, by target: `A` (rank x in) and `B` (out x rank), row-major.
    layers: Vec<BTreeMap<Target, Delta>>,
}

/// One projection's delta: `A` (rank x `inputs`) and `B` (`outputs` x rank), row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub inputs: usize,
    pub outputs: usize,
}

impl Adapter {
    /// An adapter of `rank` whose deltas are scaled by `scale`, per layer by target.
    pub fn new(rank: usize, scale: f32, layers: Vec<BTreeMap<Target, Delta>>) -> Result<Adapter, String> {
        for (l, by_target) in layers.iter().enumerate() {
            for (t, d) in by_target {
                if d.a.len() != rank * d.inputs || d.b.len() != d.outputs * rank {
                    return Err(format!(
                        "layer {l} {}: A of {} and B of {} values for rank {rank}, {} in and {} out",
                        t.short(),
                        d.a.len(),
                        d.b.len(),
                        d.inputs,
                        d.outputs
                    ));
                }
            }
        }
        Ok(Adapter { rank, scale, layers })
    }

    /// Adds layer `l`'s delta of `target` for input `x` (its `in` values) to `out` (its `out`
    /// values), when the adapter has one: `A x`, then `scale (B (A x))`, each sum in order.
    pub fn add(&self, l: usize, target: Target, x: &[f32], out: &mut [f32]) {
        let Some(d) = self.layers.get(l).and_then(|by| by.get(&target)) else { return };
        debug_assert_eq!((x.len(), out.len()), (d.inputs, d.outputs));
        let low: Vec<f32> = d.a.chunks_exact(d.inputs).map(|a| a.iter().zip(x).map(|(a, x)| a * x).sum()).collect();
        for (o, b) in out.iter_mut().zip(d.b.chunks_exact(self.rank)) {
            *o += self.scale * b.iter().zip(&low).map(|(b, t)| b * t).sum::<f32>();
        }
    }
}
