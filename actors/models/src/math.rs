//! Scalar functions the kernels of both models share, written so the compiler vectorizes the
//! loops that call them.

/// `e^x` for x in [-87, 88] (clamped beyond), within a few ulp: 2^n times a degree-6
/// polynomial on the remainder (the Cephes `expf` coefficients), branch-free.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    /// 1.5 * 2^23: adding it rounds to an integer held in the low bits of the mantissa.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let z = x.mul_add(LOG2E, ROUND);
    let n = z - ROUND;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_2e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let e = (r * r).mul_add(p, r) + 1.0;
    // z's low bits hold n (two's complement); shifting n + 127 into the exponent makes 2^n.
    // The high bits of z's pattern shift out.
    e * f32::from_bits(z.to_bits().wrapping_add(127) << 23)
}
