//! The passes over rows of a BERT forward pass besides its products: embeddings, bias, GELU,
//! residual and LayerNorm fused, the softmax, and short sequences' attention, each compiled for
//! AVX-512, for AVX2 with FMA and for any CPU, the best the CPU has chosen at run time.

use crate::math::exp;

/// Compiles `$body` three times, for AVX-512, for AVX2 with FMA and for any x86-64 (or other
/// target), and runs the best the CPU has. The bodies are plain loops written so the compiler
/// can vectorise them; the features only let it use wider registers.
macro_rules! vectorised {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
                fn v4($($arg: $ty),*) { body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                fn v3($($arg: $ty),*) { body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                {
                    // SAFETY: the CPU has every feature `v4` is compiled for (checked above).
                    return unsafe { v4($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has every feature `v3` is compiled for (checked above).
                    return unsafe { v3($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// Lanes of the partial sums: one AVX-512 register of f32.
const LANES: usize = 16;

#[inline(always)]
fn sum(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    it.remainder().iter().sum::<f32>() + acc.iter().sum::<f32>()
}

#[inline(always)]
fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = if *v > *a { *v } else { *a };
        }
    }
    it.remainder().iter().chain(&acc).fold(f32::NEG_INFINITY, |m, v| if *v > m { *v } else { m })
}

/// GELU, exact form: x/2 (1 + erf(x/√2)), erf to 1.5e-7 (Abramowitz & Stegun 7.1.26).
#[inline(always)]
pub(super) fn gelu(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let t = 1.0 / a.mul_add(0.327_591_1, 1.0);
    let mut p = 1.061_405_4f32;
    p = p.mul_add(t, -1.453_152_1);
    p = p.mul_add(t, 1.421_413_7);
    p = p.mul_add(t, -0.284_496_72);
    p = p.mul_add(t, 0.254_829_6);
    let erf = (1.0 - p * t * exp(-a * a)).copysign(z);
    0.5 * x * (1.0 + erf)
}

#[inline(always)]
fn layer_norm_row(row: &mut [f32], g: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    let mut acc = [0.0f32; LANES];
    let mut it = row.chunks_exact(LANES);
    for c in &mut it {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += (v - mean) * (v - mean);
        }
    }
    let var = (it.remainder().iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() + acc.iter().sum::<f32>()) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, g), b) in row.iter_mut().zip(g).zip(b) {
        *v = ((*v - mean) * inv).mul_add(*g, *b);
    }
}

vectorised! {
    /// One embedding row: word + position + token type.
    pub(super) fn embed_row(row: &mut [f32], word: &[f32], position: &[f32], token_type: &[f32]) {
        for (((r, w), p), t) in row.iter_mut().zip(word).zip(position).zip(token_type) {
            *r = w + p + t;
        }
    }
}

vectorised! {
    pub(super) fn layer_norm_rows(x: &mut [f32], g: &[f32], b: &[f32], eps: f32) {
        for row in x.chunks_exact_mut(g.len()) {
            layer_norm_row(row, g, b, eps);
        }
    }
}

vectorised! {
    /// `x = LayerNorm(x + y + bias)`, row by row.
    pub(super) fn residual_layer_norm_rows(x: &mut [f32], y: &[f32], bias: &[f32], g: &[f32], b: &[f32], eps: f32) {
        let h = g.len();
        for (xr, yr) in x.chunks_exact_mut(h).zip(y.chunks_exact(h)) {
            for ((xv, yv), bv) in xr.iter_mut().zip(yr).zip(bias) {
                *xv += yv + bv;
            }
            layer_norm_row(xr, g, b, eps);
        }
    }
}

vectorised! {
    pub(super) fn add_bias_rows(x: &mut [f32], bias: &[f32]) {
        for row in x.chunks_exact_mut(bias.len()) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v += b;
            }
        }
    }
}

vectorised! {
    pub(super) fn bias_gelu_rows(x: &mut [f32], bias: &[f32]) {
        for row in x.chunks_exact_mut(bias.len()) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v = gelu(*v + b);
            }
        }
    }
}

vectorised! {
    /// Self-attention of one sequence of `len` tokens, every head: `qkv` is its
    /// `[len, 3 * hidden]` rows, `ctx` its `[len, hidden]` output; `work` holds at least
    /// `(head_size + 1) * len` values.
    pub(super) fn attention_small(qkv: &[f32], ctx: &mut [f32], work: &mut [f32], len: usize, heads: usize, scale: f32) {
        let h = ctx.len() / len;
        let d = h / heads;
        let (kt, rest) = work.split_at_mut(d * len);
        let row = &mut rest[..len];
        for head in 0..heads {
            // Kᵀ of this head, `[d, len]`, so a row of scores is a sum of contiguous rows.
            for (j, k) in qkv.chunks_exact(3 * h).map(|r| &r[h + head * d..h + (head + 1) * d]).enumerate() {
                for (c, v) in k.iter().enumerate() {
                    kt[c * len + j] = *v;
                }
            }
            for (i, out_row) in ctx.chunks_exact_mut(h).enumerate() {
                let q = &qkv[i * 3 * h + head * d..i * 3 * h + (head + 1) * d];
                row.fill(0.0);
                for (qc, ktc) in q.iter().zip(kt.chunks_exact(len)) {
                    let qc = qc * scale;
                    for (r, k) in row.iter_mut().zip(ktc) {
                        *r = qc.mul_add(*k, *r);
                    }
                }
                let m = max(row);
                for r in row.iter_mut() {
                    *r = exp(*r - m);
                }
                let inv = 1.0 / sum(row);
                let out = &mut out_row[head * d..(head + 1) * d];
                out.fill(0.0);
                for (p, v) in row.iter().zip(qkv.chunks_exact(3 * h).map(|r| &r[2 * h + head * d..2 * h + (head + 1) * d])) {
                    let p = p * inv;
                    for (o, v) in out.iter_mut().zip(v) {
                        *o = p.mul_add(*v, *o);
                    }
                }
            }
        }
    }
}

vectorised! {
    /// Softmax of each row of `cols` values, in place.
    pub(super) fn softmax_rows(x: &mut [f32], cols: usize) {
        for row in x.chunks_exact_mut(cols) {
            let m = max(row);
            for v in row.iter_mut() {
                *v = exp(*v - m);
            }
            let inv = 1.0 / sum(row);
            for v in row.iter_mut() {
                *v *= inv;
            }
        }
    }
}
