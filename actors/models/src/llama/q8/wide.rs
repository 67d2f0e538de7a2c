//! The f32 loops of a forward pass compiled for AVX-512, and for AVX2 with FMA, as well as for
//! the baseline the binary targets, chosen once at run time. The same operations in the same order (Rust never
//! reorders or fuses float arithmetic on its own), so the same results, bit for bit; only
//! wider registers and rounding in one instruction instead of a call.

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

/// Whether the CPU has AVX2 and fused multiply-adds, the x86-64 baseline of the last decade
/// (where it lacks AVX-512, [`available`] is false): loops compiled for them round and fuse
/// in one instruction where the baseline calls the C library (`roundf`, `fmaf`).
pub fn fused() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
}

/// [`super::quantize_rows`] compiled for AVX2 and FMA: the same quants and scales.
///
/// # Safety
/// The CPU must have the features [`fused`] checks.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn quantize_rows_fused(x: &[f32], quants: &mut [u8], scales: &mut Vec<f32>) {
    super::quantize_rows(x, quants, scales)
}

/// [`super::quantize_rows`], for AVX-512: a block in two registers, rounded half away from
/// zero as `f32::round` does (truncate, then step away where the remainder is half or
/// more), so the same quants and scales.
///
/// # Safety
/// The CPU must have the features [`available`] checks.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx2,sse4.1")]
pub unsafe fn quantize_rows(x: &[f32], quants: &mut [u8], scales: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    for (x, q) in x.chunks_exact(super::BLOCK).zip(quants.chunks_exact_mut(super::BLOCK)) {
        let v = unsafe { [_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(x.as_ptr().add(16))] };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        let d = amax / 127.0;
        let inv = _mm512_set1_ps(if d == 0.0 { 0.0 } else { 1.0 / d });
        for (half, v) in v.into_iter().enumerate() {
            let t = _mm512_mul_ps(v, inv);
            let whole = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(t);
            let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(t, whole)), _mm512_set1_ps(0.5));
            let sign = _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(i32::MIN));
            let step = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_castps_si512(_mm512_set1_ps(1.0))));
            let rounded = _mm512_mask_add_ps(whole, away, whole, step);
            let bytes = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvttps_epi32(rounded), _mm512_set1_epi32(128)));
            unsafe { _mm_storeu_si128(q.as_mut_ptr().add(half * 16).cast(), bytes) };
        }
        scales.push(half::f16::from_f32(d).to_f32());
    }
}
