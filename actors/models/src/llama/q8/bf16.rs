//! Prompt rows on AMX's bf16 tiles.
//!
//! A Q8_0 product sums each block of 32 in integers and scales it on its own, so a product on
//! AMX's int8 tiles spends most of its time in the vector unit scaling block sums. Reading a
//! prompt is a product of many rows, where the tiles could do far more: with the weights once
//! more in bf16 (each Q8_0 value, its block's scale applied, rounded to bf16; about 2 bytes a
//! weight beside the Q8_0 copy), a tile sums a whole row in f32 itself, and nothing is left to
//! scale. Activations are rounded to bf16 (round to nearest even).
//!
//! Only prompt rows take this path, always (where the CPU has AMX-BF16), and generated rows
//! never do: a row's result depends only on itself and on what kind of row it is, so a prompt
//! read alone, in pieces or beside others gives the same bits, as generation does (see
//! [`super::matmul`]).

use super::{BLOCK, PANEL, Q8Matrix};
use crate::pool::Team;

/// Rows of an activation tile; products run on groups of two.
const TILE: usize = 16;

/// Whether the CPU has AMX-BF16 and the process may use the tiles.
pub fn available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // CPUID leaf 7: EDX bit 22 is AMX-BF16.
        *HAS.get_or_init(|| super::amx::available() && std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << 22) != 0)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}

