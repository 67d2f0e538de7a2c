//! The machine's peak f32 arithmetic, measured: the figure a kernel's FLOP/s is a share of.
//!
//! Each thread runs independent chains of fused multiply-adds on the widest vectors the CPU
//! has (AVX-512, else AVX2 with FMA), enough chains to hide the instruction's latency, and
//! nothing else: no loads, no stores. What that reaches is the most the kernels could reach on
//! the same threads, whatever the clock the machine runs at now.

use std::time::Instant;

/// Multiply-adds each chain runs, per thread.
const ROUNDS: u64 = 20_000_000;

/// The peak: f32 operations per second on `threads` threads (a multiply-add is two), and the
/// instructions it was measured with; `None` where neither vector unit is there.
pub fn f32_peak(threads: usize) -> Option<(f64, &'static str)> {
    #[cfg(target_arch = "x86_64")]
    {
        let (run, isa): (fn(u64) -> f32, &str) = if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F (checked above).
            (|n| unsafe { x86::avx512(n) }, "avx512 fma")
        } else if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            (|n| unsafe { x86::avx2(n) }, "avx2 fma")
        } else {
            return None;
        };
        let lanes = if isa.starts_with("avx512") { 16.0 } else { 8.0 };
        run(ROUNDS / 20); // warm the units up (and the clock)
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| std::hint::black_box(run(ROUNDS)));
            }
        });
        let flops = threads.max(1) as f64 * ROUNDS as f64 * x86::CHAINS as f64 * lanes * 2.0;
        Some((flops / t.elapsed().as_secs_f64(), isa))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = threads;
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Independent chains: more than latency (4) times units (2).
    pub const CHAINS: usize = 12;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512(rounds: u64) -> f32 {
        let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..rounds {
            for c in &mut acc {
                *c = _mm512_fmadd_ps(*c, a, b);
            }
        }
        acc.iter().map(|c| _mm512_reduce_add_ps(*c)).sum()
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(rounds: u64) -> f32 {
        let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..rounds {
            for c in &mut acc {
                *c = _mm256_fmadd_ps(*c, a, b);
            }
        }
        let mut lanes = [0.0f32; 8];
        acc.iter()
            .map(|c| {
                // SAFETY: 8 floats into an array of 8.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *c) };
                lanes.iter().sum::<f32>()
            })
            .sum()
    }
}
