//! Causal attention of a pass's new tokens over their own requests' keys and values, kept in
//! bf16, summed as the bf16 dot-product instruction (`vdpbf16ps`) sums them on every path:
//! plain loops, the same compiled for AVX2 with FMA, blocks of 16 lanes on AVX-512 without BF16
//! ([`wide_fma`]), and the instruction itself where the CPU has AVX-512 BF16 (twice the
//! multiply-adds of f32 fused multiply-adds a cycle, and nothing to widen).
//!
//! Each product pairs two values: the instruction adds, to each of 16 f32 sums, the product of
//! the pair's second values and then that of its first, each a fused multiply-add of bf16
//! values read as f32 ([`step`]; the instruction also makes subnormal sums zero, which the other
//! paths do not: the same bits unless a sum falls below about 1e-38).
//! A query is rounded to bf16 before its scores, and a head's probabilities before they weigh
//! the values.
//!
//! A head's keys are kept in blocks of [`KEY_BLOCK`] positions, each block one pair of
//! dimensions of its 16 keys after another (`[head_dim / 2][16][2]`, see [`KvCache`]): a
//! register loaded from it holds one pair of 16 keys, so 16 scores are summed side by side,
//! each in its own lane. Values are kept in pairs of positions (`[position / 2][head_dim][2]`),
//! so a register holds 16 dimensions of two positions, weighed by their two probabilities.

use super::*;

/// Partial sums of a score: pair `p` of dimensions goes into sum `p % CHAINS`, in order, and
/// the sums are added as `(0 + 2) + (1 + 3)`, so a head's instructions do not wait on each other.
const CHAINS: usize = 4;

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
                if wide::available() {
                    // SAFETY: the CPU has the features `attend_wide` is compiled for.
                    return unsafe { wide::attend_wide(cfg, items, qkv, caches, rows, out) };
                }
                if wide_fma::available() {
                    // SAFETY: the CPU has the features this `attend_wide` is compiled for.
                    return unsafe { wide_fma::attend_wide(cfg, items, qkv, caches, rows, out) };
                }
                if fused::available() {
                    // SAFETY: the CPU has the features `attend_fused` is compiled for.
                    return unsafe { fused::attend_fused(cfg, items, qkv, caches, rows, out) };
                }
            }
            attend(cfg, items, qkv, caches, rows, out, Loops { pairs, scores: scores_heads, weigh: weigh_heads });
        });
    }
}

/// Attention's inner loops: values rounded to bf16 in pairs (like [`pairs`]), the scores of
/// each query head of a group against a run of keys (like [`scores_heads`]), and the values
/// weighted by each head's probabilities (like [`weigh_heads`]).
struct Loops<P, S, W> {
    /// `(values, out)`: the values rounded, in pairs, onto `out` (like [`pairs`]).
    pairs: P,
    /// `(query pairs, heads, keys, scale, positions, scores)`: `scores` made `heads` runs of
    /// `positions` scores.
    scores: S,
    /// `(probability pairs, heads, values, out)`: each head's output, side by side in `out`.
    weigh: W,
}

/// Attention for the (token, key head) `items` of one thread (see [`Llama::attention`]): for
/// each query head that shares the key head, the query (rounded to bf16) scored against every
/// key up to its position, times the scale, and their [`softmax`]; then the values weighted by
/// each head's probabilities (rounded to bf16). A row's attention depends only on its own
/// queries and cache, whatever else the pass holds; the ways of computing the loops give the
/// same bits (see [`step`] for the one exception).
#[inline(always)]
fn attend(
    cfg: &LlamaConfig,
    items: std::iter::StepBy<std::ops::Range<usize>>,
    qkv: &[f32],
    caches: &[(&[u16], &[u16])],
    rows: &[(usize, usize)],
    out: Out,
    loops: Loops<
        impl Fn(&[f32], &mut Vec<u32>),
        impl Fn(&[u32], usize, &[u16], f32, usize, &mut Vec<f32>),
        impl Fn(&[u32], usize, &[u16], &mut [f32]),
    >,
) {
    let Loops { pairs, scores: scores_of, weigh } = loops;
    let (h, kv, d) = (cfg.hidden, cfg.kv_dim(), cfg.head_dim);
    let group = cfg.heads / cfg.kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    let width = h + 2 * kv;
    let (mut queries, mut scores, mut probabilities) = (Vec::new(), Vec::new(), Vec::new());
    for item in items {
        let (i, g) = (item / cfg.kv_heads, item % cfg.kv_heads);
        let (part, pos) = rows[i];
        let (keys, values) = caches[part * cfg.kv_heads + g];
        // The group's query heads, side by side in the row.
        let qs = &qkv[i * width + g * group * d..i * width + (g + 1) * group * d];
        queries.clear();
        for q in qs.chunks_exact(d) {
            pairs(q, &mut queries);
        }
        scores_of(&queries, group, keys, scale, pos + 1, &mut scores);
        probabilities.clear();
        for scores in scores.chunks_exact_mut(pos + 1) {
            softmax(scores);
            pairs(scores, &mut probabilities);
        }
        // SAFETY: (token i, the group's heads) is this thread's item alone, within `out`.
        let out = unsafe { out.slice(i, g * group * d, group * d) };
        weigh(&probabilities, group, values, out);
    }
}

