//! Matrix products in Q8_0, the format llama.cpp calls `q8_0`: every 32 values share one scale
//! (an f16) and are stored as int8. Weights are kept in it, and activations are quantized to it
//! before each product, so a product is integer dot products of 32 values scaled by two scales,
//! as in llama.cpp and candle.
//!
//! Weights are kept in panels of 16 rows side by side (see [`Q8Matrix`]), so one AVX-512
//! register holds one sum for each of a panel's 16 rows. On x86-64 with AVX-512 VNNI a kernel
//! computes a tile of `R` activation rows by `C` panels: `vpdpbusd` multiplies 4 activations,
//! broadcast, by the panel's 16 rows' 4 values. It takes unsigned bytes on one side, so
//! activations are stored with 128 added, and each weight block carries the `-128 * sum` that
//! takes it back out. Where the CPU has AMX (Intel since Sapphire Rapids), products of 32 rows
//! or more run on its tiles, 32 rows by 2 panels a block at a time. On x86-64 without VNNI,
//! AVX2 computes them 8 rows of a panel at a time ([`avx2`]). Elsewhere a portable loop computes
//! the same sums. All of them give the same bits (see [`matmul`]).
//!
//! A product cuts the panels into shares small enough to stay in a core's cache while every
//! activation row passes over them; the threads of a [`Team`] take shares until none is left.

use half::f16;

use crate::pool::Team;

pub mod bf16;

/// Values per block, each block with a scale of its own.
pub const BLOCK: usize = 32;
/// Bytes of a Q8_0 block in a GGUF file: the f16 scale, then 32 int8.
const GGML_BLOCK_BYTES: usize = 2 + BLOCK;
/// Weight rows stored side by side: one output value each in the 16 lanes of an AVX-512
/// register, and the 16 columns of an AMX tile.
pub const PANEL: usize = 16;
/// Bytes of one block of a panel.
const PANEL_BLOCK: usize = PANEL * BLOCK;
/// Panels of one share of a product (see [`Team::run`]): the thread that takes it runs all
/// activation rows over them (64 rows of 1536 values are 96 KiB, within any recent core's L2
/// cache). Even, so AMX's pairs of panels never straddle two shares.
const CHUNK_PANELS: usize = 4;

