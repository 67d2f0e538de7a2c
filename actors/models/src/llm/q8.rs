//! Matrix products in Q8_0, the format llama.cpp calls `q8_0`: every 32 values share one scale
//! (an f16) and are stored as int8. Weights are kept in it, and activations are quantized to it
//! before each product, so a product is integer dot products of 32 values scaled by two scales,
//! as in llama.cpp and candle.
//!
//! The kernel computes a tile of `R` activation rows by `C` weight rows at once, so every load
//! of weights serves `R` rows of a prompt and every load of activations `C` weight rows. On
//! x86-64 with AVX-512 VNNI one `vpdpbusd` multiplies two blocks of a pair: it takes unsigned
//! bytes on one side, so activations are stored with 128 added, and each weight block carries
//! the `-128 * sum` that takes it back out. Elsewhere a portable loop computes the same sums.
//!
//! A product splits the weight rows among the threads of a [`Team`]; each thread walks its
//! rows in panels small enough to stay in its core's cache while every activation row passes
//! over them.

use half::f16;

use super::team::Team;

/// Values per block, each block with a scale of its own.
pub const BLOCK: usize = 32;
/// Bytes of a Q8_0 block in a GGUF file: the f16 scale, then 32 int8.
const GGML_BLOCK_BYTES: usize = 2 + BLOCK;
/// Weight rows a thread runs all activation rows over before the next: 32 rows of 1536
/// values are 48 KiB, within any core's L2 cache.
const PANEL_ROWS: usize = 32;

/// A weight matrix of `rows` rows of `cols` values (a multiple of [`BLOCK`]), row-major.
#[derive(Clone)]
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    quants: Vec<i8>,
    /// One per block, the f16 scale widened.
    scales: Vec<f32>,
    /// One per block: -128 times the sum of its quants (see the module doc).
    offsets: Vec<i32>,
}

impl std::fmt::Debug for Q8Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Q8Matrix({}x{})", self.rows, self.cols)
    }
}

impl Q8Matrix {
    /// The matrix from the bytes of a GGUF `q8_0` tensor of `rows` rows of `cols`.
    pub fn from_ggml(bytes: &[u8], rows: usize, cols: usize) -> Result<Q8Matrix, String> {
        if !cols.is_multiple_of(BLOCK) {
            return Err(format!("{cols} columns are not whole blocks of {BLOCK}"));
        }
        let blocks = rows * cols / BLOCK;
        if bytes.len() != blocks * GGML_BLOCK_BYTES {
            return Err(format!(
                "{} bytes where {rows}x{cols} in q8_0 take {}",
                bytes.len(),
                blocks * GGML_BLOCK_BYTES
            ));
        }
        let mut quants = Vec::with_capacity(rows * cols);
        let mut scales = Vec::with_capacity(blocks);
        for block in bytes.chunks_exact(GGML_BLOCK_BYTES) {
            scales.push(f16::from_le_bytes([block[0], block[1]]).to_f32());
            quants.extend(block[2..].iter().map(|b| *b as i8));
        }
        Ok(Q8Matrix::from_parts(rows, cols, quants, scales))
    }

    /// Quantizes row-major `values` (`rows` rows of `cols`), rounding as llama.cpp does.
    pub fn quantize(values: &[f32], rows: usize, cols: usize) -> Result<Q8Matrix, String> {
        if !cols.is_multiple_of(BLOCK) {
            return Err(format!("{cols} columns are not whole blocks of {BLOCK}"));
        }
        if values.len() != rows * cols {
            return Err(format!("{} values where {rows}x{cols} take {}", values.len(), rows * cols));
        }
        let mut quants = vec![0i8; values.len()];
        let mut scales = Vec::with_capacity(values.len() / BLOCK);
        for (x, q) in values.chunks_exact(BLOCK).zip(quants.chunks_exact_mut(BLOCK)) {
            scales.push(quantize_block(x, q, |v| v as i8));
        }
        Ok(Q8Matrix::from_parts(rows, cols, quants, scales))
    }