/// f32 to bf16, rounding to nearest even (values that are not NaN).
pub fn round(v: f32) -> u16 {
    let b = v.to_bits();
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
pub fn widen(v: u16) -> f32 {
    f32::from_bits((v as u32) << 16)
}

/// A matrix's weights in bf16, laid out as AMX's `tdpbf16ps` takes its second operand: panel
/// by panel and block by block, each block's 32 values as 16 pairs, each pair the panel's 16
/// rows side by side (`[pair][row][2]`, 1 KiB). An odd number of panels is followed by one of
/// zeros, so the tiles always take panels in pairs.
#[derive(Clone)]
pub struct Weights(Vec<u16>);

impl Weights {
    pub fn of(w: &Q8Matrix) -> Weights {
        let (blocks, panels) = (w.cols / BLOCK, w.rows.div_ceil(PANEL));
        let mut v = vec![0u16; panels.next_multiple_of(2) * blocks * PANEL * BLOCK];
        for n in 0..panels * PANEL {
            for b in 0..blocks {
                let scale = w.scales[w.at(n, b)];
                for k in 0..BLOCK {
                    let q = w.quants[w.quant(n, b, k)] as f32;
                    v[Weights::at(blocks, n, b, k)] = round(q * scale);
                }
            }
        }
        Weights(v)
    }

    /// Where row `n`'s value `k` of block `b` is, in a matrix of `blocks` blocks a row.
    fn at(blocks: usize, n: usize, b: usize, k: usize) -> usize {
        (((n / PANEL) * blocks + b) * (BLOCK / 2) + k / 2) * PANEL * 2 + (n % PANEL) * 2 + k % 2
    }

    /// Row `n`'s value `k`, as f32.
    #[cfg(test)]
    pub fn value(&self, blocks: usize, n: usize, k: usize) -> f32 {
        widen(self.0[Weights::at(blocks, n, k / BLOCK, k % BLOCK)])
    }
}

/// Prompt rows rounded to bf16, their buffer kept between uses; rows past `rows`, up to a
/// whole number of tile pairs, are zero.
#[derive(Default)]
pub struct Rows {
    pub rows: usize,
    pub cols: usize,
    values: Vec<u16>,
}

impl Rows {
    /// Rounds row-major `x` of `cols` columns into `self`.
    pub fn round(&mut self, x: &[f32], cols: usize) {
        assert!(cols.is_multiple_of(BLOCK) && x.len().is_multiple_of(cols), "{} values in rows of {cols}", x.len());
        self.rows = x.len() / cols;
        self.cols = cols;
        let padded = self.rows.next_multiple_of(2 * TILE) * cols;
        self.values.clear();
        self.values.extend(x.iter().map(|v| round(*v)));
        self.values.resize(padded, 0);
    }

    #[cfg(test)]
    pub fn value(&self, m: usize, k: usize) -> f32 {
        widen(self.values[m * self.cols + k])
    }
}

/// `out[m * w.rows + n]` = row `m` of `x` times row `n` of `w`, on the bf16 tiles; `w` must
/// have its bf16 weights ([`Q8Matrix::with_bf16`], which makes them only where [`available`]).
pub fn matmul(team: &Team, x: &Rows, w: &Q8Matrix, out: &mut [f32]) {
    let weights = w.bf16.as_ref().expect("a matrix with bf16 weights, on a CPU with AMX-BF16");
    assert_eq!(x.cols, w.cols, "activations of {} columns times weights of {}", x.cols, w.cols);
    assert_eq!(out.len(), x.rows * w.rows, "output of {} for {}x{}", out.len(), x.rows, w.rows);
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let out = super::Out::new(out, w.rows);
        let panels = w.rows.div_ceil(PANEL);
        team.run(panels.div_ceil(super::CHUNK_PANELS), &|i| {
            let mine = i * super::CHUNK_PANELS..((i + 1) * super::CHUNK_PANELS).min(panels);
            // SAFETY: bf16 weights exist only where the CPU has AMX-BF16 and the process its
            // tiles; share i writes only the columns of its panels.
            unsafe { tiles::product(x, w, weights, mine, out) };
        });
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let _ = (team, out);
        unreachable!("bf16 weights on a CPU without AMX-BF16")
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod tiles {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use super::{BLOCK, PANEL, Q8Matrix, Rows, TILE, Weights};
    use crate::llama::q8::Out;
    use crate::llama::q8::amx::Config;

    #[repr(C, align(64))]
    struct Sums([f32; 4 * TILE * PANEL]);

    /// All rows of `x` times the weight rows of `panels`, two panels at a time.
    ///
    /// # Safety
    /// [`available`] must be true; the panels must be within `w` and their columns of `out` this
    /// thread's alone.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn product(x: &Rows, w: &Q8Matrix, weights: &Weights, panels: std::ops::Range<usize>, out: Out) {
        let blocks = w.cols / BLOCK;
        let panel_len = blocks * PANEL * BLOCK;
        let mut sums = Sums([0.0; 4 * TILE * PANEL]);
        // Tiles 0 and 1: two groups of 16 activation rows (16 x 32 bf16); 2 and 3: two panels'
        // blocks (16 pairs x 16 rows x 2); 4 to 7: their four products (16 x 16 f32). Released
        // before returning.
        unsafe { Config::new([(16, 64); 8]).load() };
        let row_bytes = x.cols * 2;
        for p in panels.clone().step_by(2) {
            // A last odd panel's pair is the next panel (another share's, or the zeros after
            // the last one): multiplied, never stored.
            let (w0, w1) = (weights.0[p * panel_len..].as_ptr(), weights.0[(p + 1) * panel_len..].as_ptr());
            for m in (0..x.rows).step_by(2 * TILE) {
                let a = x.values[m * x.cols..].as_ptr();
                // SAFETY: the tiles read 32 rows of 64 bytes from a (rows `row_bytes` apart,
                // within the padded rows), 1 KiB a block from each panel, and write 4 KiB
                // into `sums`.
                unsafe {
                    asm!("tilezero tmm4", "tilezero tmm5", "tilezero tmm6", "tilezero tmm7", options(nostack, nomem));
                    for b in 0..blocks {
                        asm!(
                            "tileloadd tmm0, [{a} + {stride}*1]",
                            "tileloadd tmm1, [{a1} + {stride}*1]",
                            "tileloadd tmm2, [{w0} + {s64}*1]",
                            "tileloadd tmm3, [{w1} + {s64}*1]",
                            "tdpbf16ps tmm4, tmm0, tmm2",
                            "tdpbf16ps tmm5, tmm0, tmm3",
                            "tdpbf16ps tmm6, tmm1, tmm2",
                            "tdpbf16ps tmm7, tmm1, tmm3",
                            a = in(reg) a.add(b * BLOCK),
                            a1 = in(reg) a.add(TILE * x.cols + b * BLOCK),
                            stride = in(reg) row_bytes,
                            w0 = in(reg) w0.add(b * PANEL * BLOCK),
                            w1 = in(reg) w1.add(b * PANEL * BLOCK),
                            s64 = in(reg) 64usize,
                            options(nostack, readonly),
                        );
                    }
                    asm!(
                        "tilestored [{c} + {s64}*1], tmm4",
                        "tilestored [{c} + {s64}*1 + 1024], tmm5",
                        "tilestored [{c} + {s64}*1 + 2048], tmm6",
                        "tilestored [{c} + {s64}*1 + 3072], tmm7",
                        c = in(reg) sums.0.as_mut_ptr(),
                        s64 = in(reg) 64usize,
                        options(nostack),
                    );
                }
                for r in 0..(x.rows - m).min(2 * TILE) {
                    for c in 0..2 {
                        let panel = p + c;
                        if panel >= panels.end {
                            continue;
                        }
                        let valid = (w.rows - panel * PANEL).min(PANEL);
                        let tile = (r / TILE) * 2 + c;
                        // SAFETY: row m + r and the panel's valid columns are within out, and
                        // this thread's alone.
                        unsafe {
                            let v = _mm512_load_ps(sums.0.as_ptr().add(tile * 256 + (r % TILE) * PANEL));
                            let at = out.ptr.add((m + r) * out.stride + panel * PANEL);
                            _mm512_mask_storeu_ps(at, ((1u32 << valid) - 1) as u16, v);
                        }
                    }
                }
            }
        }
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}
