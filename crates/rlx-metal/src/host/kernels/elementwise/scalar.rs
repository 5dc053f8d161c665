//! Scalar building blocks of the elementwise family: erf, the activation
//! formulas, NaN-propagating max/min, and the `with_act!` / `with_bin!`
//! dispatch macros that monomorphise one loop per op.

/// Error function, `|relative error| < 1e-7` (evaluated in f64 by `libm`,
/// then rounded once to f32).
#[inline]
pub fn erf(x: f32) -> f32 {
    libm::erf(x as f64) as f32
}

#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// The vectorisable core of `e^x` (no library call): `x = n·ln 2 + r`
/// (`|r| ≤ ln 2 / 2`, `ln 2` split in two parts so `r` is exact) and `e^r`
/// by a degree-6 polynomial (Cephes `expf`'s coefficients, relative error
/// ≈ 1e-7). Returns `(e^r, n)`; the caller scales by `2^n` in the exponent
/// bits. Needs `|x| < 2^21` (callers clamp).
#[inline(always)]
pub(crate) fn exp_parts(x: f32) -> (f32, i32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    // n sits in the low mantissa bits of t (|n| < 2^22)
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    (p * (r * r) + r + 1.0, ni)
}

/// `e^x` in f32 through [`exp_parts`], so that loops over it vectorise;
/// `2^n` is built as `2^(n−1)·2` so that `n = 128` still fits. Above
/// `ln(f32::MAX)` the result is +inf, below −87.3 (where `e^x` leaves the
/// normal range) it is 0; NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_fast(x: f32) -> f32 {
    const HI: f32 = 88.722_84; // ln(f32::MAX)
    const LO: f32 = -87.3;
    // NaN passes through the clamp
    let (y, ni) = exp_parts(x.clamp(LO, HI));
    let scale = f32::from_bits((ni.wrapping_add(126) as u32) << 23);
    let e = y * scale * 2.0;
    if x > HI {
        f32::INFINITY
    } else if x < LO {
        0.0
    } else {
        e
    }
}

/// GELU with the tanh approximation, `0.5·x·(1 + tanh(u))` with
/// `u = √(2/π)·(x + 0.044715·x³)`, evaluated as the equal `x·σ(2u) =
/// x / (1 + e^(−2u))` (no cancellation in `1 + tanh` for negative `x`;
/// vectorisable through [`exp_fast`]).
#[inline(always)]
pub(crate) fn gelu_approx(x: f32) -> f32 {
    // 2·sqrt(2/pi)
    const C2: f32 = 1.595_769;
    let u2 = C2 * x * (1.0 + 0.044_715 * x * x);
    x / (1.0 + exp_fast(-u2))
}

#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp_fast(-x))
}

/// SiLU, `x·sigmoid(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp_fast(-x))
}

/// Binds `$f` to the scalar function of activation `$act` and evaluates
/// `$body` once per activation (so the body's loops are monomorphised).
macro_rules! with_act {
    ($act:expr, $f:ident => $body:expr) => {{
        use rlx_ir::op::Activation as A;
        match $act {
            A::Gelu => {
                let $f = $crate::host::kernels::elementwise::scalar::gelu;
                $body
            }
            A::GeluApprox => {
                let $f = $crate::host::kernels::elementwise::scalar::gelu_approx;
                $body
            }
            A::Silu => {
                let $f = $crate::host::kernels::elementwise::scalar::silu;
                $body
            }
            A::Relu => {
                // NaN fails the comparison and passes through.
                let $f = |x: f32| if x < 0.0 { 0.0 } else { x };
                $body
            }
            A::Sigmoid => {
                let $f = $crate::host::kernels::elementwise::scalar::sigmoid;
                $body
            }
            A::Tanh => {
                let $f = f32::tanh;
                $body
            }
            A::Exp => {
                let $f = f32::exp;
                $body
            }
            A::Log => {
                let $f = f32::ln;
                $body
            }
            A::Sqrt => {
                let $f = f32::sqrt;
                $body
            }
            A::Rsqrt => {
                let $f = |x: f32| 1.0 / x.sqrt();
                $body
            }
            A::Neg => {
                let $f = |x: f32| -x;
                $body
            }
            A::Abs => {
                let $f = f32::abs;
                $body
            }
            A::Sin => {
                let $f = f32::sin;
                $body
            }
            A::Cos => {
                let $f = f32::cos;
                $body
            }
            A::Tan => {
                let $f = f32::tan;
                $body
            }
            A::Atan => {
                let $f = f32::atan;
                $body
            }
            A::Round => {
                let $f = f32::round_ties_even;
                $body
            }
        }
    }};
}

/// NaN-propagating maximum (numpy `maximum`).
#[inline(always)]
pub(crate) fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || a > b {
        a
    } else {
        b
    }
}

/// NaN-propagating minimum (numpy `minimum`).
#[inline(always)]
pub(crate) fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || a < b {
        a
    } else {
        b
    }
}

/// Binds `$f` to the scalar function of binary op `$op` and evaluates
/// `$body` once per op.
macro_rules! with_bin {
    ($op:expr, $f:ident => $body:expr) => {{
        use rlx_ir::op::BinaryOp as B;
        match $op {
            B::Add => {
                let $f = |a: f32, b: f32| a + b;
                $body
            }
            B::Sub => {
                let $f = |a: f32, b: f32| a - b;
                $body
            }
            B::Mul => {
                let $f = |a: f32, b: f32| a * b;
                $body
            }
            B::Div => {
                let $f = |a: f32, b: f32| a / b;
                $body
            }
            B::Max => {
                let $f = $crate::host::kernels::elementwise::scalar::nan_max;
                $body
            }
            B::Min => {
                let $f = $crate::host::kernels::elementwise::scalar::nan_min;
                $body
            }
            B::Pow => {
                let $f = f32::powf;
                $body
            }
        }
    }};
}
