//! Products of a few rows (the tokens of a few texts, up to a chunk's) by a layer's weights.
//! A short text's product reads every weight for a handful of rows, so it is bound by how fast the
//! weights stream from memory: `gemm` copies the whole matrix into its panel layout on every
//! call, and a strip of columns read from the `[in, out]` matrix reads 128 bytes every 1.5-6 KB.
//! Here the weights are laid out once, at load, in strips of 32 columns, each strip's rows one
//! after another, so a strip streams from memory in order; each thread takes its share of the
//! strips, up to 8 rows of sums held in registers. The strips hold the weights rounded to f16,
//! half the bytes to stream (`vcvtph2ps` widens them as they arrive; the sums are f32): a
//! weight moves by at most 2^-11 of itself, and the embeddings by far less than the tests'
//! tolerances (docs/BENCHMARKS.md gives the figures).

use std::ops::Range;

use crate::pool::Team;

/// Most rows this path takes (a chunk's, [`super::CHUNK_TOKENS`]): beyond them `gemm`'s
/// packing pays for itself.
pub const FEW_ROWS: usize = super::CHUNK_TOKENS;
/// Columns of one strip: two AVX-512 registers of f32.
const STRIP: usize = 32;
/// Rows of sums one pass over a strip holds.
const TILE: usize = 8;

/// Whether the CPU runs this path (AVX-512 F).
#[cfg(target_arch = "x86_64")]
pub fn available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512f"))
}

#[cfg(not(target_arch = "x86_64"))]
pub fn available() -> bool {
    false
}

/// Whether products of `rows` rows run here.
pub fn takes(rows: usize) -> bool {
    rows <= FEW_ROWS && available()
}

/// A `[k, n]` matrix in strips of 32 columns: strip `s` is `k` rows of its 32 values, each the
/// bits of an f16.
pub struct Strips {
    data: Vec<u16>,
    k: usize,
    n: usize,
}

impl Strips {
    /// `w` (`[k, n]`, dense) in strips; `None` when this path cannot run it (no AVX-512, or
    /// columns not a whole number of strips).
    pub fn pack(w: &[f32], k: usize, n: usize) -> Option<Strips> {
        if !available() || !n.is_multiple_of(STRIP) || w.len() != k * n {
            return None;
        }
        let mut data = Vec::with_capacity(k * n);
        for s in 0..n / STRIP {
            for row in w.chunks_exact(n) {
                data.extend(row[s * STRIP..(s + 1) * STRIP].iter().map(|v| half::f16::from_f32(*v).to_bits()));
            }
        }
        Some(Strips { data, k, n })
    }
}

/// Where the threads write: each its own columns of every row.
#[derive(Clone, Copy)]
struct Dst(*mut f32);
// SAFETY: threads write disjoint columns through it (see `matmul`).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

/// `dst[i][j] = Σ_k x[i][k] w[k][j]` for the `m` rows of `x` (dense, `w.k` columns each);
/// `dst` row-major with row stride `dst_rs`. On the threads of `team` (else the caller's), each
/// share a contiguous run of the strips. Panics when there are more than [`FEW_ROWS`] rows or
/// the buffers do not hold the matrices.
pub fn matmul(dst: &mut [f32], dst_rs: usize, x: &[f32], m: usize, w: &Strips, team: Option<&Team>) {
    let (k, n) = (w.k, w.n);
    assert!(m <= FEW_ROWS, "few::matmul: {m} rows");
    assert!(x.len() >= m * k, "few::matmul: the input runs past its buffer");
    assert!(m == 0 || (m - 1) * dst_rs + n <= dst.len(), "few::matmul: the output runs past its buffer");
    let strips = n / STRIP;
    let shares = team.map_or(1, Team::threads).clamp(1, strips.max(1));
    let out = Dst(dst.as_mut_ptr());
    let run = |s: usize| {
        let range = s * strips / shares..(s + 1) * strips / shares;
        // SAFETY: the CPU has AVX-512 F (the strips exist); the reads lie within x and w and
        // the writes within dst (checked above); share s writes only the columns of its strips.
        unsafe { strips_of(out, dst_rs, x, m, w, range) };
    };
    match team {
        Some(team) if shares > 1 => team.run(shares, &run),
        _ => run(0),
    }
}

