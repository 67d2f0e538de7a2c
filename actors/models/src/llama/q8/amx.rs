//! Products of 32 rows or more on AMX's int8 tiles (see [`super::matmul`]).

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{BLOCK, Out, PANEL, PANEL_BLOCK, Q8Matrix, Q8Rows, vnni};

/// Activation rows per step: two tiles of 16.
pub const ROWS: usize = 32;

/// Whether the CPU has AMX tiles and int8 products, and Linux lets this process use them
/// (asked for once: the tiles' 8 KiB of state is not given to a process that does not ask).
pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx & (3 << 24) != 3 << 24 || !super::vnni::available() {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a request for permission; it changes nothing else.
        unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
    })
}

/// A tile configuration (palette 1): each of the 8 tiles' rows and bytes a row.
#[repr(C, align(64))]
pub struct Config([u8; 64]);

impl Config {
    pub fn new(tiles: [(u8, u16); 8]) -> Config {
        let mut c = [0u8; 64];
        c[0] = 1; // palette 1
        for (t, (rows, bytes)) in tiles.into_iter().enumerate() {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&bytes.to_le_bytes());
            c[48 + t] = rows;
        }
        Config(c)
    }

    /// Configures this thread's tiles; the caller releases them (`tilerelease`) when done.
    ///
    /// # Safety
    /// [`available`] must be true.
    pub unsafe fn load(&self) {
        // SAFETY: a valid configuration of a CPU that has the tiles (the caller's promise).
        unsafe { asm!("ldtilecfg [{}]", in(reg) self.0.as_ptr(), options(nostack, readonly)) };
    }
}

#[repr(C, align(64))]
struct Ints([i32; 4 * PANEL * PANEL]);

/// The whole groups of [`ROWS`] activation rows times the weight rows of `panels`, into
/// `out`; returns the rows done.
///
/// # Safety
/// [`available`] must be true; the panels must be within `w` and their columns of `out` this
/// thread's alone.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn product(x: &Q8Rows, w: &Q8Matrix, panels: std::ops::Range<usize>, out: Out) -> usize {
    let (cols, blocks) = (x.cols, x.cols / BLOCK);
    let mut ints = Ints([0; 4 * PANEL * PANEL]);
    // Tiles 0 and 1: two blocks of 16 activation rows (16 x 32 bytes); 2 and 3: two panels'
    // blocks (8 groups of 16 x 4 bytes); 4 to 7: their four products (16 x 16 int32). Released
    // before returning.
    unsafe { Config::new([(16, 32), (16, 32), (8, 64), (8, 64), (16, 64), (16, 64), (16, 64), (16, 64)]).load() };
    let groups = x.rows / ROWS;
    for m in (0..groups * ROWS).step_by(ROWS) {
        let mut p = panels.start;
        while panels.end - p >= 2 {
            let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
            for b in 0..blocks {
                let a = unsafe { x.quants.as_ptr().add(m * cols + b * BLOCK) };
                let w0 = unsafe { w.quants.as_ptr().add((p * blocks + b) * PANEL_BLOCK) };
                let w1 = unsafe { w0.add(blocks * PANEL_BLOCK) };
                // SAFETY: the tiles read 32 rows of 32 bytes from a (rows `cols` apart), 512
                // bytes from each panel's block, and write 4 KiB into `ints`.
                unsafe {
                    asm!(
                        "tileloadd tmm0, [{a} + {cols}*1]",
                        "tileloadd tmm1, [{a1} + {cols}*1]",
                        "tileloadd tmm2, [{w0} + {s64}*1]",
                        "tileloadd tmm3, [{w1} + {s64}*1]",
                        "tilezero tmm4",
                        "tilezero tmm5",
                        "tilezero tmm6",
                        "tilezero tmm7",
                        "tdpbusd tmm4, tmm0, tmm2",
                        "tdpbusd tmm5, tmm0, tmm3",
                        "tdpbusd tmm6, tmm1, tmm2",
                        "tdpbusd tmm7, tmm1, tmm3",
                        "tilestored [{c} + {s64}*1], tmm4",
                        "tilestored [{c} + {s64}*1 + 1024], tmm5",
                        "tilestored [{c} + {s64}*1 + 2048], tmm6",
                        "tilestored [{c} + {s64}*1 + 3072], tmm7",
                        a = in(reg) a,
                        a1 = in(reg) a.add(16 * cols),
                        cols = in(reg) cols,
                        w0 = in(reg) w0,
                        w1 = in(reg) w1,
                        s64 = in(reg) 64usize,
                        c = in(reg) ints.0.as_mut_ptr(),
                        options(nostack),
                    )
                };
                for r in 0..ROWS {
                    for c in 0..2 {
                        let tile = (r / 16) * 2 + c;
                        let sums = unsafe { _mm512_load_si512(ints.0.as_ptr().add(tile * 256 + (r % 16) * 16).cast()) };
                        acc[r][c] = unsafe { vnni::scale(x, m + r, w, p + c, b, sums, acc[r][c]) };
                    }
                }
            }
            for r in 0..ROWS {
                for c in 0..2 {
                    unsafe { vnni::store(w, m + r, p + c, acc[r][c], out) };
                }
            }
            p += 2;
        }
        if p < panels.end {
            for r in (m..m + ROWS).step_by(4) {
                unsafe { vnni::tile::<4, 1, 2>(x, r, w, p, out, false) };
            }
        }
    }
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    groups * ROWS
}
