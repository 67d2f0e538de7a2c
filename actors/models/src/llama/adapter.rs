//! An adapter as the serving pass applies it: for each target projection of each layer, the
//! low-rank delta `(alpha / rank) (x A^T) B^T` added to the projection's output, in f32 (see
//! [`super::lora`], which trains them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;

/// The largest rank an adapter may have (the serving pass keeps `A x` on the stack).
pub const MAX_RANK: usize = 64;

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
        if rank == 0 || rank > MAX_RANK {
            return Err(format!("a rank of {rank}: it is 1 to {MAX_RANK}"));
        }
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
        let mut low = [0.0f32; MAX_RANK];
        for (t, a) in low.iter_mut().zip(d.a.chunks_exact(d.inputs)) {
            *t = a.iter().zip(x).map(|(a, x)| a * x).sum();
        }
        for (o, b) in out.iter_mut().zip(d.b.chunks_exact(self.rank)) {
            *o += self.scale * b.iter().zip(&low).map(|(b, t)| b * t).sum::<f32>();
        }
    }

    /// Bytes its values take in memory.
    pub fn bytes(&self) -> usize {
        self.layers.iter().flat_map(|by| by.values()).map(|d| 4 * (d.a.len() + d.b.len())).sum()
    }

    /// Reads an adapter saved by its trainer ([`super::lora::Trainer::save`]: tensors
    /// `blk.N.{target}.lora_a` and `.lora_b`), to be served with `alpha` (its scale is `alpha /
    /// rank`). A file with no adapter in it, or with tensors of other names or unequal ranks, is
    /// an error naming the file and the tensor.
    pub fn read(path: &Path, alpha: f64) -> Result<Adapter, String> {
        let at = |why: String| format!("{}: {why}", path.display());
        let tensors = candle_core::safetensors::load(path, &Device::Cpu).map_err(|e| at(e.to_string()))?;
        let mut layers: Vec<BTreeMap<Target, Delta>> = Vec::new();
        let mut rank = None;
        for (name, a) in tensors.iter().filter(|(n, _)| n.ends_with(".lora_a")) {
            let stem = name.trim_end_matches(".lora_a");
            let (l, target) = stem
                .strip_prefix("blk.")
                .and_then(|rest| rest.split_once('.'))
                .and_then(|(l, t)| Some((l.parse::<usize>().ok()?, Target::ALL.into_iter().find(|x| x.tensor() == t)?)))
                .ok_or_else(|| at(format!("{name} is not an adapter's tensor")))?;
            let b = tensors.get(&format!("{stem}.lora_b")).ok_or_else(|| at(format!("no {stem}.lora_b")))?;
            let ((r, inputs), (outputs, rb)) = (
                a.dims2().map_err(|e| at(format!("{name}: {e}")))?,
                b.dims2().map_err(|e| at(format!("{stem}.lora_b: {e}")))?,
            );
            if rb != r || rank.is_some_and(|k| k != r) {
                return Err(at(format!("{stem}: rank {r} and {rb}, the adapter's {}", rank.unwrap_or(r))));
            }
            rank = Some(r);
            let values = |t: &candle_core::Tensor| {
                t.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(|e| at(format!("{stem}: {e}")))
            };
            if layers.len() <= l {
                layers.resize_with(l + 1, BTreeMap::new);
            }
            layers[l].insert(target, Delta { a: values(a)?, b: values(b)?, inputs, outputs });
        }
        let rank = rank.ok_or_else(|| at("no adapter tensors in it".into()))?;
        Adapter::new(rank, (alpha / rank as f64) as f32, layers).map_err(at)
    }
}

/// Adapters read from their files and held for the requests that ask for them, the least
/// recently used dropped when holding another would pass `bound` bytes (one alone is always
/// held).
#[derive(Debug)]
pub struct AdapterCache {
    bound: usize,
    held: Vec<Held>,
    tick: u64,
}

#[derive(Debug)]
struct Held {
    path: PathBuf,
    alpha_bits: u64,
    adapter: Arc<Adapter>,
    used: u64,
}

impl AdapterCache {
    pub fn new(bound: usize) -> AdapterCache {
        AdapterCache { bound, held: Vec::new(), tick: 0 }
    }