/// `x` rounded to bf16 (to nearest, ties to even), in pairs as a register's 32-bit lanes hold
/// them (the first value in the low half), onto `out`; an odd last value's partner is zero.
#[inline(always)]
fn pairs(x: &[f32], out: &mut Vec<u32>) {
    out.extend(x.chunks(2).map(|p| u32::from(narrow(p[0])) | u32::from(p.get(1).map_or(0, |v| narrow(*v))) << 16));
}

/// `x` as bf16 bits, rounded to nearest, ties to even, a subnormal as zero and a NaN quiet (as
/// the instruction that converts 32 at a time, `vcvtne2ps2bf16`, rounds them).
#[inline(always)]
pub(super) fn narrow(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = if x.is_nan() {
        bits >> 16 | 0x40
    } else if x.is_subnormal() {
        bits >> 16 & 0x8000
    } else {
        (bits + 0x7fff + (bits >> 16 & 1)) >> 16
    };
    rounded as u16
}

/// One lane of `vdpbf16ps`: `acc` plus the product of the pairs' second values, then plus that
/// of their first, each a fused multiply-add of bf16 values read as f32 (the product of two is
/// exact in f32). The instruction also makes a subnormal sum or result zero; this does not (it
/// would take the plain loops twice as long), so the paths give the same bits unless a product
/// or partial sum falls below f32's smallest normal, about 1e-38 (bf16 values from [`narrow`]
/// are never subnormal).
#[inline(always)]
fn step(acc: f32, a: u32, b: u32) -> f32 {
    let f = f32::from_bits;
    let high = f(a & 0xffff_0000).mul_add(f(b & 0xffff_0000), acc);
    f(a << 16).mul_add(f(b << 16), high)
}

/// The pair of bf16 values from `run[at]` and `run[at + 1]`, as [`pairs`] holds them.
#[inline(always)]
fn pair(run: &[u16], at: usize) -> u32 {
    let pair = &run[at..at + 2];
    u32::from(pair[0]) | u32::from(pair[1]) << 16
}

/// For each of `heads` queries (their pairs side by side in `qs`), its scores against the
/// first `len` keys of the blocks `keys`, into `scores` (the heads' runs side by side): the
/// definition the other ways of scoring keep to. Written a block at a time, each of a block's
/// 16 keys in its own lane and four pairs at a time, each into its own sum, so the compiler
/// vectorizes it over keys.
#[inline(always)]
fn scores_heads(qs: &[u32], heads: usize, keys: &[u16], scale: f32, len: usize, scores: &mut Vec<f32>) {
    let pairs = qs.len() / heads;
    scores.resize(heads * len, 0.0);
    for (q, scores) in qs.chunks_exact(pairs).zip(scores.chunks_exact_mut(len)) {
        for (b, scores) in scores.chunks_mut(KEY_BLOCK).enumerate() {
            let block = &keys[b * KEY_BLOCK * 2 * pairs..(b + 1) * KEY_BLOCK * 2 * pairs];
            let mut sums = [[0.0f32; KEY_BLOCK]; CHAINS];
            for first in (0..pairs).step_by(CHAINS) {
                for (c, sums) in sums.iter_mut().enumerate().take(pairs - first) {
                    let (q, keys) = (q[first + c], &block[(first + c) * KEY_BLOCK * 2..][..KEY_BLOCK * 2]);
                    for (l, sum) in sums.iter_mut().enumerate() {
                        *sum = step(*sum, q, pair(keys, 2 * l));
                    }
                }
            }
            for (l, s) in scores.iter_mut().enumerate() {
                *s = ((sums[0][l] + sums[2][l]) + (sums[1][l] + sums[3][l])) * scale;
            }
        }
    }
}