/// A weight matrix of `rows` rows of `cols` values (a multiple of [`BLOCK`]), kept in panels
/// of [`PANEL`] rows: panel by panel and block by block, each block's 32 values as 8 groups
/// of 4, and each group as the panel's 16 rows side by side (`[group][row][4]`, 512 bytes).
/// That is the layout `vpdpbusd` takes when one group of 4 activations is broadcast, and the
/// one AMX's `tdpbusd` takes for its second operand. Rows past `rows` in the last panel are
/// zero.
#[derive(Clone)]
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    quants: Vec<i8>,
    /// One per block and row, `[panel][block][row]`: the f16 scale widened.
    scales: Vec<f32>,
    /// One per block and row, as `scales`: -128 times the sum of its quants (see the module
    /// doc).
    offsets: Vec<i32>,
    /// The same weights in bf16 for prompt rows, where AMX-BF16 runs them ([`Self::with_bf16`]).
    bf16: Option<bf16::Weights>,
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
        Ok(Q8Matrix::from_rows(rows, cols, &quants, &scales))
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
        Ok(Q8Matrix::from_rows(rows, cols, &quants, &scales))
    }

    /// The matrix of row-major `quants` and their `scales` (one per block), laid out in panels.
    fn from_rows(rows: usize, cols: usize, quants: &[i8], scales: &[f32]) -> Q8Matrix {
        let (blocks, panels) = (cols / BLOCK, rows.div_ceil(PANEL));
        let mut m = Q8Matrix {
            rows,
            cols,
            quants: vec![0; panels * blocks * PANEL_BLOCK],
            scales: vec![0.0; panels * blocks * PANEL],
            offsets: vec![0; panels * blocks * PANEL],
            bf16: None,
        };
        for (n, (q, s)) in quants.chunks_exact(cols).zip(scales.chunks_exact(blocks)).enumerate() {
            for (b, (q, s)) in q.chunks_exact(BLOCK).zip(s).enumerate() {
                let at = m.at(n, b);
                m.scales[at] = *s;
                m.offsets[at] = -128 * q.iter().map(|q| *q as i32).sum::<i32>();
                for (k, q) in q.iter().enumerate() {
                    let at = m.quant(n, b, k);
                    m.quants[at] = *q;
                }
            }
        }
        m
    }

    /// Where row `n`'s scale and offset of block `b` are.
    fn at(&self, n: usize, b: usize) -> usize {
        ((n / PANEL) * (self.cols / BLOCK) + b) * PANEL + n % PANEL
    }

    /// Where row `n`'s value `k` of block `b` is.
    fn quant(&self, n: usize, b: usize, k: usize) -> usize {
        ((n / PANEL) * (self.cols / BLOCK) + b) * PANEL_BLOCK + (k / 4) * PANEL * 4 + (n % PANEL) * 4 + k % 4
    }

    /// Row `n`'s quants and scales, row-major.
    fn row(&self, n: usize) -> (Vec<i8>, Vec<f32>) {
        let blocks = self.cols / BLOCK;
        let quants = (0..self.cols).map(|k| self.quants[self.quant(n, k / BLOCK, k % BLOCK)]).collect();
        (quants, (0..blocks).map(|b| self.scales[self.at(n, b)]).collect())
    }

    /// The matrices' rows one after another, in one matrix: products of several matrices with
    /// the same input (query, key and value) then run as one.
    pub fn stack(parts: &[Q8Matrix]) -> Result<Q8Matrix, String> {
        let cols = parts.first().map_or(0, |p| p.cols);
        if let Some(p) = parts.iter().find(|p| p.cols != cols) {
            return Err(format!("stacking matrices of {cols} and {} columns", p.cols));
        }
        let (mut quants, mut scales) = (Vec::new(), Vec::new());
        for (q, s) in parts.iter().flat_map(|p| (0..p.rows).map(|n| p.row(n))) {
            quants.extend(q);
            scales.extend(s);
        }
        Ok(Q8Matrix::from_rows(parts.iter().map(|p| p.rows).sum(), cols, &quants, &scales))
    }

    /// The matrix with its weights in bf16 as well, where the CPU has AMX-BF16 to run prompt
    /// rows on them (see [`bf16`]); as it is elsewhere.
    pub fn with_bf16(mut self) -> Q8Matrix {
        if bf16::available() {
            self.bf16 = Some(bf16::Weights::of(&self));
        }
        self
    }

    /// Rows: the length of a product's output row.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns: the length of an input row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `r` as f32, into `out` (`cols` long).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        for (b, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            let s = self.scales[self.at(r, b)];
            for (k, o) in out.iter_mut().enumerate() {
                *o = self.quants[self.quant(r, b, k)] as f32 * s;
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
        #[cfg(target_arch = "x86_64")]
        if wide::fused() {
            // SAFETY: the CPU has the features `quantize_rows_fused` is compiled for.
            return unsafe { wide::quantize_rows_fused(x, &mut self.quants, &mut self.scales) };
        }
        quantize_rows(x, &mut self.quants, &mut self.scales);
    }
}

/// The activation rows of a forward pass, ready for its products: the first `prompt` rows
/// (rows of prompts being read) in bf16 where AMX-BF16 runs them, the others in Q8_0.
#[derive(Default)]
pub struct Activations {
    prompt: bf16::Rows,
    q8: Q8Rows,
}

impl Activations {
    /// Row-major `x` of `cols` columns, whose first `prompt` rows are rows of prompts.
    pub fn prepare(&mut self, x: &[f32], cols: usize, prompt: usize) {
        let prompt = if bf16::available() { prompt } else { 0 };
        self.prompt.round(&x[..prompt * cols], cols);
        self.q8.quantize(&x[prompt * cols..], cols);
    }

    /// `out[m * w.rows() + n]` = activation row `m` times weight row `n`: the prompt rows on
    /// the bf16 tiles (`w` must have its bf16 weights then), the others as [`matmul`] does.
    pub fn matmul(&self, team: &Team, w: &Q8Matrix, out: &mut [f32]) {
        let (prompt, rest) = out.split_at_mut(self.prompt.rows * w.rows);
        if self.prompt.rows > 0 {
            bf16::matmul(team, &self.prompt, w, prompt);
        }
        if self.q8.rows > 0 {
            matmul(team, &self.q8, w, rest);
        }
    }
}

/// Quantizes `x` block by block into `quants` (offset by 128) and `scales`.
#[inline(always)]
fn quantize_rows(x: &[f32], quants: &mut [u8], scales: &mut Vec<f32>) {
    for (x, q) in x.chunks_exact(BLOCK).zip(quants.chunks_exact_mut(BLOCK)) {
        scales.push(quantize_block(x, q, |v| (v + 128) as u8));
    }
}