/// Strips `range` of the product, rows `TILE` at a time.
///
/// # Safety
/// As [`matmul`] checks, and the columns of `range` this call's alone.
unsafe fn strips_of(dst: Dst, dst_rs: usize, x: &[f32], m: usize, w: &Strips, range: Range<usize>) {
    let k = w.k;
    for s in range {
        let strip = w.data[s * k * STRIP..(s + 1) * k * STRIP].as_ptr();
        let mut r = 0;
        while r < m {
            let rows = (m - r).min(TILE);
            let (x, d) = (x[r * k..].as_ptr(), unsafe { dst.0.add(r * dst_rs + s * STRIP) });
            // SAFETY: passed on from the caller.
            unsafe {
                match rows {
                    8 => tile::<8>(d, dst_rs, x, k, strip),
                    7 => tile::<7>(d, dst_rs, x, k, strip),
                    6 => tile::<6>(d, dst_rs, x, k, strip),
                    5 => tile::<5>(d, dst_rs, x, k, strip),
                    4 => tile::<4>(d, dst_rs, x, k, strip),
                    3 => tile::<3>(d, dst_rs, x, k, strip),
                    2 => tile::<2>(d, dst_rs, x, k, strip),
                    _ => tile::<1>(d, dst_rs, x, k, strip),
                }
            }
            r += rows;
        }
    }
}

/// `R` rows of `x` by a strip of 32 columns (f16 bits), into `dst`.
///
/// # Safety
/// The CPU has AVX-512 F; `R` rows of `k` values at `x`, `k` rows of 32 values at `strip`, and
/// `R` rows of stride `dst_rs` with 32 values at `dst` exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile<const R: usize>(dst: *mut f32, dst_rs: usize, x: *const f32, k: usize, strip: *const u16) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for kk in 0..k {
        let half = |at: usize| _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(strip.add(at).cast()) });
        let (w0, w1) = (half(kk * STRIP), half(kk * STRIP + 16));
        for (r, acc) in acc.iter_mut().enumerate() {
            let xv = _mm512_set1_ps(unsafe { *x.add(r * k + kk) });
            acc[0] = _mm512_fmadd_ps(xv, w0, acc[0]);
            acc[1] = _mm512_fmadd_ps(xv, w1, acc[1]);
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        unsafe {
            _mm512_storeu_ps(dst.add(r * dst_rs), acc[0]);
            _mm512_storeu_ps(dst.add(r * dst_rs + 16), acc[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile<const R: usize>(_: *mut f32, _: usize, _: *const f32, _: usize, _: *const u16) {
    unreachable!("there are no strips without AVX-512")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_rows_match_the_plain_sum_of_the_f16_weights_for_every_row_count_and_thread_split() {
        let (k, n) = (40, 96);
        let val = |i: usize| ((i * 2654435761) % 1000) as f32 / 500.0 - 1.0;
        let x: Vec<f32> = (0..64 * k).map(val).collect();
        let w: Vec<f32> = (0..k * n).map(|i| val(i + 7)).collect();
        // The strips hold each weight rounded to f16.
        let half = |v: f32| half::f16::from_f32(v).to_f32();
        let Some(strips) = Strips::pack(&w, k, n) else {
            assert!(!available(), "96 columns are three strips");
            return;
        };
        assert!(Strips::pack(&w[..k * (n - 1)], k, n - 1).is_none(), "95 columns are no whole strips");
        let teams = [Team::new(1, "test").unwrap(), Team::new(2, "test").unwrap(), Team::new(5, "test").unwrap()];
        for m in [1, 2, 7, 8, 9, 16, 17, 64] {
            for team in [None, Some(&teams[0]), Some(&teams[1]), Some(&teams[2])] {
                let rs = n + 3;
                let mut dst = vec![f32::NAN; m * rs];
                matmul(&mut dst, rs, &x, m, &strips, team);
                for i in 0..m {
                    for j in 0..n {
                        let want: f32 = (0..k).map(|kk| x[i * k + kk] * half(w[kk * n + j])).sum();
                        let got = dst[i * rs + j];
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{m} rows, {:?} threads, ({i}, {j}): {got} vs {want}",
                            team.map(Team::threads)
                        );
                    }
                }
            }
        }
    }
}