    fn from_parts(rows: usize, cols: usize, quants: Vec<i8>, scales: Vec<f32>) -> Q8Matrix {
        let offsets = quants.chunks_exact(BLOCK).map(|b| -128 * b.iter().map(|q| *q as i32).sum::<i32>()).collect();
        Q8Matrix { rows, cols, quants, scales, offsets }
    }

    /// The matrices' rows one after another, in one matrix: products of several matrices with
    /// the same input (query, key and value) then run as one.
    pub fn stack(parts: &[Q8Matrix]) -> Result<Q8Matrix, String> {
        let cols = parts.first().map_or(0, |p| p.cols);
        if let Some(p) = parts.iter().find(|p| p.cols != cols) {
            return Err(format!("stacking matrices of {cols} and {} columns", p.cols));
        }
        Ok(Q8Matrix {
            rows: parts.iter().map(|p| p.rows).sum(),
            cols,
            quants: parts.iter().flat_map(|p| p.quants.iter().copied()).collect(),
            scales: parts.iter().flat_map(|p| p.scales.iter().copied()).collect(),
            offsets: parts.iter().flat_map(|p| p.offsets.iter().copied()).collect(),
        })
    }

    /// Row `r` as f32, into `out` (`cols` long).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (q, s) = (&self.quants[r * self.cols..(r + 1) * self.cols], &self.scales[r * self.cols / BLOCK..]);
        for ((o, q), s) in out.chunks_exact_mut(BLOCK).zip(q.chunks_exact(BLOCK)).zip(s) {
            for (o, q) in o.iter_mut().zip(q) {
                *o = *q as f32 * s;
            }
        }
    }
}

/// Quantizes one block into `q` (through `store`, given values in -127..=127) and returns its
/// scale, rounded to f16 as it is stored in llama.cpp.
#[inline(always)]
fn quantize_block<T>(x: &[f32], q: &mut [T], store: impl Fn(i32) -> T) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d == 0.0 { 0.0 } else { 1.0 / d };
    for (q, x) in q.iter_mut().zip(x) {
        *q = store((x * inv).round() as i32);
    }
    f16::from_f32(d).to_f32()
}

/// Activation rows quantized for a product, their buffers kept between uses.
#[derive(Default)]
pub struct Q8Rows {
    rows: usize,
    cols: usize,
    /// Each quant plus 128, as the VNNI kernel takes them.
    quants: Vec<u8>,
    scales: Vec<f32>,
}

impl Q8Rows {
    /// Quantizes row-major `x` of `cols` columns (a multiple of [`BLOCK`]) into `self`.
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        assert!(cols.is_multiple_of(BLOCK) && x.len().is_multiple_of(cols), "{} values in rows of {cols}", x.len());
        self.rows = x.len() / cols;
        self.cols = cols;
        self.quants.resize(x.len(), 0);
        self.scales.clear();
        #[cfg(target_arch = "x86_64")]
        if wide::available() {
            // SAFETY: the CPU has the features `quantize_rows_wide` is compiled for.
            return unsafe { wide::quantize_rows(x, &mut self.quants, &mut self.scales) };
        }
        quantize_rows(x, &mut self.quants, &mut self.scales);
    }
}

/// Quantizes `x` block by block into `quants` (offset by 128) and `scales`.
#[inline(always)]
fn quantize_rows(x: &[f32], quants: &mut [u8], scales: &mut Vec<f32>) {
    for (x, q) in x.chunks_exact(BLOCK).zip(quants.chunks_exact_mut(BLOCK)) {
        scales.push(quantize_block(x, q, |v| (v + 128) as u8));
    }
}

/// The f32 loops of a forward pass compiled for AVX-512 as well as for the baseline the
/// binary targets, chosen once at run time. The same operations in the same order (Rust never
/// reorders or fuses float arithmetic on its own), so the same results, bit for bit; only
/// wider registers and rounding in one instruction instead of a call.
#[cfg(target_arch = "x86_64")]
pub mod wide {
    use std::sync::OnceLock;