/// For each of `heads` heads (their probability pairs side by side in `probabilities`), `out`
/// (their outputs side by side) = the values weighted by the head's probabilities, a pair of
/// positions at a time in order: the definition the other ways of weighing keep to. Written a
/// pair of positions at a time over every output, so the compiler vectorizes it over them.
#[inline(always)]
fn weigh_heads(probabilities: &[u32], heads: usize, values: &[u16], out: &mut [f32]) {
    let (len, d) = (probabilities.len() / heads, out.len() / heads);
    for (p, out) in probabilities.chunks_exact(len).zip(out.chunks_exact_mut(d)) {
        out.fill(0.0);
        for (j, p) in p.iter().enumerate() {
            let values = &values[j * 2 * d..(j + 1) * 2 * d];
            for (dim, out) in out.iter_mut().enumerate() {
                *out = step(*out, *p, pair(values, 2 * dim));
            }
        }
    }
}

/// [`attend`] compiled with fused multiply-adds for x86-64 CPUs that have them without AVX-512
/// (where a fused multiply-add is otherwise a call to the C library's `fmaf`). The same loops
/// compiled for AVX-512 were slower than these (prompt pieces 42 ms against 35), hence
/// [`wide_fma`]'s blocks there.
#[cfg(target_arch = "x86_64")]
mod fused {
    use super::*;

    pub fn available() -> bool {
        crate::llama::q8::wide::fused()
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
        // Closures defined here are compiled with this function's features, and the loops they
        // call inlined into them: passed as they are, the loops would be compiled for plain
        // x86-64, each fused multiply-add a call to `fmaf` (twenty times slower).
        let loops = Loops {
            pairs: |x: &[f32], out: &mut Vec<u32>| pairs(x, out),
            scores: |qs: &[u32], heads, keys: &[u16], scale, len, scores: &mut Vec<f32>| {
                scores_heads(qs, heads, keys, scale, len, scores)
            },
            weigh: |probabilities: &[u32], heads, values: &[u16], out: &mut [f32]| {
                weigh_heads(probabilities, heads, values, out)
            },
        };
        attend(cfg, items, qkv, caches, rows, out, loops)
    }
}

/// The body of an `attend_*` of a module with a `scores_block::<G, P>` and a
/// `weigh_block::<G, C>` (as [`wide`]'s): [`attend`] with loops that score a block of keys and
/// weigh the values for a group's heads at once, where the shapes are the model's, and the
/// plain loops elsewhere. Expanded inside a function compiled for the blocks' features.
#[cfg(target_arch = "x86_64")]
macro_rules! attend_blocks {
    ($cfg:ident, $items:ident, $qkv:ident, $caches:ident, $rows:ident, $out:ident, $pairs:ident) => {{
        let scores_of = |qs: &[u32], heads: usize, keys: &[u16], scale: f32, len: usize, scores: &mut Vec<f32>| {
            let pairs = qs.len() / heads;
            // Each head's run padded to whole blocks while they are scored, then closed up.
            let padded = len.div_ceil(KEY_BLOCK) * KEY_BLOCK;
            assert!(keys.len() >= padded * 2 * pairs, "keys of {len} positions");
            scores.resize(heads * padded, 0.0);
            for b in (0..len).step_by(KEY_BLOCK) {
                let (kt, at) = (keys[b * 2 * pairs..].as_ptr(), scores[b..].as_mut_ptr());
                // SAFETY: the CPU has the features; the block from b exists (above), and each
                // head's 16 scores from b are within its padded run.
                unsafe {
                    match (heads, pairs) {
                        (1, 32) => scores_block::<1, 32>(qs, kt, scale, at, padded),
                        (2, 32) => scores_block::<2, 32>(qs, kt, scale, at, padded),
                        (3, 32) => scores_block::<3, 32>(qs, kt, scale, at, padded),
                        (4, 32) => scores_block::<4, 32>(qs, kt, scale, at, padded),
                        (1, 16) => scores_block::<1, 16>(qs, kt, scale, at, padded),
                        (1, 64) => scores_block::<1, 64>(qs, kt, scale, at, padded),
                        _ => return scores_heads(qs, heads, keys, scale, len, scores),
                    }
                }
            }
            for h in 1..heads {
                scores.copy_within(h * padded..h * padded + len, h * len);
            }
            scores.truncate(heads * len);
        };
        let weigh = |probabilities: &[u32], heads: usize, values: &[u16], out: &mut [f32]| {
            let (len, d) = (probabilities.len() / heads, out.len() / heads);
            assert!(values.len() >= len * 2 * d, "values of {len} pairs of positions");
            // SAFETY: the CPU has the features; `out` is heads * 16 * C long and the values exist
            // (above).
            unsafe {
                match (heads, d) {
                    (1, 64) => weigh_block::<1, 4>(probabilities, values, out),
                    (2, 64) => weigh_block::<2, 4>(probabilities, values, out),
                    (3, 64) => weigh_block::<3, 4>(probabilities, values, out),
                    (4, 64) => weigh_block::<4, 4>(probabilities, values, out),
                    (1, 32) => weigh_block::<1, 2>(probabilities, values, out),
                    (1, 128) => weigh_block::<1, 8>(probabilities, values, out),
                    _ => weigh_heads(probabilities, heads, values, out),
                }
            }
        };
        attend($cfg, $items, $qkv, $caches, $rows, $out, Loops { pairs: $pairs, scores: scores_of, weigh })
    }};
}