/// The f32 loops of a forward pass compiled for AVX-512 and for AVX2+FMA as well as for the
/// baseline the binary targets (see the module).
#[cfg(target_arch = "x86_64")]
pub mod wide;

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
///
/// Every kernel computes the same sum the same way: each block's integer dot product exactly,
/// then `sum += dot as f32 * (x_scale * w_scale)` block after block, in f32 from zero, as
/// [`dot`] does. So a row's results do not depend on which kernel ran it, nor on the other rows
/// of the product: a sequence decoded in a batch gets the logits it gets alone, bit for bit.
pub fn matmul(team: &Team, x: &Q8Rows, w: &Q8Matrix, out: &mut [f32]) {
    assert_eq!(x.cols, w.cols, "activations of {} columns times weights of {}", x.cols, w.cols);
    assert_eq!(out.len(), x.rows * w.rows, "output of {} for {}x{}", out.len(), x.rows, w.rows);
    let out = Out::new(out, w.rows);
    let panels = w.rows.div_ceil(PANEL);
    // SAFETY of the writes: share i writes only the columns of its panels.
    team.run(panels.div_ceil(CHUNK_PANELS), &|i| {
        product(x, w, i * CHUNK_PANELS..((i + 1) * CHUNK_PANELS).min(panels), out);
    });
}

/// The kernels products of many rows run on here: `amx`, `avx512-vnni`, `avx2` or `portable`.
pub fn kernel() -> &'static str {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if vnni::available() && amx::available() {
        return "amx";
    }
    #[cfg(target_arch = "x86_64")]
    if vnni::available() {
        return "avx512-vnni";
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        return "avx2";
    }
    "portable"
}