    pub fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx2")
        })
    }

    /// [`super::quantize_rows`], for AVX-512.
    ///
    /// # Safety
    /// The CPU must have the features [`available`] checks.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2,sse4.1")]
    pub unsafe fn quantize_rows(x: &[f32], quants: &mut [u8], scales: &mut Vec<f32>) {
        super::quantize_rows(x, quants, scales)
    }
}

/// Where the threads of a job write, each to places no other thread writes.
#[derive(Clone, Copy)]
pub struct Out {
    pub ptr: *mut f32,
    /// Floats per row.
    pub stride: usize,
}

// SAFETY: the threads of a job write disjoint places (each user says which).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    pub fn new(out: &mut [f32], stride: usize) -> Out {
        Out { ptr: out.as_mut_ptr(), stride }
    }

    /// `len` floats from `row`, `col`.
    ///
    /// # Safety
    /// They must lie within the output, and no other thread may use them meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, row: usize, col: usize, len: usize) -> &mut [f32] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(row * self.stride + col), len) }
    }
}

/// `out[m * w.rows() + n]` = the dot product of activation row `m` and weight row `n`, for
/// every row of each, on the threads of `team`.
pub fn matmul(team: &Team, x: &Q8Rows, w: &Q8Matrix, out: &mut [f32]) {
    assert_eq!(x.cols, w.cols, "activations of {} columns times weights of {}", x.cols, w.cols);
    assert_eq!(out.len(), x.rows * w.rows, "output of {} for {}x{}", out.len(), x.rows, w.rows);
    let out = Out::new(out, w.rows);
    // Equal shares of rows, in multiples of 4 (the widest tile).
    let share = w.rows.div_ceil(team.threads()).next_multiple_of(4);
    // SAFETY of the writes: thread t writes only the columns of its rows.
    team.run(&|t| {
        let rows = (t * share).min(w.rows)..((t + 1) * share).min(w.rows);
        for panel in rows.clone().step_by(PANEL_ROWS) {
            product(x, w, panel..(panel + PANEL_ROWS).min(rows.end), out);
        }
    });
}

/// All activation rows times weight rows `rows`, tile by tile.
fn product(x: &Q8Rows, w: &Q8Matrix, rows: std::ops::Range<usize>, out: Out) {
    #[cfg(target_arch = "x86_64")]
    if vnni::available() {
        let mut m = 0;
        while m < x.rows {
            let mut n = rows.start;
            if x.rows - m >= 4 {
                while rows.end - n >= 4 {
                    // SAFETY: the CPU has the kernel's features, and the tile is within x, w and out.
                    unsafe { vnni::tile::<4, 4>(x, m, w, n, out) };
                    n += 4;
                }
                for n in n..rows.end {
                    unsafe { vnni::tile::<4, 1>(x, m, w, n, out) };
                }
                m += 4;
            } else {
                while rows.end - n >= 4 {
                    unsafe { vnni::tile::<1, 4>(x, m, w, n, out) };
                    n += 4;
                }
                for n in n..rows.end {
                    unsafe { vnni::tile::<1, 1>(x, m, w, n, out) };
                }
                m += 1;
            }
        }
        return;
    }
    for m in 0..x.rows {
        for n in rows.clone() {
            // SAFETY: (m, n) is within out, and this thread's alone.
            unsafe { *out.ptr.add(m * out.stride + n) = dot(x, m, w, n) };
        }
    }
}

