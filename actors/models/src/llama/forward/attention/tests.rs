//! The paths of attention against its definition: the plain loops.

use super::*;

/// Values in about -1..1, from a seed.
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9).max(1);
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect()
}

/// `len` keys of `d` values (each row one key) in the blocks attention scores.
fn key_blocks(keys: &[Vec<f32>], d: usize) -> Vec<u16> {
    let mut run = vec![0u16; key_values(keys.len(), d)];
    for (j, key) in keys.iter().enumerate() {
        for (k, v) in key.iter().enumerate() {
            run[j / KEY_BLOCK * KEY_BLOCK * d + (k / 2 * KEY_BLOCK + j % KEY_BLOCK) * 2 + k % 2] = narrow(*v);
        }
    }
    run
}

/// `len` values of `d` each, in pairs of positions.
fn value_pairs(vals: &[Vec<f32>], d: usize) -> Vec<u16> {
    let mut run = vec![0u16; value_len(vals.len(), d)];
    for (j, v) in vals.iter().enumerate() {
        for (k, v) in v.iter().enumerate() {
            run[(j / 2 * d + k) * 2 + j % 2] = narrow(*v);
        }
    }
    run
}

fn query_pairs(qs: &[f32], d: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for q in qs.chunks_exact(d) {
        pairs(q, &mut out);
    }
    out
}

/// `len` keys and values of `d` (keys times `keys_by`, values times `values_by`) and the
/// queries of three heads (times `keys_by` too), as attention holds them.
fn block_inputs(d: usize, len: usize, keys_by: f32, values_by: f32) -> (Vec<u16>, Vec<u16>, Vec<u32>) {
    let scaled = |n, seed, by: f32| values(n, seed).iter().map(|v| v * by).collect::<Vec<_>>();
    let keys = key_blocks(&(0..len).map(|j| scaled(d, 500 + j as u32, keys_by)).collect::<Vec<_>>(), d);
    let vals = value_pairs(&(0..len).map(|j| scaled(d, 700 + j as u32, values_by)).collect::<Vec<_>>(), d);
    (keys, vals, query_pairs(&scaled(3 * d, 11, 3.0 * keys_by), d))
}

#[test]
fn scores_and_weights_are_the_bf16_sums_of_the_rounded_values() {
    // Rounding: ties to even, subnormals to zero, the largest values to infinity.
    assert_eq!(narrow(1.0 + 1.0 / 256.0), 0x3f80);
    assert_eq!(narrow(1.0 + 3.0 / 256.0), 0x3f82);
    assert_eq!([narrow(1e-39), narrow(-3e-40), narrow(f32::MAX)], [0, 0x8000, 0x7f80]);
    assert_eq!(narrow(2.5), half::bf16::from_f32(2.5).to_bits());
    let (d, len) = (64, 37);
    let keys: Vec<Vec<f32>> = (0..len).map(|j| values(d, 100 + j as u32)).collect();
    let run = key_blocks(&keys, d);
    let q = values(d, 7).iter().map(|v| v * 3.0).collect::<Vec<_>>();
    let mut scores = Vec::new();
    scores_heads(&query_pairs(&q, d), 1, &run, 0.125, len, &mut scores);
    let rounded = |v: f32| half::bf16::from_f32(v).to_f32();
    for j in [0, 15, 16, 36] {
        let exact: f32 = (0..d).map(|k| rounded(q[k]) * rounded(keys[j][k])).sum::<f32>() * 0.125;
        assert!((scores[j] - exact).abs() < 1e-4, "key {j}: {} against {exact}", scores[j]);
    }
    // Weighted values: 13 positions (an odd count, the last pair half empty).
    let vals: Vec<Vec<f32>> = (0..len).map(|j| values(d, 300 + j as u32)).collect();
    let run = value_pairs(&vals, d);
    let p: Vec<f32> = values(13, 9).iter().map(|v| v.abs() / 13.0).collect();
    let mut probabilities = Vec::new();
    pairs(&p, &mut probabilities);
    let mut out = [0.0; 64];
    weigh_heads(&probabilities, 1, &run, &mut out);
    for k in [0, 5, 63] {
        let exact: f32 = (0..13).map(|j| rounded(p[j]) * rounded(vals[j][k])).sum();
        assert!((out[k] - exact).abs() < 1e-5, "value {k}: {} against {exact}", out[k]);
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn the_instruction_gives_the_plain_loops_bits() {
    use std::arch::x86_64::*;
    if !wide::available() {
        return;
    }
    // One instruction against `step`, lane by lane: values from 1e-6 to 3 (their products
    // and sums normal), and where a product is subnormal the instruction makes it zero.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn instruction(acc: &[f32; 16], a: &[u32; 16], b: &[u32; 16]) -> [f32; 16] {
        let load = |x: &[u32; 16]| unsafe { std::mem::transmute(_mm512_loadu_si512(x.as_ptr().cast())) };
        let sum = _mm512_dpbf16_ps(unsafe { _mm512_loadu_ps(acc.as_ptr()) }, load(a), load(b));
        let mut out = [0.0; 16];
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sum) };
        out
    }
    let scaled = |v: f32, i: usize| v * [3.0, 1e-3, 1e-6][i % 3];
    let pair = |x: f32, y: f32| u32::from(narrow(x)) | u32::from(narrow(y)) << 16;
    for round in 0..200u32 {
        let v = values(16 * 5, round);
        let acc: [f32; 16] = std::array::from_fn(|l| scaled(v[l], l + round as usize));
        let a: [u32; 16] = std::array::from_fn(|l| pair(scaled(v[16 + l], l), scaled(v[32 + l], l + 1)));
        let b: [u32; 16] = std::array::from_fn(|l| pair(scaled(v[48 + l], l + 2), v[64 + l]));
        // SAFETY: the CPU has the features (checked above).
        let got = unsafe { instruction(&acc, &a, &b) };
        for l in 0..16 {
            assert_eq!(got[l].to_bits(), step(acc[l], a[l], b[l]).to_bits(), "round {round}, lane {l}");
        }
    }
    let tiny = [pair(1e-20, 0.0); 16];
    // SAFETY: as above.
    let flushed = unsafe { instruction(&[0.0; 16], &tiny, &tiny) };
    assert_eq!((flushed[0], step(0.0, tiny[0], tiny[0]) > 0.0), (0.0, true));
    // 32 values at a time converted as one by one, rounding ties, subnormals, NaN and the
    // largest values among them.
    let mut x = values(75, 3);
    x[..8].copy_from_slice(&[1e-39, -3e-40, f32::NAN, f32::MAX, -f32::MAX, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, 0.0]);
    let (mut wide, mut plain) = (Vec::new(), Vec::new());
    // SAFETY: the CPU has the features (checked above).
    unsafe { wide::pairs_wide(&x, &mut wide) };
    pairs(&x, &mut plain);
    assert_eq!(wide, plain);
    // Whole blocks of keys and runs of values, three heads of a group and one alone.
    // SAFETY: the CPU has the features (checked above).
    let (probabilities, vals, fast) =
        unsafe { blocks_match_the_loops(wide::scores_block::<3, 32>, wide::weigh_block::<3, 4>, 1.0, 1.0) };
    let len = 37usize;
    let (mut one, mut alone) = ([0.0; 64], [0.0; 64]);
    let second = &probabilities[len.div_ceil(2)..2 * len.div_ceil(2)];
    // SAFETY: as above.
    unsafe { wide::weigh_block::<1, 4>(second, &vals, &mut one) };
    weigh_heads(second, 1, &vals, &mut alone);
    assert_eq!(one.map(f32::to_bits), alone.map(f32::to_bits));
    assert_eq!(&fast[64..128], &one[..]);
}

