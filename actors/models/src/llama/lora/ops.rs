//! The training pass's operations between the products, each one candle operation with its
//! own backward pass: the norm, the rotary embeddings, causal attention and the gated unit.
//! Composed of candle's elementwise operations they were most of a step's time (a dozen
//! tensors each, forward and back); here each reads its inputs once and writes one output, and
//! its backward pass one gradient per input. Only the inputs' gradients are computed: the
//! weights they use (the norms') are frozen.
//!
//! Tensors are row-major `[tokens, width]` as the products give them: a row's heads side by
//! side (`[tokens, heads * head_dim]`), so that nothing is transposed between the operations.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

/// The f32 values of a contiguous input.
fn slice<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let (a, b) = l
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg("a training operation on a strided input".into()))?;
    Ok(&s.as_slice::<f32>()?[a..b])
}

fn values(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

fn tensor(v: Vec<f32>, like: &Tensor) -> Result<Tensor> {
    Tensor::from_vec(v, like.shape(), like.device())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Sixteen lanes, summed at the end: the compiler keeps them in vector registers.
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..16 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a x`.
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// Each row scaled to unit root mean square, times a frozen weight (llama's RMS norm).
#[derive(Clone)]
pub(super) struct RmsNorm {
    pub weight: Arc<Vec<f32>>,
    pub eps: f32,
}

impl RmsNorm {
    fn inv_rms(&self, row: &[f32]) -> f32 {
        1.0 / (row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32 + self.eps).sqrt()
    }
}

impl CustomOp1 for RmsNorm {
    fn name(&self) -> &'static str {
        "lora-rms-norm"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(s, l)?;
        let mut y = vec![0.0; x.len()];
        for (xr, yr) in x.chunks_exact(self.weight.len()).zip(y.chunks_exact_mut(self.weight.len())) {
            let r = self.inv_rms(xr);
            for ((y, x), w) in yr.iter_mut().zip(xr).zip(self.weight.iter()) {
                *y = x * r * w;
            }
        }
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    /// With `y_i = w_i x_i r` and `r = (mean(x^2) + eps)^-1/2`:
    /// `dx_j = r w_j g_j - x_j r^3 / n * sum_i g_i w_i x_i`.
    fn bwd(&self, x: &Tensor, _y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
        let (xs, gs) = (values(x)?, values(g)?);
        let n = self.weight.len();
        let mut dx = vec![0.0; xs.len()];
        for ((xr, gr), dr) in xs.chunks_exact(n).zip(gs.chunks_exact(n)).zip(dx.chunks_exact_mut(n)) {
            let r = self.inv_rms(xr);
            let s: f32 = xr.iter().zip(gr).zip(self.weight.iter()).map(|((x, g), w)| x * g * w).sum();
            let c = r * r * r * s / n as f32;
            for (((d, x), g), w) in dr.iter_mut().zip(xr).zip(gr).zip(self.weight.iter()) {
                *d = r * w * g - x * c;
            }
        }
        Ok(Some(tensor(dx, x)?))
    }
}

/// Rotary embeddings in the interleaved form GGUF llama weights take, on `[tokens, heads *
/// head_dim]`: each pair of a head turned by its position's angle.
#[derive(Clone)]
pub(super) struct Rope {
    /// cos and sin of each position's angle for each pair of a head, `[position][pair]`.
    pub cos: Arc<Vec<f32>>,
    pub sin: Arc<Vec<f32>>,
    pub pairs: usize,
    /// Each row's position.
    pub positions: Arc<Vec<usize>>,
}

impl Rope {
    /// Turns every pair of `x` by its angle, or back by it (`back`: the transpose, which is the
    /// backward pass).
    fn turn(&self, x: &[f32], back: bool) -> Vec<f32> {
        let mut y = vec![0.0; x.len()];
        let width = x.len() / self.positions.len().max(1);
        for ((xr, yr), &p) in x.chunks_exact(width).zip(y.chunks_exact_mut(width)).zip(self.positions.iter()) {
            let (cos, sin) = (&self.cos[p * self.pairs..][..self.pairs], &self.sin[p * self.pairs..][..self.pairs]);
            for (xh, yh) in xr.chunks_exact(2 * self.pairs).zip(yr.chunks_exact_mut(2 * self.pairs)) {
                for i in 0..self.pairs {
                    let (c, s) = (cos[i], if back { -sin[i] } else { sin[i] });
                    let (a, b) = (xh[2 * i], xh[2 * i + 1]);
                    yh[2 * i] = a * c - b * s;
                    yh[2 * i + 1] = a * s + b * c;
                }
            }
        }
        y
    }
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "lora-rope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((CpuStorage::F32(self.turn(slice(s, l)?, false)), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(tensor(self.turn(&values(g)?, true), x)?))
    }
}

/// Causal attention of sequences side by side, each seeing only itself: queries `[tokens,
/// heads * d]`, keys and values `[tokens, kv_heads * d]` (each key head serving `heads /
/// kv_heads` query heads in turn), output `[tokens, heads * d]`. The attention weights are
/// computed again in the backward pass rather than kept.
/// A sequence of a pass: its first row and its length.
pub(super) type Span = (usize, usize);

/// Sequences of a pass computed on one thread: the spans, their first row and their rows.
type Group<'a> = (&'a [Span], usize, usize);

#[derive(Clone)]
pub(super) struct Attention {
    pub heads: usize,
    pub kv_heads: usize,
    pub d: usize,
    /// Each sequence's first row and length.
    pub spans: Arc<Vec<Span>>,
    pub scale: f32,
}

impl Attention {
    /// The softmax weights over keys `0..=i` of row `i` of query head `h` of the sequence that
    /// starts at row `start`, into `p`.
    fn weights(&self, q: &[f32], k: &[f32], start: usize, i: usize, h: usize, p: &mut Vec<f32>) {
        let (d, group) = (self.d, self.heads / self.kv_heads);
        let qi = &q[(start + i) * self.heads * d + h * d..][..d];
        let kh = (h / group) * d;
        p.clear();
        p.extend((0..=i).map(|j| self.scale * dot(qi, &k[(start + j) * self.kv_heads * d + kh..][..d])));
        let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in p.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        p.iter_mut().for_each(|v| *v /= sum);
    }

    /// The output rows of `spans` (which begin at row `r0`) into `out`.
    fn forward(&self, (q, k, v): (&[f32], &[f32], &[f32]), spans: &[Span], out: &mut [f32], r0: usize) {
        let (d, group) = (self.d, self.heads / self.kv_heads);
        let (qw, kw) = (self.heads * d, self.kv_heads * d);
        let mut p = Vec::new();
        for &(start, m) in spans {
            for h in 0..self.heads {
                let kh = (h / group) * d;
                for i in 0..m {
                    self.weights(q, k, start, i, h, &mut p);
                    let o = &mut out[(start + i - r0) * qw + h * d..][..d];
                    for (j, &pj) in p.iter().enumerate() {
                        axpy(o, pj, &v[(start + j) * kw + kh..][..d]);
                    }
                }
            }
        }
    }

    /// The gradients of the rows of `spans` (which begin at row `r0`) into `dq`, `dk`, `dv`.
    /// Per row `i` with weights `p` and output gradient `g`: `dp_j = g . v_j`,
    /// `ds_j = p_j (dp_j - sum_k p_k dp_k)`, `dq_i = scale sum_j ds_j k_j`,
    /// `dk_j += scale ds_j q_i`, `dv_j += p_j g`.
    fn backward(
        &self,
        (q, k, v, g): (&[f32], &[f32], &[f32], &[f32]),
        spans: &[Span],
        (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
        r0: usize,
    ) {
        let (d, group) = (self.d, self.heads / self.kv_heads);
        let (qw, kw) = (self.heads * d, self.kv_heads * d);
        let (mut p, mut ds) = (Vec::new(), Vec::new());
        for &(start, m) in spans {
            for h in 0..self.heads {
                let kh = (h / group) * d;
                for i in 0..m {
                    self.weights(q, k, start, i, h, &mut p);
                    let row = (start + i) * qw + h * d;
                    let gi = &g[row..][..d];
                    ds.clear();
                    ds.extend((0..=i).map(|j| dot(gi, &v[(start + j) * kw + kh..][..d])));
                    let mean: f32 = p.iter().zip(&ds).map(|(p, dp)| p * dp).sum();
                    for (dsj, pj) in ds.iter_mut().zip(&p) {
                        *dsj = pj * (*dsj - mean) * self.scale;
                    }
                    let (qi, at_q) = (&q[row..][..d], row - r0 * qw);
                    for j in 0..=i {
                        let (at, local) = ((start + j) * kw + kh, (start + j - r0) * kw + kh);
                        axpy(&mut dq[at_q..at_q + d], ds[j], &k[at..][..d]);
                        axpy(&mut dk[local..local + d], ds[j], qi);
                        axpy(&mut dv[local..local + d], p[j], gi);
                    }
                }
            }
        }
    }

    /// The spans in as many groups as the machine has cores, of about equal work (a sequence
    /// of `m` tokens costs `m^2`), each with its first row and its rows' count: sequences see
    /// only themselves, so each group's rows are computed on a thread of their own.
    fn groups(&self) -> Vec<Group<'_>> {
        let parts = std::thread::available_parallelism().map_or(1, |n| n.get()).min(self.spans.len()).max(1);
        let total: usize = self.spans.iter().map(|s| s.1 * s.1).sum();
        let (mut out, mut from, mut acc) = (Vec::new(), 0, 0);
        for (i, s) in self.spans.iter().enumerate() {
            acc += s.1 * s.1;
            if out.len() + 1 < parts && acc * parts >= total * (out.len() + 1) {
                out.push(&self.spans[from..=i]);
                from = i + 1;
            }
        }
        if from < self.spans.len() {
            out.push(&self.spans[from..]);
        }
        out.into_iter().map(|g| (g, g[0].0, g.iter().map(|s| s.1).sum())).collect()
    }
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "lora-attention"
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let inputs = (slice(qs, ql)?, slice(ks, kl)?, slice(vs, vl)?);
        let qw = self.heads * self.d;
        let mut out = vec![0.0; inputs.0.len()];
        std::thread::scope(|scope| {
            let mut rest = out.as_mut_slice();
            for (spans, r0, rows) in self.groups() {
                let (mine, after) = rest.split_at_mut(rows * qw);
                rest = after;
                scope.spawn(move || self.forward(inputs, spans, mine, r0));
            }
        });
        Ok((CpuStorage::F32(out), ql.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _out: &Tensor,
        g: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (qv, kv, vv, gv) = (values(q)?, values(k)?, values(v)?, values(g)?);
        let (qw, kw) = (self.heads * self.d, self.kv_heads * self.d);
        let (mut dq, mut dk, mut dv) = (vec![0.0; qv.len()], vec![0.0; kv.len()], vec![0.0; vv.len()]);
        let inputs = (qv.as_slice(), kv.as_slice(), vv.as_slice(), gv.as_slice());
        std::thread::scope(|scope| {
            let (mut dq, mut dk, mut dv) = (dq.as_mut_slice(), dk.as_mut_slice(), dv.as_mut_slice());
            for (spans, r0, rows) in self.groups() {
                let (q_mine, q_after) = dq.split_at_mut(rows * qw);
                let (k_mine, k_after) = dk.split_at_mut(rows * kw);
                let (v_mine, v_after) = dv.split_at_mut(rows * kw);
                (dq, dk, dv) = (q_after, k_after, v_after);
                scope.spawn(move || self.backward(inputs, spans, (q_mine, k_mine, v_mine), r0));
            }
        });
        Ok((Some(tensor(dq, q)?), Some(tensor(dk, k)?), Some(tensor(dv, v)?)))
    }
}

/// llama's gated unit: `silu(gate) * up`.
#[derive(Clone)]
pub(super) struct SwiGlu;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "lora-swiglu"
    }

    fn cpu_fwd(&self, gs: &CpuStorage, gl: &Layout, us: &CpuStorage, ul: &Layout) -> Result<(CpuStorage, Shape)> {
        let (gate, up) = (slice(gs, gl)?, slice(us, ul)?);
        let y = gate.iter().zip(up).map(|(&g, &u)| g * sigmoid(g) * u).collect();
        Ok((CpuStorage::F32(y), gl.shape().clone()))
    }

    /// `d gate = g u s (1 + x (1 - s))` with `s = sigmoid(gate)`, `d up = g silu(gate)`.
    fn bwd(&self, gate: &Tensor, up: &Tensor, _y: &Tensor, g: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (x, u, g) = (values(gate)?, values(up)?, values(g)?);
        let (mut dg, mut du) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        for i in 0..x.len() {
            let s = sigmoid(x[i]);
            dg[i] = g[i] * u[i] * s * (1.0 + x[i] * (1.0 - s));
            du[i] = g[i] * x[i] * s;
        }
        Ok((Some(tensor(dg, gate)?), Some(tensor(du, up)?)))
    }
}