    /// The adapter in `path` served with `alpha`: the one held, else read (see
    /// [`Adapter::read`]).
    pub fn get(&mut self, path: &Path, alpha: f64) -> Result<Arc<Adapter>, String> {
        self.tick += 1;
        if let Some(h) = self.held.iter_mut().find(|h| h.path == path && h.alpha_bits == alpha.to_bits()) {
            h.used = self.tick;
            return Ok(h.adapter.clone());
        }
        let adapter = Arc::new(Adapter::read(path, alpha)?);
        while !self.held.is_empty() && self.bytes() + adapter.bytes() > self.bound {
            let oldest = (0..self.held.len()).min_by_key(|i| self.held[*i].used).expect("not empty");
            self.held.swap_remove(oldest);
        }
        let held =
            Held { path: path.to_path_buf(), alpha_bits: alpha.to_bits(), adapter: adapter.clone(), used: self.tick };
        self.held.push(held);
        Ok(adapter)
    }

    /// Bytes of the adapters held.
    pub fn bytes(&self) -> usize {
        self.held.iter().map(|h| h.adapter.bytes()).sum()
    }

    /// Adapters held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Tensor;

    use super::*;

    /// An adapter file of `rank` on layer 0's `q` (576 in and out), every value `v`.
    fn file(dir: &Path, name: &str, rank: usize, v: f32) -> PathBuf {
        let path = dir.join(name);
        let t = |r: usize, c: usize| Tensor::full(v, (r, c), &Device::Cpu).unwrap();
        let tensors =
            [("blk.0.attn_q.lora_a".to_string(), t(rank, 576)), ("blk.0.attn_q.lora_b".to_string(), t(576, rank))];
        candle_core::safetensors::save(&tensors.into_iter().collect(), &path).unwrap();
        path
    }

    #[test]
    fn an_adapter_file_reads_back_as_served_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = Adapter::read(&file(dir.path(), "a.safetensors", 2, 0.5), 4.0).unwrap();
        assert_eq!(a.bytes(), 4 * 2 * (2 * 576));
        let (x, mut out) = (vec![1.0f32; 576], vec![0.0f32; 576]);
        a.add(0, Target::Q, &x, &mut out);
        // A x: 288 in each of its 2 rows; B (A x): 2 x 0.5 x 288 = 288; times alpha / rank = 2.
        assert_eq!(out[0], 576.0);
        a.add(0, Target::V, &x, &mut out);
        assert_eq!(out[0], 576.0, "no delta on a target it has none for");
        std::fs::write(dir.path().join("bad.safetensors"), b"not one").unwrap();
        let e = Adapter::read(&dir.path().join("bad.safetensors"), 4.0).unwrap_err();
        assert!(e.contains("bad.safetensors"), "{e}");
    }

    #[test]
    fn the_cache_holds_adapters_within_its_bound_and_drops_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            file(dir.path(), "a.safetensors", 2, 0.1),
            file(dir.path(), "b.safetensors", 2, 0.2),
            file(dir.path(), "c.safetensors", 2, 0.3),
        );
        let one = 4 * 2 * (2 * 576);
        let mut cache = AdapterCache::new(2 * one);
        let first = cache.get(&a, 16.0).unwrap();
        assert!(Arc::ptr_eq(&first, &cache.get(&a, 16.0).unwrap()), "held, not read again");
        cache.get(&b, 16.0).unwrap();
        cache.get(&a, 16.0).unwrap();
        cache.get(&c, 16.0).unwrap();
        assert_eq!((cache.len(), cache.bytes()), (2, 2 * one));
        // `b` was the least recently used: it went, `a` stayed.
        assert!(Arc::ptr_eq(&first, &cache.get(&a, 16.0).unwrap()));
        assert_eq!(cache.len(), 2);
        // Bigger than the bound alone: held by itself.
        let mut small = AdapterCache::new(10);
        small.get(&a, 16.0).unwrap();
        assert_eq!(small.len(), 1);
        assert!(small.get(&dir.path().join("gone.safetensors"), 16.0).unwrap_err().contains("gone.safetensors"));
    }
}