/// A module's `scores_block::<G, P>` and `weigh_block::<G, C>`, compiled for `$features`, on
/// its `read` (a register of 16 pairs of bf16 values as its `dp` takes them), `read_all` (one
/// pair in every lane) and `dp` (a `vdpbf16ps`, or the same steps).
#[cfg(target_arch = "x86_64")]
macro_rules! dp_blocks {
    ($features:literal) => {
        /// The scores of `G` query heads (`P` pairs each, side by side in `qs`) against the 16
        /// keys of the block at `kt` (`[P][16][2]`), times `scale`: head h's to
        /// `scores[h * stride..][..16]`, each key's in its lane, the bits [`scores_heads`] gives.
        ///
        /// # Safety
        /// The CPU must have the module's features; the block must exist, `qs` hold `G * P`
        /// pairs and each head's 16 scores fit.
        #[inline]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn scores_block<const G: usize, const P: usize>(
            qs: &[u32],
            kt: *const u16,
            scale: f32,
            scores: *mut f32,
            stride: usize,
        ) {
            assert!(qs.len() >= G * P, "{G} heads of {P} pairs");
            let mut sums = [[_mm512_setzero_ps(); CHAINS]; G];
            // CHAINS pairs at a time, each into its own sum (indices the compiler knows, so the
            // sums stay in registers).
            for first in (0..P).step_by(CHAINS) {
                for (c, p) in (first..(first + CHAINS).min(P)).enumerate() {
                    // SAFETY: the block's pair p of its 16 keys exists (the caller's promise).
                    let keys = read(unsafe { _mm512_loadu_si512(kt.add(p * KEY_BLOCK * 2).cast()) });
                    for (h, sums) in sums.iter_mut().enumerate() {
                        sums[c] = dp(sums[c], read_all(qs[h * P + p]), keys);
                    }
                }
            }
            for (h, s) in sums.iter().enumerate() {
                let total = _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3]));
                // SAFETY: head h's 16 scores fit (the caller's promise).
                unsafe { _mm512_storeu_ps(scores.add(h * stride), _mm512_mul_ps(total, _mm512_set1_ps(scale))) };
            }
        }

        /// [`weigh_heads`] for `G` heads of `C` registers of 16 values, every output kept in
        /// its register over the positions, each pair of positions' values loaded once for all
        /// heads (the same sums in the same order).
        ///
        /// # Safety
        /// The CPU must have the module's features; `out` must be `G * 16 * C` long,
        /// `probabilities` `G` runs of the same length, and each pair of positions' values exist.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn weigh_block<const G: usize, const C: usize>(
            probabilities: &[u32],
            values: &[u16],
            out: &mut [f32],
        ) {
            let (len, d) = (probabilities.len() / G, C * LANES);
            let mut acc = [[_mm512_setzero_ps(); C]; G];
            let v = values.as_ptr();
            for j in 0..len {
                // SAFETY: pair j's values exist (the caller's promise).
                let vals: [_; C] =
                    std::array::from_fn(|c| read(unsafe { _mm512_loadu_si512(v.add((j * d + c * LANES) * 2).cast()) }));
                for (g, acc) in acc.iter_mut().enumerate() {
                    let p = read_all(probabilities[g * len + j]);
                    for (acc, v) in acc.iter_mut().zip(&vals) {
                        *acc = dp(*acc, p, *v);
                    }
                }
            }
            for (g, acc) in acc.iter().enumerate() {
                for (c, acc) in acc.iter().enumerate() {
                    // SAFETY: `out` is G * 16 * C long (the caller's promise).
                    unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((g * C + c) * LANES), *acc) };
                }
            }
        }
    };
}

