//! Causal attention of a pass's new tokens over their own requests' keys and values (f16,
//! widened exactly), in one order of sums on every path: plain loops, AVX2 with FMA, AVX-512.
//!
//! A head's keys are kept in blocks of [`KEY_BLOCK`] positions, each block one dimension of its
//! 16 keys after another (`[head_dim][16]`, see [`KvCache`]): a register loaded from it holds
//! one value of 16 keys, so 16 scores are summed in 16 registers side by side, each in its own
//! lane, and a key's partial sums are added lane to lane, never moved across a register.

use super::*;

impl Llama {
    /// Causal attention of each new token's queries (in `qkv`; `rows` gives its part and
    /// position) over the keys and values of its part's cache up to its position (`caches`
    /// holds each part's runs of each key head, `[part * kv_heads + head]`), into `out`;
    /// (token, key head) pairs, each with the query heads that share the key head, are dealt
    /// out to the shares in turn, so each has as many early (short) rows as late ones, and
    /// there are a few shares a thread, for threads that arrive late.
    pub(super) fn attention(
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
                if crate::llm::q8::wide::available() && fused::available() {
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

/// Attention's two inner loops: the scores of each query head of a group against a run of keys
/// (like [`scores_heads`]), and
/// the values weighted by the scores of each query head of a group (like [`weigh_heads`]).
struct Loops<S, W> {
    /// `(queries, heads, key blocks, scale, positions, scores)`: `scores` made `heads` runs of
    /// `positions` scores.
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
        impl Fn(&[f32], usize, &[u16], f32, usize, &mut Vec<f32>),
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
        let (keys, values) = caches[part * cfg.kv_heads + g];
        // The group's query heads, side by side in the row.
        let qs = &qkv[i * width + g * group * d..i * width + (g + 1) * group * d];
        scores_of(qs, group, keys, scale, pos + 1, &mut scores);
        for scores in scores.chunks_exact_mut(pos + 1) {
            softmax(scores);
        }
        // SAFETY: (token i, the group's heads) is this thread's item alone, within `out`.
        let out = unsafe { out.slice(i, g * group * d, group * d) };
        weigh(&scores, group, values, d, out);
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

/// For each of `heads` queries (side by side in `qs`), its scores against the first `len`
/// keys of the blocks `keys`, into `scores` (the heads' runs side by side).
#[inline(always)]
fn scores_heads(qs: &[f32], heads: usize, keys: &[u16], scale: f32, len: usize, scores: &mut Vec<f32>) {
    let d = qs.len() / heads;
    scores.resize(heads * len, 0.0);
    for (q, scores) in qs.chunks_exact(d).zip(scores.chunks_exact_mut(len)) {
        scores_one_by_one(q, keys, scale, scores);
    }
}

/// The scores of `q` against the first `scores.len()` keys of the blocks `keys`, times `scale`:
/// each key's as [`dot_by`] sums it with fused multiply-adds (value k into partial sum k % 16,
/// in order, then halves), the definition the other ways of scoring keep to. Written a block at
/// a time, a partial sum of its 16 keys side by side, so the compiler vectorizes it over keys.
#[inline(always)]
fn scores_one_by_one(q: &[f32], keys: &[u16], scale: f32, scores: &mut [f32]) {
    let d = q.len();
    for (b, scores) in scores.chunks_mut(KEY_BLOCK).enumerate() {
        let block = &keys[b * KEY_BLOCK * d..];
        let mut sums = [[0.0f32; KEY_BLOCK]; LANES];
        for (k, q) in q.iter().enumerate() {
            let values = &block[k * KEY_BLOCK..(k + 1) * KEY_BLOCK];
            for (sum, v) in sums[k % LANES].iter_mut().zip(values) {
                *sum = q.mul_add(widen(*v), *sum);
            }
        }
        for w in [8, 4, 2, 1] {
            for l in 0..w {
                let (low, high) = sums.split_at_mut(l + w);
                for (a, b) in low[l].iter_mut().zip(&high[0]) {
                    *a += b;
                }
            }
        }
        for (s, sum) in scores.iter_mut().zip(sums[0]) {
            *s = sum * scale;
        }
    }
}

/// [`attend`], for AVX-512: the scores of 16 keys at a time, their 16 partial sums added in
/// [`dot`]'s order by exchanging halves between registers, and the heads of a group
/// weighted together, so the same bits.
///
/// # Safety
/// The CPU must have the features [`crate::llm::q8::wide::available`] and [`fused::available`]
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
    let scores_of = |qs: &[f32], heads: usize, keys: &[u16], scale: f32, len: usize, scores: &mut Vec<f32>| {
        let d = qs.len() / heads;
        // Each head's run padded to whole blocks while they are scored, then closed up.
        let padded = len.div_ceil(KEY_BLOCK) * KEY_BLOCK;
        assert!(keys.len() >= padded * d, "keys of {len} positions");
        scores.resize(heads * padded, 0.0);
        for b in (0..len).step_by(KEY_BLOCK) {
            let (kt, at) = (keys[b * d..].as_ptr(), scores[b..].as_mut_ptr());
            // SAFETY: the CPU has the features; the block from b exists (above), and each head's
            // 16 scores from b are within its padded run.
            unsafe {
                match (heads, d) {
                    (1, 64) => scores_block::<1, 4>(qs, kt, scale, at, padded),
                    (2, 64) => scores_block::<2, 4>(qs, kt, scale, at, padded),
                    (3, 64) => scores_block::<3, 4>(qs, kt, scale, at, padded),
                    (4, 64) => scores_block::<4, 4>(qs, kt, scale, at, padded),
                    (1, 32) => scores_block::<1, 2>(qs, kt, scale, at, padded),
                    (1, 128) => scores_block::<1, 8>(qs, kt, scale, at, padded),
                    _ => return scores_heads(qs, heads, keys, scale, len, scores),
                }
            }
        }
        for h in 1..heads {
            scores.copy_within(h * padded..h * padded + len, h * len);
        }
        scores.truncate(heads * len);
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

/// The scores of `G` query heads (`C` registers of 16 values each, side by side in `qs`)
/// against the 16 keys of the block at `kt` (`[C * 16][16]`), times `scale`: head h's to
/// `scores[h * stride..][..16]`. Sum l of 16 keys (their values l, l + 16, ... times the
/// query's, each a fused multiply-add from zero) is one register, and the sums are added as
/// [`dot`] adds them (l and l + 8, then l and l + 4, l + 2, l + 1), register to register: each
/// key's score in its lane, the bits [`scores_one_by_one`] gives. A block's values are loaded
/// once for all the heads.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; the block must exist, `qs` hold `G * C * 16` values and
/// each head's 16 scores fit.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,fma")]
unsafe fn scores_block<const G: usize, const C: usize>(
    qs: &[f32],
    kt: *const u16,
    scale: f32,
    scores: *mut f32,
    stride: usize,
) {
    use std::arch::x86_64::*;
    assert!(qs.len() >= G * C * LANES, "{G} heads of {C} registers");
    let q = qs.as_ptr();
    let add = |a: [__m512; G], b: [__m512; G]| -> [__m512; G] { std::array::from_fn(|h| _mm512_add_ps(a[h], b[h])) };
    // SAFETY (of each): the block and the queries exist (above).
    let half4 = |l| unsafe { add(half8::<G, C>(q, kt, l), half8::<G, C>(q, kt, l + 4)) };
    let half2 = |l| add(half4(l), half4(l + 2));
    let total = add(half2(0), half2(1));
    for (h, total) in total.iter().enumerate() {
        // SAFETY: head h's 16 scores fit (the caller's promise).
        unsafe { _mm512_storeu_ps(scores.add(h * stride), _mm512_mul_ps(*total, _mm512_set1_ps(scale))) };
    }
}

/// Sums l and l + 8 of [`scores_block`]'s 16 keys, added, for each of its `G` heads: a call
/// of its own, so the compiler keeps each in registers (inlined, it loads and widens every key
/// value of the block first and keeps them on the stack).
///
/// # Safety
/// As [`scores_block`].
#[cfg(target_arch = "x86_64")]
#[inline(never)]
#[target_feature(enable = "avx512f,fma")]
unsafe fn half8<const G: usize, const C: usize>(
    q: *const f32,
    kt: *const u16,
    l: usize,
) -> [std::arch::x86_64::__m512; G] {
    use std::arch::x86_64::*;
    let sum = |l: usize| -> [__m512; G] {
        // SAFETY: the block's values l, l + 16, ... of its 16 keys exist; so do the queries'.
        let keys: [__m512; C] = std::array::from_fn(|c| unsafe { load_f16(kt.add((c * LANES + l) * KEY_BLOCK)) });
        std::array::from_fn(|h| {
            let mut acc = _mm512_setzero_ps();
            for (c, key) in keys.iter().enumerate() {
                let q = _mm512_set1_ps(unsafe { *q.add((h * C + c) * LANES + l) });
                acc = _mm512_fmadd_ps(q, *key, acc);
            }
            acc
        })
    };
    let (a, b) = (sum(l), sum(l + 8));
    std::array::from_fn(|h| _mm512_add_ps(a[h], b[h]))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn attention_in_registers_gives_the_plain_loops_bits() {
        if !crate::llm::q8::wide::available() || !fused::available() {
            return;
        }
        let mut state = 0x2545_f491u32;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 20_000) as f32 / 10_000.0 - 1.0
        };
        // 37 keys of 64 values in blocks (two whole, one begun), and 37 values side by side.
        let (d, len) = (64, 37);
        let mut keys = vec![0u16; key_values(len, d)];
        let plain: Vec<Vec<f32>> = (0..len).map(|_| (0..d).map(|_| next()).collect()).collect();
        for (j, key) in plain.iter().enumerate() {
            for (k, v) in key.iter().enumerate() {
                keys[j / KEY_BLOCK * KEY_BLOCK * d + k * KEY_BLOCK + j % KEY_BLOCK] = f16::from_f32(*v).to_bits();
            }
        }
        let key = |j: usize, k: usize| f16::from_f32(plain[j][k]).to_f32();
        let q: Vec<f32> = (0..3 * d).map(|_| next() * 3.0).collect();
        let mut one = vec![0.0; len];
        scores_one_by_one(&q[..d], &keys, 0.125, &mut one);
        assert!((one[20] - 0.125 * (0..d).map(|k| q[k] * key(20, k)).sum::<f32>()).abs() < 1e-4);
        // Each key's score is `dot`'s sum of the key alone, bit for bit.
        for j in [0, 15, 16, 36] {
            let alone: Vec<u16> = plain[j].iter().map(|v| f16::from_f32(*v).to_bits()).collect();
            let want = dot_by(&q[..d], &alone, widen, f32::mul_add) * 0.125;
            assert_eq!(one[j].to_bits(), want.to_bits(), "key {j}");
        }
        // A block at a time, the three query heads of a group together and one head alone.
        for heads in [3, 1] {
            let padded = len.div_ceil(KEY_BLOCK) * KEY_BLOCK;
            let mut wide = vec![0.0; heads * padded];
            for b in (0..len).step_by(KEY_BLOCK) {
                let (kt, at) = (keys[b * d..].as_ptr(), wide[b..].as_mut_ptr());
                // SAFETY: the CPU has the features (checked above); the block exists and each
                // head's 16 scores from b fit in its padded run.
                unsafe {
                    match heads {
                        3 => scores_block::<3, 4>(&q, kt, 0.125, at, padded),
                        _ => scores_block::<1, 4>(&q, kt, 0.125, at, padded),
                    }
                }
            }
            for h in 0..heads {
                let mut alone = vec![0.0; len];
                scores_one_by_one(&q[h * d..(h + 1) * d], &keys, 0.125, &mut alone);
                let wide: Vec<u32> = wide[h * padded..h * padded + len].iter().map(|s| s.to_bits()).collect();
                assert_eq!(alone.iter().map(|s| s.to_bits()).collect::<Vec<_>>(), wide, "head {h} of {heads}");
            }
        }
        // The values weighted by 13 scores, in registers and plainly.
        let values: Vec<u16> = (0..len * d).map(|_| f16::from_f32(next()).to_bits()).collect();
        let value = |i: usize| f16::from_bits(values[i]).to_f32();
        let (mut plain, mut fast) = ([0.0; 64], [0.0; 64]);
        weigh_by_chunks(&one[..13], &values, d, &mut plain);
        // SAFETY: as above; 13 positions of 64 values exist.
        unsafe { weigh_wide::<1, 4>(&one[..13], &values, d, &mut fast) };
        assert_eq!(plain.map(f32::to_bits), fast.map(f32::to_bits));
        assert!((plain[5] - (0..13).map(|j| one[j] * value(j * d + 5)).sum::<f32>()).abs() < 1e-4);
        // Three heads' scores over the same 11 values, weighted together and one by one.
        let scores: Vec<f32> = (0..33).map(|_| next()).collect();
        let (mut plain, mut fast) = ([0.0; 192], [0.0; 192]);
        weigh_heads(&scores, 3, &values, d, &mut plain);
        // SAFETY: as above; 11 positions of 64 values exist.
        unsafe { weigh_wide::<3, 4>(&scores, &values, d, &mut fast) };
        assert_eq!(plain.map(f32::to_bits), fast.map(f32::to_bits));
        let mut second = [0.0; 64];
        weigh_by_chunks(&scores[11..22], &values, d, &mut second);
        assert_eq!(&plain[64..128], &second[..]);
    }
}
