//! Products of many rows on AVX-512 VNNI (see [`super::matmul`]): `vpdpbusd` multiplies 4
//! activations, broadcast, by a panel's 16 rows' 4 values.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{BLOCK, CHUNK_PANELS, Out, PANEL, PANEL_BLOCK, Q8Matrix, Q8Rows};

pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    })
}

/// Block `b`'s sums `ints` (without their offsets) of activation row `m` and panel `p`,
/// scaled and added to `acc` as [`super::dot`] does.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn scale(x: &Q8Rows, m: usize, w: &Q8Matrix, p: usize, b: usize, ints: __m512i, acc: __m512) -> __m512 {
    let blocks = x.cols / BLOCK;
    let at = (p * blocks + b) * PANEL;
    let ints = _mm512_add_epi32(ints, unsafe { _mm512_loadu_si512(w.offsets.as_ptr().add(at).cast()) });
    let s =
        _mm512_mul_ps(_mm512_set1_ps(x.scales[m * blocks + b]), unsafe { _mm512_loadu_ps(w.scales.as_ptr().add(at)) });
    _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(ints), s))
}

/// `acc`, the sums of activation row `m` and panel `p`, into `out` (only the panel's rows
/// that exist).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn store(w: &Q8Matrix, m: usize, p: usize, acc: __m512, out: Out) {
    let valid = (w.rows - p * PANEL).min(PANEL);
    let at = unsafe { out.ptr.add(m * out.stride + p * PANEL) };
    unsafe { _mm512_mask_storeu_ps(at, ((1u32 << valid) - 1) as u16, acc) };
}

/// Activation rows `m..m + R` times the weight rows of `panels`, `C` panels a tile and one
/// at a time after them; with `fetch`, the next share's weights are fetched meanwhile (see
/// [`tile`]).
///
/// # Safety
/// As [`tile`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tiles<const R: usize, const C: usize, const S: usize>(
    x: &Q8Rows,
    m: usize,
    w: &Q8Matrix,
    panels: std::ops::Range<usize>,
    out: Out,
    fetch: bool,
) {
    let mut p = panels.start;
    while panels.end - p >= C {
        unsafe { tile::<R, C, S>(x, m, w, p, out, fetch) };
        p += C;
    }
    for p in p..panels.end {
        unsafe { tile::<R, 1, S>(x, m, w, p, out, fetch) };
    }
}

/// Activation rows `m..m + R` times the weight rows of panels `p..p + C`, into `out`.
///
/// With `fetch` (every group of rows a share runs, unless AMX read the weights already),
/// each line of weights, scales and offsets it
/// reads has the line a share further on fetched into L2, so the next share's weights come
/// from memory while this one's are multiplied. Without it a pass waits for the weights
/// and then multiplies them (a pass of one generated row took about as long as reading the
/// weights, and each row added its products on top; docs/BENCHMARKS.md). Prefetches do not
/// fault, and past the matrix's end they only fetch what is not needed.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI ([`available`]); the rows must exist and the
/// tile of `out` be this thread's alone.
// Indices name the tile's registers: rows of activations by panels of weights.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile<const R: usize, const C: usize, const S: usize>(
    x: &Q8Rows,
    m: usize,
    w: &Q8Matrix,
    p: usize,
    out: Out,
    fetch: bool,
) {
    let (cols, blocks) = (x.cols, x.cols / BLOCK);
    let xq = unsafe { x.quants.as_ptr().add(m * cols) };
    let wq = unsafe { w.quants.as_ptr().add(p * blocks * PANEL_BLOCK) };
    // A share further on: its quants' bytes, and its scales and offsets (one of each per
    // row and block, so a BLOCK-th as many).
    let ahead = CHUNK_PANELS * blocks * PANEL_BLOCK;
    let fetch_scales = |at: usize| {
        let at = at + ahead / BLOCK;
        _mm_prefetch::<_MM_HINT_T1>(w.scales.as_ptr().wrapping_add(at).cast());
        _mm_prefetch::<_MM_HINT_T1>(w.offsets.as_ptr().wrapping_add(at).cast());
    };
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for b in 0..blocks {
        // `S` sums per output, of every `S`th group, so more of them run at once where the
        // registers allow (integer sums: the same whatever `S`).
        let mut ints = [[[_mm512_setzero_si512(); S]; C]; R];
        for g in 0..BLOCK / 4 {
            let mut xv = [_mm512_setzero_si512(); R];
            for r in 0..R {
                xv[r] =
                    _mm512_set1_epi32(unsafe { xq.add(r * cols + b * BLOCK + g * 4).cast::<i32>().read_unaligned() });
            }
            for c in 0..C {
                let at = (c * blocks + b) * PANEL_BLOCK + g * 64;
                if fetch {
                    _mm_prefetch::<_MM_HINT_T1>(wq.wrapping_add(at + ahead).cast());
                    if g == 0 {
                        fetch_scales(((p + c) * blocks + b) * PANEL);
                    }
                }
                let wv = unsafe { _mm512_loadu_si512(wq.add(at).cast()) };
                for r in 0..R {
                    ints[r][c][g % S] = _mm512_dpbusd_epi32(ints[r][c][g % S], xv[r], wv);
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let sum = ints[r][c][1..].iter().fold(ints[r][c][0], |a, b| _mm512_add_epi32(a, *b));
                acc[r][c] = unsafe { scale(x, m + r, w, p + c, b, sum, acc[r][c]) };
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            unsafe { store(w, m + r, p + c, acc[r][c], out) };
        }
    }
}