/// The portable kernel: one activation row times one weight row.
fn dot(x: &Q8Rows, m: usize, w: &Q8Matrix, n: usize) -> f32 {
    let (cols, blocks) = (x.cols, x.cols / BLOCK);
    let xq = &x.quants[m * cols..(m + 1) * cols];
    let wq = &w.quants[n * cols..(n + 1) * cols];
    let scales = x.scales[m * blocks..(m + 1) * blocks].iter().zip(&w.scales[n * blocks..(n + 1) * blocks]);
    let mut sum = 0.0f32;
    for ((xq, wq), (xs, ws)) in xq.chunks_exact(BLOCK).zip(wq.chunks_exact(BLOCK)).zip(scales) {
        let d: i32 = xq.iter().zip(wq).map(|(x, w)| (*x as i32 - 128) * *w as i32).sum();
        sum += d as f32 * (xs * ws);
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    use super::{BLOCK, Out, Q8Matrix, Q8Rows};

    pub fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
        })
    }

    /// Lanes 0-7 take element 0, lanes 8-15 element 1: a block's 8 lanes share its scale.
    #[target_feature(enable = "avx512f")]
    fn spread() -> __m512i {
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
    }

    /// The scales of blocks `b` and `b + 1` (or `b` alone), each over its block's 8 lanes.
    #[target_feature(enable = "avx512f")]
    unsafe fn scales(p: *const f32, two: bool) -> __m512 {
        let v = if two { unsafe { _mm_castpd_ps(_mm_load_sd(p.cast())) } } else { unsafe { _mm_load_ss(p) } };
        _mm512_permutexvar_ps(spread(), _mm512_castps128_ps512(v))
    }

    /// The offsets of blocks `b` and `b + 1` (or `b` alone) in the first lane of each block.
    #[target_feature(enable = "avx512f")]
    unsafe fn offsets(p: *const i32, two: bool) -> __m512i {
        let v = if two { unsafe { _mm_loadl_epi64(p.cast()) } } else { _mm_cvtsi32_si128(unsafe { *p }) };
        _mm512_maskz_permutexvar_epi32(0x0101, spread(), _mm512_castsi128_si512(v))
    }

    /// Two blocks of 32 bytes (or one, the rest zero).
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn bytes(p: *const u8, two: bool) -> __m512i {
        if two {
            unsafe { _mm512_loadu_si512(p.cast()) }
        } else {
            unsafe { _mm512_maskz_loadu_epi8(u32::MAX as u64, p.cast()) }
        }
    }

    /// Activation rows `m..m + R` times weight rows `n..n + C`, into `out`.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VNNI ([`available`]); the rows must exist and the
    /// tile of `out` be this thread's alone.
    // Indices name the tile's registers: rows of activations by columns of weights.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn tile<const R: usize, const C: usize>(x: &Q8Rows, m: usize, w: &Q8Matrix, n: usize, out: Out) {
        let (cols, blocks) = (x.cols, x.cols / BLOCK);
        let xq = unsafe { x.quants.as_ptr().add(m * cols) };
        let xs = unsafe { x.scales.as_ptr().add(m * blocks) };
        let wq = unsafe { w.quants.as_ptr().add(n * cols).cast::<u8>() };
        let ws = unsafe { w.scales.as_ptr().add(n * blocks) };
        let wo = unsafe { w.offsets.as_ptr().add(n * blocks) };
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let mut b = 0;
        while b < blocks {
            let two = b + 1 < blocks;
            let mut xv = [_mm512_setzero_si512(); R];
            let mut xsv = [_mm512_setzero_ps(); R];
            for r in 0..R {
                xv[r] = unsafe { bytes(xq.add(r * cols + b * BLOCK), two) };
                xsv[r] = unsafe { scales(xs.add(r * blocks + b), two) };
            }
            for c in 0..C {
                let wv = unsafe { bytes(wq.add(c * cols + b * BLOCK), two) };
                let wsv = unsafe { scales(ws.add(c * blocks + b), two) };
                let wov = unsafe { offsets(wo.add(c * blocks + b), two) };
                for r in 0..R {
                    let d = _mm512_dpbusd_epi32(wov, xv[r], wv);
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(xsv[r], wsv), acc[r][c]);
                }
            }
            b += 2;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, acc) in acc.iter().enumerate() {
                unsafe { *out.ptr.add((m + r) * out.stride + n + c) = _mm512_reduce_add_ps(*acc) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in about -1..1 with a few larger ones, as activations have.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let v = (s % 20_000) as f32 / 10_000.0 - 1.0;
                if i % 97 == 0 { v * 8.0 } else { v }
            })
            .collect()
    }

    /// The product computed plainly from the quantized values, in f64.
    fn reference(x: &Q8Rows, w: &Q8Matrix) -> Vec<f32> {
        let blocks = x.cols / BLOCK;
        let mut out = vec![0.0; x.rows * w.rows];
        for m in 0..x.rows {
            for n in 0..w.rows {
                let mut sum = 0.0f64;
                for k in 0..x.cols {
                    let (xb, wb) = (m * blocks + k / BLOCK, n * blocks + k / BLOCK);
                    let xv = (x.quants[m * x.cols + k] as f64 - 128.0) * x.scales[xb] as f64;
                    sum += xv * w.quants[n * x.cols + k] as f64 * w.scales[wb] as f64;
                }
                out[m * w.rows + n] = sum as f32;
            }
        }
        out
    }

    #[test]
    fn products_of_every_tile_shape_and_an_odd_block_count_match_the_plain_sum() {
        // 7 rows exercise the 4-row tiles and the single rows after them; 37 weight rows the
        // 4-wide tiles, the single ones, two panels and two threads' shares; 96 columns are 3
        // blocks, the last alone.
        for (rows, wrows, cols) in [(7, 37, 96), (1, 9, 64), (4, 4, 32), (13, 70, 576), (5, 8, 1536)] {
            let w = Q8Matrix::quantize(&values(wrows * cols, 1), wrows, cols).unwrap();
            let mut x = Q8Rows::default();
            x.quantize(&values(rows * cols, 2), cols);
            let want = reference(&x, &w);
            let team = Team::new(2, "test").unwrap();
            let mut got = vec![f32::NAN; want.len()];
            matmul(&team, &x, &w, &mut got);
            for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                assert!((g - r).abs() <= 1e-4 * r.abs().max(1.0), "{rows}x{wrows}x{cols} [{i}]: {g} vs {r}");
            }
            // The portable kernel gives the same sums.
            for m in 0..rows {
                for n in 0..wrows {
                    let (g, r) = (dot(&x, m, &w, n), want[m * wrows + n]);
                    assert!((g - r).abs() <= 1e-4 * r.abs().max(1.0), "portable [{m},{n}]: {g} vs {r}");
                }
            }
        }
    }

    #[test]
    fn ggml_bytes_read_back_as_their_values_and_stacking_keeps_rows_in_order() {
        let mut bytes = Vec::new();
        for (scale, base) in [(0.5f32, 1i8), (0.25, -3)] {
            bytes.extend(f16::from_f32(scale).to_le_bytes());
            bytes.extend((0..32).map(|i| (base + i as i8) as u8));
        }
        let a = Q8Matrix::from_ggml(&bytes, 2, 32).unwrap();
        let mut row = [0.0; 32];
        a.dequantize_row(1, &mut row);
        assert_eq!(row[0], -0.75);
        assert_eq!(row[31], 7.0);
        assert!(Q8Matrix::from_ggml(&bytes[1..], 2, 32).unwrap_err().contains("bytes"));
        let b = Q8Matrix::quantize(&values(32, 3), 1, 32).unwrap();
        let s = Q8Matrix::stack(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(s.rows, 3);
        s.dequantize_row(2, &mut row);
        let mut want = [0.0; 32];
        b.dequantize_row(0, &mut want);
        assert_eq!(row, want);
        // Quantizing keeps each value within half a step of its block's scale.
        let v = values(64, 4);
        let q = Q8Matrix::quantize(&v, 1, 64).unwrap();
        let mut back = [0.0; 64];
        q.dequantize_row(0, &mut back);
        for (i, (a, b)) in v.iter().zip(&back).enumerate() {
            assert!((a - b).abs() <= q.scales[i / 32] * 0.51, "[{i}] {a} -> {b}");
        }
    }
}