/// [`attend`] on AVX-512 BF16: each `vdpbf16ps` sums a pair of dimensions of 16 keys (or a pair
/// of positions of 16 dimensions of the values) for one head, a block's keys and a pair's values
/// loaded once for all the heads of a group.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;

    use super::*;

    pub fn available() -> bool {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bf16")
                && super::fused::available()
        })
    }

    /// # Safety
    /// The CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
    pub unsafe fn attend_wide(
        cfg: &LlamaConfig,
        items: std::iter::StepBy<std::ops::Range<usize>>,
        qkv: &[f32],
        caches: &[(&[u16], &[u16])],
        rows: &[(usize, usize)],
        out: Out,
    ) {
        // SAFETY: the CPU has the features.
        let pairs = |x: &[f32], out: &mut Vec<u32>| unsafe { pairs_wide(x, out) };
        attend_blocks!(cfg, items, qkv, caches, rows, out, pairs)
    }

    dp_blocks!("avx512f,avx512bf16");

    /// A register of 32 bf16 values as the instruction takes it: 16 pairs.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn read(x: __m512i) -> __m512bh {
        bh(x)
    }

    /// A pair of bf16 values in every lane.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn read_all(pair: u32) -> __m512bh {
        bh(_mm512_set1_epi32(pair as i32))
    }

    /// One `vdpbf16ps`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn dp(acc: __m512, a: __m512bh, b: __m512bh) -> __m512 {
        _mm512_dpbf16_ps(acc, a, b)
    }

    /// [`pairs`], 32 values at a time converted by `vcvtne2ps2bf16` (the same bits).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and BF16.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn pairs_wide(x: &[f32], out: &mut Vec<u32>) {
        let chunks = x.chunks_exact(2 * LANES);
        let rest = chunks.remainder();
        for c in chunks {
            // SAFETY: 32 values exist.
            let both =
                unsafe { _mm512_cvtne2ps_pbh(_mm512_loadu_ps(c[LANES..].as_ptr()), _mm512_loadu_ps(c.as_ptr())) };
            let mut lanes = [0u32; LANES];
            // SAFETY: 16 lanes of 32 bits fit `lanes`.
            unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), std::mem::transmute::<__m512bh, __m512i>(both)) };
            out.extend_from_slice(&lanes);
        }
        pairs(rest, out);
    }

    /// A register of 32 bf16 values, as the instruction takes it.
    #[inline(always)]
    fn bh(x: __m512i) -> __m512bh {
        // SAFETY: both are 64 bytes of plain bits.
        unsafe { std::mem::transmute(x) }
    }
}

/// [`attend`] on AVX-512 without BF16 (Skylake-X, Ice Lake): [`wide`]'s blocks with each
/// `vdpbf16ps` done as [`step`] does it, two fused multiply-adds of the pairs' values widened
/// to f32, 16 lanes at a time (the plain loops' bits, whatever the values).
#[cfg(target_arch = "x86_64")]
mod wide_fma {
    use std::arch::x86_64::*;

    use super::*;

    pub fn available() -> bool {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512f") && super::fused::available())
    }

    /// # Safety
    /// The CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn attend_wide(
        cfg: &LlamaConfig,
        items: std::iter::StepBy<std::ops::Range<usize>>,
        qkv: &[f32],
        caches: &[(&[u16], &[u16])],
        rows: &[(usize, usize)],
        out: Out,
    ) {
        let pairs = |x: &[f32], out: &mut Vec<u32>| pairs(x, out);
        attend_blocks!(cfg, items, qkv, caches, rows, out, pairs)
    }

    dp_blocks!("avx512f");

    /// The second values of 16 pairs of bf16 values, and their first, widened to f32.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn read(x: __m512i) -> (__m512, __m512) {
        let high = _mm512_and_si512(x, _mm512_set1_epi32(0xffff_0000_u32 as i32));
        (_mm512_castsi512_ps(high), _mm512_castsi512_ps(_mm512_slli_epi32::<16>(x)))
    }

    /// A pair of bf16 values, as [`read`] widens them, in every lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn read_all(pair: u32) -> (__m512, __m512) {
        (_mm512_set1_ps(f32::from_bits(pair & 0xffff_0000)), _mm512_set1_ps(f32::from_bits(pair << 16)))
    }

    /// A `vdpbf16ps` step as [`step`] takes it: the second values' product, then the first's.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn dp(acc: __m512, (ah, al): (__m512, __m512), (bh, bl): (__m512, __m512)) -> __m512 {
        _mm512_fmadd_ps(al, bl, _mm512_fmadd_ps(ah, bh, acc))
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
mod tests;