#[cfg(test)]
mod tests {
    //! Each operation against the same computation composed of candle's operations (as the
    //! training pass was before them): the outputs and every input's gradient agree.

    use candle_core::{D, Device, Tensor, Var};

    use super::*;

    fn random(shape: &[usize], seed: u64) -> Var {
        let n: usize = shape.iter().product();
        let mut rng = seed;
        let v: Vec<f32> = (0..n)
            .map(|_| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((rng >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Var::from_tensor(&Tensor::from_vec(v, shape, &Device::Cpu).unwrap()).unwrap()
    }

    /// Outputs of both ways, then the gradients of `sum(y * r)` (`r` fixed) of each input.
    fn agree(inputs: &[&Var], ours: &Tensor, theirs: &Tensor) {
        let close = |a: &Tensor, b: &Tensor, what: &str| {
            let worst = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            let worst = worst.to_scalar::<f32>().unwrap();
            assert!(worst < 1e-4, "{what}: differs by {worst}");
        };
        close(ours, theirs, "output");
        let r = random(ours.dims(), 99);
        let (g1, g2) = (
            (ours * r.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap(),
            (theirs * r.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap(),
        );
        for (i, x) in inputs.iter().enumerate() {
            close(g1.get(x).unwrap(), g2.get(x).unwrap(), &format!("gradient of input {i}"));
        }
    }

    #[test]
    fn the_norm_is_llamas_rms_norm_forward_and_back() {
        let (x, w) = (random(&[5, 32], 1), random(&[32], 2));
        let op = RmsNorm { weight: Arc::new(w.as_tensor().to_vec1().unwrap()), eps: 1e-5 };
        let ours = x.as_tensor().apply_op1(op).unwrap();
        let theirs = candle_nn::ops::rms_norm_slow(x.as_tensor(), w.as_tensor(), 1e-5).unwrap();
        agree(&[&x], &ours, &theirs);
    }

    #[test]
    fn the_rotary_embeddings_are_the_interleaved_ones_forward_and_back() {
        let (n, heads, d) = (6, 3, 8);
        let x = random(&[n, heads * d], 3);
        let angles: Vec<(f32, f32)> =
            (0..n).flat_map(|p| (0..d / 2).map(move |i| (p as f32 * 0.3 / (i + 1) as f32).sin_cos())).collect();
        let (sin, cos): (Vec<f32>, Vec<f32>) = angles.into_iter().unzip();
        // Two sequences: positions 0..4 then 0..2.
        let positions = vec![0, 1, 2, 3, 0, 1];
        let table = |v: &[f32]| {
            let rows: Vec<f32> = positions.iter().flat_map(|&p| v[p * d / 2..][..d / 2].to_vec()).collect();
            Tensor::from_vec(rows, (n, d / 2), &Device::Cpu).unwrap()
        };
        let op = Rope {
            cos: Arc::new(cos.clone()),
            sin: Arc::new(sin.clone()),
            pairs: d / 2,
            positions: Arc::new(positions.clone()),
        };
        let ours = x.as_tensor().apply_op1(op).unwrap();
        let heads_first = x.as_tensor().reshape((n, heads, d)).unwrap().transpose(0, 1).unwrap().unsqueeze(0).unwrap();
        let theirs =
            candle_nn::rotary_emb::rope_i_slow(&heads_first.contiguous().unwrap(), &table(&cos), &table(&sin)).unwrap();
        let theirs = theirs.squeeze(0).unwrap().transpose(0, 1).unwrap().reshape((n, heads * d)).unwrap();
        agree(&[&x], &ours, &theirs);
    }

    #[test]
    fn attention_sees_only_its_own_sequence_and_earlier_tokens_forward_and_back() {
        let (heads, kv_heads, d) = (4, 2, 8);
        let spans = vec![(0, 5), (5, 3)];
        let n = 8;
        let (q, k, v) = (random(&[n, heads * d], 4), random(&[n, kv_heads * d], 5), random(&[n, kv_heads * d], 6));
        let scale = 1.0 / (d as f32).sqrt();
        let op = Attention { heads, kv_heads, d, spans: Arc::new(spans.clone()), scale };
        let ours = q.as_tensor().apply_op3(k.as_tensor(), v.as_tensor(), op).unwrap();
        let split = |t: &Tensor, h: usize| t.reshape((n, h, d)).unwrap().transpose(0, 1).unwrap().contiguous().unwrap();
        let (qh, kh, vh) =
            (split(q.as_tensor(), heads), split(k.as_tensor(), kv_heads), split(v.as_tensor(), kv_heads));
        let group = heads / kv_heads;
        let repeat = |t: &Tensor, m: usize| {
            t.unsqueeze(1).unwrap().expand((kv_heads, group, m, d)).unwrap().reshape((heads, m, d)).unwrap()
        };
        let mut outs = Vec::new();
        for (start, m) in spans {
            let mask: Vec<f32> =
                (0..m).flat_map(|i| (0..m).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY })).collect();
            let mask = Tensor::from_vec(mask, (m, m), &Device::Cpu).unwrap();
            let (q, k, v) = (
                qh.narrow(1, start, m).unwrap(),
                repeat(&kh.narrow(1, start, m).unwrap(), m),
                repeat(&vh.narrow(1, start, m).unwrap(), m),
            );
            let scores = (q.matmul(&k.t().unwrap()).unwrap() * scale as f64).unwrap().broadcast_add(&mask).unwrap();
            let w = candle_nn::ops::softmax(&scores, D::Minus1).unwrap();
            outs.push(w.matmul(&v).unwrap());
        }
        let theirs = Tensor::cat(&outs, 1).unwrap().transpose(0, 1).unwrap().reshape((n, heads * d)).unwrap();
        agree(&[&q, &k, &v], &ours, &theirs);
    }

    #[test]
    fn the_gated_unit_is_silu_of_the_gate_times_up_forward_and_back() {
        let (gate, up) = (random(&[4, 16], 7), random(&[4, 16], 8));
        let ours = gate.as_tensor().apply_op2(up.as_tensor(), SwiGlu).unwrap();
        let theirs = (gate.as_tensor().silu().unwrap() * up.as_tensor()).unwrap();
        agree(&[&gate, &up], &ours, &theirs);
    }
}