/// All activation rows times the weight rows of `panels`, tile by tile.
fn product(x: &Q8Rows, w: &Q8Matrix, panels: std::ops::Range<usize>, out: Out) {
    #[cfg(target_arch = "x86_64")]
    if vnni::available() {
        let mut m = 0;
        #[cfg(target_os = "linux")]
        if x.rows >= amx::ROWS && amx::available() {
            // SAFETY: the CPU has the kernel's features and the process may use its tiles; the
            // panels are within w and their columns of out this thread's alone.
            m = unsafe { amx::product(x, w, panels.clone(), out) };
        }
        // Every group of rows fetches the next share's weights as it runs (see `vnni::tile`;
        // the first has them come from memory, the others keep them coming while they multiply),
        // unless AMX read the weights already.
        let fetch = m == 0;
        // Many rows (a prompt's): 5 rows by 2 panels a tile, each activation loaded once for
        // two panels, which keeps more of the core's loads for the weights than 8 rows by one
        // panel (about 5% faster with the weights in cache; the same sums).
        if x.rows - m > 8 {
            while x.rows - m >= 5 {
                // SAFETY: the CPU has the kernel's features, and the tiles are within x, w and out.
                unsafe { vnni::tiles::<5, 2, 1>(x, m, w, panels.clone(), out, fetch) };
                m += 5;
            }
        }
        // Up to 8 rows in one tile, so a generation step of up to 8 sequences reads the
        // weights once.
        while m < x.rows {
            let r = (x.rows - m).min(8);
            let p = panels.clone();
            // SAFETY: the CPU has the kernel's features, and the tiles are within x, w and out.
            unsafe {
                match r {
                    8 => vnni::tiles::<8, 1, 1>(x, m, w, p, out, fetch),
                    7 => vnni::tiles::<7, 1, 1>(x, m, w, p, out, fetch),
                    6 => vnni::tiles::<6, 1, 1>(x, m, w, p, out, fetch),
                    5 => vnni::tiles::<5, 1, 2>(x, m, w, p, out, fetch),
                    4 => vnni::tiles::<4, 2, 2>(x, m, w, p, out, fetch),
                    3 => vnni::tiles::<3, 2, 2>(x, m, w, p, out, fetch),
                    2 => vnni::tiles::<2, 2, 2>(x, m, w, p, out, fetch),
                    _ => vnni::tiles::<1, 4, 2>(x, m, w, p, out, fetch),
                }
            }
            m += r;
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2, the panels are within w and their columns of out this
        // thread's alone.
        return unsafe { avx2::product(x, w, panels, out) };
    }
    for m in 0..x.rows {
        for n in panels.start * PANEL..(panels.end * PANEL).min(w.rows) {
            // SAFETY: (m, n) is within out, and this thread's alone.
            unsafe { *out.ptr.add(m * out.stride + n) = dot(x, m, w, n) };
        }
    }
}

/// The portable kernel, and the definition of every other: activation row `m` times weight
/// row `n`.
fn dot(x: &Q8Rows, m: usize, w: &Q8Matrix, n: usize) -> f32 {
    let (cols, blocks) = (x.cols, x.cols / BLOCK);
    let xq = &x.quants[m * cols..(m + 1) * cols];
    let mut sum = 0.0f32;
    for (b, (xq, xs)) in xq.chunks_exact(BLOCK).zip(&x.scales[m * blocks..(m + 1) * blocks]).enumerate() {
        let d: i32 = xq.iter().enumerate().map(|(k, x)| *x as i32 * w.quants[w.quant(n, b, k)] as i32).sum();
        let at = w.at(n, b);
        sum += (d + w.offsets[at]) as f32 * (xs * w.scales[at]);
    }
    sum
}

#[cfg(target_arch = "x86_64")]
/// Products of many rows on AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
mod vnni;

/// Many activation rows on Intel's AMX: `tdpbusd` multiplies 16 rows of a block by the 16
/// rows of a panel (16 x 16 dot products of 32 bytes) in one instruction. The tiles hold the
/// integer sums of one block; the vector unit then scales and adds them as the other kernels
/// do, so the results are theirs, bit for bit.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx;

/// Products on x86-64 without AVX-512 VNNI: the same sums, eight weight rows to a register.
#[cfg(target_arch = "x86_64")]
mod avx2;

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
                    let xv = (x.quants[m * x.cols + k] as f64 - 128.0) * x.scales[m * blocks + k / BLOCK] as f64;
                    let (b, k) = (k / BLOCK, k % BLOCK);
                    sum += xv * w.quants[w.quant(n, b, k)] as f64 * w.scales[w.at(n, b)] as f64;
                }
                out[m * w.rows + n] = sum as f32;
            }
        }
        out
    }

    #[test]
    fn products_of_every_tile_shape_match_the_plain_sum_and_each_other_bit_for_bit() {
        // Every tile height from 1 to 8 rows, and more rows in tiles of 5 rows by 2 panels (13
        // rows: 5, 5, then 3; 33: six of 5, then 3); 37 weight rows are three panels, the last
        // with 5 rows, in two shares; 96 columns are 3 blocks. 70 and 33 rows run on AMX where
        // the CPU has it (groups of 32, then the rest: 6 and 1), 40 panels in shares of 4 and 9
        // panels an odd one at the end.
        for (rows, wrows, cols) in [
            (7, 37, 96),
            (6, 37, 96),
            (1, 9, 64),
            (2, 37, 96),
            (3, 37, 96),
            (4, 4, 32),
            (13, 70, 576),
            (5, 8, 1536),
            (8, 37, 64),
            (70, 640, 192),
            (33, 144, 576),
        ] {
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
            // The AVX2 kernel (where a faster one ran above) gives the same bits.
            #[cfg(target_arch = "x86_64")]
            if avx2::available() {
                let mut on_avx2 = vec![f32::NAN; want.len()];
                // SAFETY: the CPU has AVX2; all panels, on this thread.
                unsafe { avx2::product(&x, &w, 0..wrows.div_ceil(PANEL), Out::new(&mut on_avx2, wrows)) };
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&on_avx2), bits(&got), "{rows}x{wrows}x{cols} avx2");
            }
            // The portable kernel, the definition, gives the same bits, and so does each row
            // multiplied alone.
            for m in 0..rows {
                let mut one = Q8Rows::default();
                one.quantize(&values(rows * cols, 2)[m * cols..(m + 1) * cols], cols);
                let mut alone = vec![f32::NAN; wrows];
                matmul(&team, &one, &w, &mut alone);
                for n in 0..wrows {
                    let g = got[m * wrows + n];
                    assert_eq!(g.to_bits(), dot(&x, m, &w, n).to_bits(), "{rows}x{wrows}x{cols} portable [{m},{n}]");
                    assert_eq!(g.to_bits(), alone[n].to_bits(), "{rows}x{wrows}x{cols} alone [{m},{n}]");
                }
            }
        }
    }

    #[test]
    fn a_weight_of_minus_128_from_a_file_multiplies_as_any_other() {
        // Quantizing never writes -128, but a GGUF file may hold it: every kernel takes it
        // whole (AVX2's magnitude of it is 128 unsigned) against the largest activations.
        let (rows, cols) = (3, 64);
        let mut bytes = Vec::new();
        for r in 0..rows * cols / BLOCK {
            bytes.extend(f16::from_f32(0.5 + r as f32).to_le_bytes());
            bytes.extend((0..BLOCK).map(|k| if k % 3 == r % 3 { 0x80 } else { (k as u8).wrapping_mul(37) }));
        }
        let w = Q8Matrix::from_ggml(&bytes, rows, cols).unwrap();
        let mut v = values(5 * cols, 7);
        v.iter_mut().step_by(5).for_each(|x| *x = -9.0);
        let mut x = Q8Rows::default();
        x.quantize(&v, cols);
        let mut got = vec![f32::NAN; 5 * rows];
        matmul(&Team::new(1, "test").unwrap(), &x, &w, &mut got);
        let want = reference(&x, &w);
        for m in 0..5 {
            for n in 0..rows {
                let g = got[m * rows + n];
                assert_eq!(g.to_bits(), dot(&x, m, &w, n).to_bits(), "[{m},{n}]");
                assert!((g - want[m * rows + n]).abs() <= 1e-4 * want[m * rows + n].abs().max(1.0), "[{m},{n}]");
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn activations_quantize_to_the_same_bytes_on_the_wide_path() {
        let mut v = values(32 * 40, 5);
        // A block of zeros, and one whose scale is 1 so every value is a tie: -16.5 .. 14.5.
        v[..32].fill(0.0);
        for (i, x) in v[32..64].iter_mut().enumerate() {
            *x = if i == 0 { 127.0 } else { i as f32 - 17.5 };
        }
        let (mut plain, mut plain_scales) = (vec![0u8; v.len()], Vec::new());
        quantize_rows(&v, &mut plain, &mut plain_scales);
        assert_eq!((plain[33], plain[34], plain[49]), (128 - 17, 128 - 16, 128 - 1), "ties go away from zero");
        if wide::available() {
            let (mut fast, mut fast_scales) = (vec![0u8; v.len()], Vec::new());
            // SAFETY: the CPU has the features.
            unsafe { wide::quantize_rows(&v, &mut fast, &mut fast_scales) };
            assert_eq!(plain, fast);
            assert_eq!(plain_scales, fast_scales);
        }
        if wide::fused() {
            let (mut fast, mut fast_scales) = (vec![0u8; v.len()], Vec::new());
            // SAFETY: the CPU has the features.
            unsafe { wide::quantize_rows_fused(&v, &mut fast, &mut fast_scales) };
            assert_eq!(plain, fast);
            assert_eq!(plain_scales, fast_scales);
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
            assert!((a - b).abs() <= q.scales[q.at(0, i / 32)] * 0.51, "[{i}] {a} -> {b}");
        }
    }

    #[test]
    fn prompt_rows_on_bf16_tiles_sum_the_rounded_values_and_a_row_alone_gives_the_same_bits() {
        if !bf16::available() {
            eprintln!("no AMX-BF16 here: prompt rows run in Q8_0, as tested above");
            return;
        }
        // 37 weight rows: three panels, an odd last one of 5 rows; 5 and 33 rows: partial tile
        // pairs; 70 rows over 40 panels: several shares and pairs.
        for (rows, wrows, cols) in [(1, 16, 64), (5, 37, 96), (33, 144, 576), (70, 640, 192)] {
            let w = Q8Matrix::quantize(&values(wrows * cols, 1), wrows, cols).unwrap().with_bf16();
            let weights = w.bf16.as_ref().unwrap();
            let x = values(rows * cols, 2);
            let mut act = bf16::Rows::default();
            act.round(&x, cols);
            let team = Team::new(2, "test").unwrap();
            let mut got = vec![f32::NAN; rows * wrows];
            bf16::matmul(&team, &act, &w, &mut got);
            let mut one = bf16::Rows::default();
            let mut alone = vec![f32::NAN; wrows];
            for m in 0..rows {
                one.round(&x[m * cols..(m + 1) * cols], cols);
                bf16::matmul(&team, &one, &w, &mut alone);
                for n in 0..wrows {
                    let terms = (0..cols).map(|k| act.value(m, k) as f64 * weights.value(cols / BLOCK, n, k) as f64);
                    let (sum, size) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                    let g = got[m * wrows + n];
                    assert!(
                        (g as f64 - sum).abs() <= 1e-5 * size.max(1.0),
                        "{rows}x{wrows}x{cols} [{m},{n}]: {g} vs {sum}"
                    );
                    assert_eq!(g.to_bits(), alone[n].to_bits(), "{rows}x{wrows}x{cols} alone [{m},{n}]");
                }
            }
            // Each weight is its Q8_0 value rounded to bf16.
            let mut row = vec![0.0; cols];
            w.dequantize_row(wrows - 1, &mut row);
            for (k, v) in row.iter().enumerate() {
                assert_eq!(weights.value(cols / BLOCK, wrows - 1, k), bf16::widen(bf16::round(*v)));
            }
        }
    }
}
