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

#[inline(always)]
pub(crate) fn gelu_approx(x: f32) -> f32 {
    // sqrt(2/pi)
    const C: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU, `x·sigmoid(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
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
