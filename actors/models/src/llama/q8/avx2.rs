//! Products on AVX2, for x86-64 CPUs without AVX-512 VNNI (AMD before Zen 4, most Intel client
//! cores): the sums of the portable kernel, eight weight rows to a register.
//!
//! A panel's group of 4 values is 64 bytes, rows 0-7 in its first 32 and rows 8-15 in the next
//! (see [`Q8Matrix`]), so a tile takes one half of a panel. `vpmaddubsw` multiplies unsigned
//! bytes by signed ones and adds each pair into an i16, which would saturate on activations
//! stored with 128 added (2 * 255 * 127). So the activation's own value (its byte with the top
//! bit flipped: -127..=127) takes the weight's sign (`vpsignb`) and multiplies the weight's
//! magnitude (`vpabsb`; -128 reads as 128 unsigned): a pair is at most 2 * 127 * 128 = 32512,
//! exact, and `vpmaddwd` by ones adds the pairs into i32. Those are the block's sums as they
//! are (the VNNI kernel's with its offsets added back), scaled and added as [`super::dot`]
//! does: the same bits.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{BLOCK, Out, PANEL, PANEL_BLOCK, Q8Matrix, Q8Rows};

/// Weight rows a register holds: half a panel.
const HALF: usize = PANEL / 2;

pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
}

/// All activation rows times the weight rows of `panels`, into `out`: four rows a tile (the
/// registers of four sums, four accumulators and four activations, beside the weights), then
/// the rows left.
///
/// # Safety
/// The CPU must have AVX2 ([`available`]); the panels must be within `w` and their columns of
/// `out` this thread's alone.
#[target_feature(enable = "avx2")]
pub unsafe fn product(x: &Q8Rows, w: &Q8Matrix, panels: std::ops::Range<usize>, out: Out) {
    let mut m = 0;
    while m < x.rows {
        let r = (x.rows - m).min(4);
        for p in panels.clone() {
            for h in (0..2).filter(|h| p * PANEL + h * HALF < w.rows) {
                // SAFETY: the caller's promise, and rows m..m + r exist.
                unsafe {
                    match r {
                        4 => tile::<4>(x, m, w, p, h, out),
                        3 => tile::<3>(x, m, w, p, h, out),
                        2 => tile::<2>(x, m, w, p, h, out),
                        _ => tile::<1>(x, m, w, p, h, out),
                    }
                }
            }
        }
        m += r;
    }
}

/// Activation rows `m..m + R` times half `h` of panel `p`, into `out`.
///
/// # Safety
/// As [`product`], and the half must hold a row of `w`.
// Indices name the tile's registers: rows of activations.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2")]
unsafe fn tile<const R: usize>(x: &Q8Rows, m: usize, w: &Q8Matrix, p: usize, h: usize, out: Out) {
    let (cols, blocks) = (x.cols, x.cols / BLOCK);
    let xq = unsafe { x.quants.as_ptr().add(m * cols) };
    let wq = unsafe { w.quants.as_ptr().add(p * blocks * PANEL_BLOCK + h * 32) };
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..blocks {
        let mut ints = [_mm256_setzero_si256(); R];
        for g in 0..BLOCK / 4 {
            let wv = unsafe { _mm256_loadu_si256(wq.add(b * PANEL_BLOCK + g * 64).cast()) };
            let magnitude = _mm256_abs_epi8(wv);
            for r in 0..R {
                // Four activations, their 128 taken back out by flipping each byte's top bit.
                let four = unsafe { xq.add(r * cols + b * BLOCK + g * 4).cast::<u32>().read_unaligned() };
                let xv = _mm256_set1_epi32((four ^ 0x8080_8080) as i32);
                let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xv, wv));
                ints[r] = _mm256_add_epi32(ints[r], _mm256_madd_epi16(pairs, ones));
            }
        }
        let at = (p * blocks + b) * PANEL + h * HALF;
        let ws = unsafe { _mm256_loadu_ps(w.scales.as_ptr().add(at)) };
        for r in 0..R {
            let s = _mm256_mul_ps(_mm256_set1_ps(x.scales[(m + r) * blocks + b]), ws);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(ints[r]), s));
        }
    }
    // Only the rows of the half that exist.
    let first = p * PANEL + h * HALF;
    let valid = (w.rows - first).min(HALF) as i32;
    let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for r in 0..R {
        let at = unsafe { out.ptr.add((m + r) * out.stride + first) };
        unsafe { _mm256_maskstore_ps(at, mask, acc[r]) };
    }
}