#[test]
#[cfg(target_arch = "x86_64")]
fn the_fma_blocks_give_the_plain_loops_bits_even_below_the_smallest_normal() {
    if !wide_fma::available() {
        return;
    }
    // Plain values, then keys and queries of about 1e-20 (products below 1e-38) and values
    // of about 1e-37 (weighted, below it too): no step flushes here, as none in the loops.
    for (keys_by, values_by) in [(1.0, 1.0), (1e-20, 1e-37)] {
        // SAFETY: the CPU has the features (checked above).
        unsafe {
            blocks_match_the_loops(wide_fma::scores_block::<3, 32>, wide_fma::weigh_block::<3, 4>, keys_by, values_by)
        };
    }
}

/// A path's `scores_block::<3, 32>` and `weigh_block::<3, 4>` against the plain loops on
/// [`block_inputs`] of 37 positions of 64 (keys and values scaled by `keys_by` and
/// `values_by`), bit for bit; returns the probabilities they weighed, the values and the
/// weighted values.
///
/// # Safety
/// The CPU must have the blocks' features.
unsafe fn blocks_match_the_loops(
    scores_block: unsafe fn(&[u32], *const u16, f32, *mut f32, usize),
    weigh_block: unsafe fn(&[u32], &[u16], &mut [f32]),
    keys_by: f32,
    values_by: f32,
) -> (Vec<u32>, Vec<u16>, [f32; 192]) {
    let (d, len) = (64, 37usize);
    let padded = len.div_ceil(KEY_BLOCK) * KEY_BLOCK;
    let (keys, vals, qs) = block_inputs(d, len, keys_by, values_by);
    let mut fast = vec![0.0; 3 * padded];
    for b in (0..len).step_by(KEY_BLOCK) {
        // SAFETY: the CPU has the features (the caller's promise); the block exists and each
        // head's 16 scores from b fit in its padded run.
        unsafe { scores_block(&qs, keys[b * d..].as_ptr(), 0.125, fast[b..].as_mut_ptr(), padded) };
    }
    let mut plain = Vec::new();
    scores_heads(&qs, 3, &keys, 0.125, len, &mut plain);
    assert!(plain.iter().any(|s| s.abs() < 1e-38 && *s != 0.0) == (keys_by < 1.0), "{:?}", &plain[..4]);
    for h in 0..3 {
        let fast: Vec<u32> = fast[h * padded..h * padded + len].iter().map(|s| s.to_bits()).collect();
        let plain: Vec<u32> = plain[h * len..(h + 1) * len].iter().map(|s| s.to_bits()).collect();
        assert_eq!(fast, plain, "head {h}, keys times {keys_by}");
    }
    let mut probabilities = Vec::new();
    for s in plain.chunks_exact_mut(len) {
        softmax(s);
        pairs(s, &mut probabilities);
    }
    let (mut fast, mut slow) = ([0.0; 192], [0.0; 192]);
    // SAFETY: as above; 19 pairs of positions of 64 values exist.
    unsafe { weigh_block(&probabilities, &vals, &mut fast) };
    weigh_heads(&probabilities, 3, &vals, &mut slow);
    assert_eq!(fast.map(f32::to_bits), slow.map(f32::to_bits), "values times {values_by}");
    (probabilities, vals, fast)
}
