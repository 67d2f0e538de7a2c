//! Causal attention of a pass's new tokens over their own requests' keys and values (f16,
//! widened exactly), in one order of sums on every path: plain loops, AVX2 with FMA, AVX-512.

use super::*;

impl Llama {
    /// Causal attention of each new token's queries (in `qkv`; `rows` gives its part and
    /// position) over the keys and values of its part's cache up to its position, into `out`;
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
        // Keys of 64 values, 192 apart (three key heads side by side), from the second head.
        let keys: Vec<u16> = (0..16 * 192).map(|_| half::f16::from_f32(next()).to_bits()).collect();
        let key = |i: usize| half::f16::from_bits(keys[i]).to_f32();
        let q: Vec<f32> = (0..64).map(|_| next() * 3.0).collect();
        let mut one = [0.0; 16];
        scores_one_by_one(&q, &keys[64..], 192, 0.125, &mut one);
        let mut wide = [0.0; 16];
        // SAFETY: the CPU has the features (checked above), and 16 keys exist.
        unsafe { scores_wide(&q, keys[64..].as_ptr(), 192, 0.125, &mut wide) };
        assert_eq!(one.map(f32::to_bits), wide.map(f32::to_bits), "{one:?} vs {wide:?}");
        // The three query heads of a group scored together, each key loaded once for all three.
        let qs: Vec<f32> = (0..3 * 64).map(|_| next() * 3.0).collect();
        let mut group = [0.0; 3 * 16];
        // SAFETY: as above; 16 keys exist and three runs of 16 scores fit.
        unsafe { scores_group::<3, 4>(&qs, keys[64..].as_ptr(), 192, 0.125, &mut group, 16) };
        for h in 0..3 {
            let mut alone = [0.0; 16];
            scores_one_by_one(&qs[h * 64..(h + 1) * 64], &keys[64..], 192, 0.125, &mut alone);
            assert_eq!(
                alone.map(f32::to_bits)[..],
                group[h * 16..(h + 1) * 16].iter().map(|s| s.to_bits()).collect::<Vec<_>>()[..],
                "head {h}"
            );
        }
        // A key past the last whole 16, scored alone in registers.
        for j in [0, 5, 15] {
            // SAFETY: as above; key j exists.
            let alone = unsafe { score_wide(&q, keys[64 + j * 192..].as_ptr()) } * 0.125;
            assert_eq!(alone.to_bits(), one[j].to_bits(), "key {j}");
        }
        assert!((one[3] - 0.125 * (0..64).map(|k| q[k] * key(64 + 3 * 192 + k)).sum::<f32>()).abs() < 1e-4);
        // The values weighted by 13 scores, in registers and plainly.
        let (mut plain, mut fast) = ([0.0; 64], [0.0; 64]);
        weigh_by_chunks(&one[..13], &keys[64..], 192, &mut plain);
        // SAFETY: as above; 13 positions of 64 values exist.
        unsafe { weigh_wide::<1, 4>(&one[..13], &keys[64..], 192, &mut fast) };
        assert_eq!(plain.map(f32::to_bits), fast.map(f32::to_bits));
        assert!((plain[5] - (0..13).map(|j| one[j] * key(64 + j * 192 + 5)).sum::<f32>()).abs() < 1e-4);
        // Three heads' scores over the same 11 values, weighted together and one by one.
        let scores: Vec<f32> = (0..33).map(|_| next()).collect();
        let (mut plain, mut fast) = ([0.0; 192], [0.0; 192]);
        weigh_heads(&scores, 3, &keys[64..], 192, &mut plain);
        // SAFETY: as above; 11 positions of 64 values exist.
        unsafe { weigh_wide::<3, 4>(&scores, &keys[64..], 192, &mut fast) };
        assert_eq!(plain.map(f32::to_bits), fast.map(f32::to_bits));
        let mut second = [0.0; 64];
        weigh_by_chunks(&scores[11..22], &keys[64..], 192, &mut second);
        assert_eq!(&plain[64..128], &second[..]);
    }
}
