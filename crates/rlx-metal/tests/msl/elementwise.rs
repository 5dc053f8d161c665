//! elementwise.metal: every activation (f32 / f16), both casts, the
//! truncation and the 81 `cast_host_<s>_<d>` kernels.
//!
//! Tolerances: f32 `1e-6 + 2e-6·|ref|` (f32 math vs an f64 reference; exact
//! GELU's erf approximation is within 1.5e-7); f16 `1e-5 + 2^-10·|ref|`
//! (f32 math rounded once to f16: at most half an ulp, plus slack).
//! Casts are exact (round to nearest even).

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::{Binding, Grid};
use rlx_ir::op::{Activation, ALL_ACTIVATIONS};
use rlx_ir::DType;
use rlx_metal::host::kernels::elementwise::{cast_numeric, Bool, Numeric};
use rlx_metal::metal::args::{act_code, CastArgs, KernelArgs, UnaryArgs};
use rlx_metal::metal::kernels::Family;

const SIZES: [usize; 5] = [1, 31, 33, 100, 1000];

fn erf(x: f64) -> f64 {
    // Abramowitz & Stegun 7.1.28 would be coarse; use the series / continued
    // fraction split for a reference accurate to ~1e-15.
    if x.abs() < 2.5 {
        let (mut term, mut sum, x2) = (x, x, x * x);
        for n in 1..60 {
            term *= -x2 / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction (Lentz), fine for |x| >= 2.5
        let z = x.abs();
        let mut f = z;
        for k in (1..80).rev() {
            f = z + (k as f64 / 2.0) / f;
        }
        let erfc = (-z * z).exp() / (f * std::f64::consts::PI.sqrt());
        (1.0 - erfc).copysign(x)
    }
}

/// f64 reference of an activation (shared with the matmul and region tests).
pub fn reference(a: Activation, x: f64) -> f64 {
    use Activation::*;
    match a {
        Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        GeluApprox => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Silu => x / (1.0 + (-x).exp()),
        Relu => x.max(0.0),
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Tanh => x.tanh(),
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Neg => -x,
        Abs => x.abs(),
        Sin => x.sin(),
        Cos => x.cos(),
        Tan => x.tan(),
        Atan => x.atan(),
        Round => x.round_ties_even(),
    }
}

/// Inputs inside an activation's domain (shared with the region tests).
pub fn inputs(a: Activation, n: usize, seed: u64) -> Vec<f32> {
    use Activation::*;
    match a {
        Log | Sqrt | Rsqrt => uniform(seed, n, 0.05, 6.0),
        Tan => uniform(seed, n, -1.3, 1.3),
        // multiples of 0.5 hit the ties of round-half-to-even
        Round => uniform(seed, n, -8.0, 8.0)
            .iter()
            .map(|x| (x * 2.0).round() / 2.0)
            .collect(),
        _ => uniform(seed, n, -5.0, 5.0),
    }
}

#[test]
fn unary_activations_match_reference() {
    let lib = lib(Family::Elementwise);
    for dt in DTS {
        let kernel = format!("unary_{}", dt.suffix());
        let (atol, rtol) = match dt {
            Dt::F32 => (1e-6, 2e-6),
            Dt::F16 => (1e-5, 1.0 / 1024.0),
        };
        for a in ALL_ACTIVATIONS {
            for (k, &n) in SIZES.iter().enumerate() {
                let x = dt.round(&inputs(a, n, 7 + k as u64));
                let args = UnaryArgs {
                    len: n as u32,
                    op: act_code(a),
                };
                let mut src = dt.encode(&x);
                let mut dst = vec![0u8; src.len()];
                let tpg = [64u32, 32, 256][k % 3];
                let groups = (n as u32).div_ceil(tpg);
                lib.dispatch(
                    &kernel,
                    args.as_bytes(),
                    &mut [&mut src, &mut dst],
                    Grid::d1(groups, tpg),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{e}"));
                let want: Vec<f64> = x.iter().map(|&v| reference(a, v as f64)).collect();
                let got = dt.decode(&dst);
                assert_close(
                    &format!("{kernel} {} n={n}", a.name()),
                    &got,
                    &want,
                    atol,
                    rtol,
                );
            }
        }
    }
}

#[test]
fn unary_in_place_through_arena_views() {
    // the in-place thunk binds one arena range as both src and dst (a
    // MetalPlan binding is buffer + offset); NaN passes through relu
    let lib = lib(Family::Elementwise);
    let n = 33usize;
    let mut x = uniform(5, n, -2.0, 2.0);
    x[3] = f32::NAN;
    let mut arena = vec![0x5Au8; 64];
    arena.extend(Dt::F32.encode(&x));
    arena.extend([0x5Au8; 36]);
    let args = UnaryArgs {
        len: n as u32,
        op: act_code(Activation::Relu),
    };
    let mut bindings = [
        Binding::Bytes(args.as_bytes()),
        Binding::View {
            region: 0,
            offset: 64,
        },
        Binding::View {
            region: 0,
            offset: 64,
        },
    ];
    lib.dispatch_views(
        "unary_f32",
        &mut bindings,
        &mut [&mut arena],
        Grid::d1(2, 32),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let got = Dt::F32.decode(&arena[64..64 + 4 * n]);
    for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
        if i == 3 {
            assert!(g.is_nan());
        } else {
            assert_eq!(g, v.max(0.0), "[{i}]");
        }
    }
    assert!(arena[..64]
        .iter()
        .chain(&arena[64 + 4 * n..])
        .all(|&b| b == 0x5A));
}

#[test]
fn casts_round_to_nearest_even() {
    let lib = lib(Family::Elementwise);
    for &n in &SIZES {
        let mut x = uniform(n as u64, n, -70000.0, 70000.0);
        // ties and extremes: 1 + 2^-11 is a tie between two f16s, 65520 overflows
        x[0] = 1.0 + 1.0 / 2048.0;
        if n > 2 {
            x[1] = 65520.0;
            x[2] = 1e-8;
        }
        let args = CastArgs { len: n as u32 };
        let mut src = Dt::F32.encode(&x);
        let mut h = vec![0u8; n * 2];
        let groups = (n as u32).div_ceil(128);
        lib.dispatch(
            "cast_f32_f16",
            args.as_bytes(),
            &mut [&mut src, &mut h],
            Grid::d1(groups, 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let want: Vec<u8> = x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(h, want, "cast_f32_f16 n={n}");
        let mut back = vec![0u8; n * 4];
        lib.dispatch(
            "cast_f16_f32",
            args.as_bytes(),
            &mut [&mut h, &mut back],
            Grid::d1(groups, 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let want: Vec<f32> = Dt::F16.round(&x);
        let got = Dt::F32.decode(&back);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "cast_f16_f32 n={n} [{i}]");
        }
    }
}

/// `cast_trunc_f32` against Rust's `f32::trunc` bit for bit: odd sizes,
/// halves and near-integers of both signs, signed zeros, values past 2^24
/// (already integral), ±inf and NaN (kept, unlike an integer round trip).
#[test]
fn trunc_cast_rounds_toward_zero() {
    let lib = lib(Family::Elementwise);
    for &n in &SIZES {
        let mut x = uniform(7 + n as u64, n, -1000.0, 1000.0);
        let special = [
            2.5,
            -2.5,
            0.999_999_9,
            -0.999_999_9,
            -0.0,
            3e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for (v, s) in x.iter_mut().zip(special) {
            *v = s;
        }
        let args = CastArgs { len: n as u32 };
        let mut src = Dt::F32.encode(&x);
        let mut dst = vec![0u8; n * 4];
        lib.dispatch(
            "cast_trunc_f32",
            args.as_bytes(),
            &mut [&mut src, &mut dst],
            Grid::d1((n as u32).div_ceil(128), 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for (i, (g, v)) in Dt::F32.decode(&dst).iter().zip(&x).enumerate() {
            let w = v.trunc();
            let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
            assert!(
                same,
                "cast_trunc_f32 n={n} [{i}]: trunc({v}) = {g}, want {w}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// cast_host_<s>_<d>: CastHost's 81 kernels against the host's cast_numeric
// and against Rust's `as` written out here.
// ---------------------------------------------------------------------------

/// The dtypes with `cast_host_<s>_<d>` kernels.
const CAST_DTYPES: [DType; 9] = [
    DType::F32,
    DType::F16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::Bool,
];

/// Elements per cast: odd, past four threadgroups of 256.
const CAST_LEN: usize = 1037;

/// An element type of the host cast, read from / written to arena bytes.
trait CastEl: Numeric + Copy {
    const SIZE: usize;
    fn read(b: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
}

macro_rules! cast_el {
    ($($t:ty),*) => {$(
        impl CastEl for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().unwrap())
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend(self.to_le_bytes());
            }
        }
    )*};
}
cast_el!(f32, half::f16, i8, i16, i32, i64, u8, u32);

impl CastEl for Bool {
    const SIZE: usize = 1;
    fn read(b: &[u8]) -> Self {
        Bool(b[0])
    }
    fn write(self, out: &mut Vec<u8>) {
        out.push(self.0);
    }
}

/// The host kernel (`cast_numeric`, what `cast_host` runs) on raw bytes.
fn host_cast(s: DType, d: DType, src: &[u8]) -> Vec<u8> {
    fn go<S: CastEl, D: CastEl>(src: &[u8]) -> Vec<u8> {
        let x: Vec<S> = src.chunks_exact(S::SIZE).map(S::read).collect();
        let mut y = vec![D::read(&[0u8; 8][..D::SIZE]); x.len()];
        cast_numeric(&x, &mut y).unwrap();
        let mut out = Vec::with_capacity(y.len() * D::SIZE);
        y.into_iter().for_each(|v| v.write(&mut out));
        out
    }
    macro_rules! to {
        ($S:ty) => {
            match d {
                DType::F32 => go::<$S, f32>(src),
                DType::F16 => go::<$S, half::f16>(src),
                DType::I8 => go::<$S, i8>(src),
                DType::I16 => go::<$S, i16>(src),
                DType::I32 => go::<$S, i32>(src),
                DType::I64 => go::<$S, i64>(src),
                DType::U8 => go::<$S, u8>(src),
                DType::U32 => go::<$S, u32>(src),
                DType::Bool => go::<$S, Bool>(src),
                _ => unreachable!("{d}"),
            }
        };
    }
    match s {
        DType::F32 => to!(f32),
        DType::F16 => to!(half::f16),
        DType::I8 => to!(i8),
        DType::I16 => to!(i16),
        DType::I32 => to!(i32),
        DType::I64 => to!(i64),
        DType::U8 => to!(u8),
        DType::U32 => to!(u32),
        DType::Bool => to!(Bool),
        _ => unreachable!("{s}"),
    }
}

/// A source element decoded independently of the `half` crate: a float
/// (exact in f64) with its NaN sign and payload, or an integer value.
#[derive(Clone, Copy, Debug)]
enum Val {
    Float(f64),
    /// A NaN: sign, and its payload's top 22 bits (below the quiet bit).
    Nan(bool, u32),
    Int(i64),
}

/// Magnitude of the finite f16 with bits `b & 0x7fff` (0x7c00 reads as
/// 65536, the next step past the largest finite value).
fn f16_magnitude(b: u16) -> f64 {
    let (e, m) = (i32::from((b >> 10) & 0x1f), f64::from(b & 0x3ff));
    if e == 0 {
        m * 2f64.powi(-24)
    } else {
        (1024.0 + m) * 2f64.powi(e - 25)
    }
}

fn decode_val(s: DType, b: &[u8]) -> Val {
    let int = Val::Int;
    match s {
        DType::F32 => {
            let bits = u32::from_le_bytes(b.try_into().unwrap());
            let x = f32::from_bits(bits);
            if x.is_nan() {
                Val::Nan(bits >> 31 != 0, bits & 0x3f_ffff)
            } else {
                Val::Float(f64::from(x))
            }
        }
        DType::F16 => {
            let bits = u16::from_le_bytes(b.try_into().unwrap());
            let neg = bits >> 15 != 0;
            let a = bits & 0x7fff;
            if a > 0x7c00 {
                return Val::Nan(neg, u32::from(a & 0x1ff) << 13);
            }
            let m = if a == 0x7c00 {
                f64::INFINITY
            } else {
                f16_magnitude(a)
            };
            Val::Float(if neg { -m } else { m })
        }
        DType::I8 => int(i64::from(b[0] as i8)),
        DType::I16 => int(i64::from(i16::from_le_bytes(b.try_into().unwrap()))),
        DType::I32 => int(i64::from(i32::from_le_bytes(b.try_into().unwrap()))),
        DType::I64 => int(i64::from_le_bytes(b.try_into().unwrap())),
        DType::U8 => int(i64::from(b[0])),
        DType::U32 => int(i64::from(u32::from_le_bytes(b.try_into().unwrap()))),
        DType::Bool => int(i64::from(b[0] != 0)),
        _ => unreachable!("{s}"),
    }
}

/// f16 bits of `x`, rounded to nearest, ties to the even bit pattern, by
/// searching the finite f16 magnitudes (|x| >= 65520 rounds to inf).
fn f16_nearest_even(x: f64) -> u16 {
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    // largest finite pattern with magnitude <= a
    let (mut lo, mut hi) = (0u16, 0x7bffu16);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if f16_magnitude(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let (below, above) = (a - f16_magnitude(lo), f16_magnitude(lo + 1) - a);
    let up = above < below || (above == below && lo & 1 == 1);
    sign | if up { lo + 1 } else { lo }
}

/// `v` converted to `d` as Rust's `as` does (float → int truncates toward
/// zero and saturates, NaN → 0; int → int wraps; int → float rounds to
/// nearest even), anything → bool as `!= 0`; NaN → float stays a quiet NaN
/// with its sign and payload (x86 and ARM). Little-endian bytes.
fn expect_cast(v: Val, d: DType) -> Vec<u8> {
    macro_rules! num {
        ($t:ty) => {
            match v {
                Val::Float(x) => (x as $t).to_le_bytes().to_vec(),
                // `NaN as <int>` is 0
                Val::Nan(..) => <$t>::default().to_le_bytes().to_vec(),
                Val::Int(i) => (i as $t).to_le_bytes().to_vec(),
            }
        };
    }
    match d {
        DType::F32 => match v {
            Val::Nan(neg, p) => (u32::from(neg) << 31 | 0x7fc0_0000 | p)
                .to_le_bytes()
                .to_vec(),
            _ => num!(f32),
        },
        DType::F16 => {
            let bits = match v {
                Val::Float(x) => f16_nearest_even(x),
                // i64 → f64 is exact below 2^53; beyond, both are inf
                Val::Int(i) => f16_nearest_even(i as f64),
                Val::Nan(neg, p) => (u16::from(neg) << 15) | 0x7e00 | (p >> 13) as u16,
            };
            bits.to_le_bytes().to_vec()
        }
        DType::I8 => num!(i8),
        DType::I16 => num!(i16),
        DType::I32 => num!(i32),
        DType::I64 => num!(i64),
        DType::U8 => num!(u8),
        DType::U32 => num!(u32),
        DType::Bool => vec![u8::from(match v {
            Val::Float(x) => x != 0.0,
            Val::Nan(..) => true,
            Val::Int(i) => i != 0,
        })],
        _ => unreachable!("{d}"),
    }
}

/// xorshift64 words (no rand dependency).
fn words(seed: u64, n: usize) -> Vec<u64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

/// Float edge values: zeros, halves (ties of any rounding), each integer
/// type's min / max and the floats just past them, f16's overflow and
/// subnormal boundaries, ±inf, NaNs (quiet, signalling with a payload,
/// negative), subnormals.
fn float_edges() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        0.999_999_94,
        -0.999_999_94,
        1.0,
        -1.0,
        1e10,
        -1e10,
        3e38,
        -3e38,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fa0_0001),
        f32::from_bits(0xffc1_2345),
        f32::from_bits(0x7f80_2000),
        1e-40,
        -1e-40,
        f32::MIN_POSITIVE,
        65504.0,
        65519.996,
        65520.0,
        -65520.0,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        2f32.powi(-25),
        2f32.powi(-25) * 1.000_000_1,
        2f32.powi(-24),
        1.5 * 2f32.powi(-24),
        2.5 * 2f32.powi(-24),
        6.1e-5,
        16_777_216.0,
        16_777_218.0,
    ];
    // integer bounds: min, max, min - 1, max + 1 and fractions inside,
    // each rounded to the nearest f32 (2^31 - 1 is 2^31 there)
    for (lo, hi) in [
        (-128.0f64, 127.0f64),
        (-32768.0, 32767.0),
        (-2147483648.0, 2147483647.0),
        (i64::MIN as f64, i64::MAX as f64),
        (0.0, 255.0),
        (0.0, 4294967295.0),
    ] {
        for x in [
            lo,
            hi,
            lo - 1.0,
            hi + 1.0,
            lo - 0.5,
            hi + 0.5,
            lo + 0.75,
            hi - 0.75,
        ] {
            v.push(x as f32);
        }
        // the f32 neighbours of the bounds
        for x in [lo as f32, hi as f32] {
            v.push(f32::from_bits(x.to_bits() + 1));
            if x != 0.0 {
                v.push(f32::from_bits(x.to_bits() - 1));
            }
        }
    }
    v
}

/// Integer edge values (wrapped into the source type by the caller).
fn int_edges() -> Vec<i64> {
    let mut v = vec![
        0,
        1,
        -1,
        2,
        127,
        128,
        -128,
        -129,
        255,
        256,
        32767,
        32768,
        -32768,
        -32769,
        65504,
        65519,
        65520,
        -65520,
        65535,
        2047,
        2049,
        4097,
        4098,
        4099,
        (1 << 24) + 1,
        (1 << 24) + 3,
        (1 << 25) + 2,
        (1 << 25) + 6,
        -((1 << 24) + 1),
        i64::from(i32::MAX),
        i64::from(i32::MIN),
        1 << 31,
        i64::from(u32::MAX),
        1 << 32,
        (1 << 53) + 1,
        i64::MAX,
        i64::MIN,
        i64::MIN + 1,
        (1 << 62) + (1 << 38),
    ];
    v.extend(v.clone().iter().map(|x| x.wrapping_neg()));
    v
}

/// `CAST_LEN` source elements of dtype `s`: the edges first, then random
/// bit patterns (NaNs, subnormals, huge values) alternating with moderate
/// values and halves (the range where truncation and rounding differ).
fn cast_source(s: DType, seed: u64) -> Vec<u8> {
    let rnd = words(seed, CAST_LEN);
    let moderate = |w: u64| ((w >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1200.0;
    let mut out = Vec::new();
    match s {
        DType::F32 | DType::F16 => {
            let edges = float_edges();
            for (i, &w) in rnd.iter().enumerate() {
                let x = match edges.get(i) {
                    Some(&e) => e,
                    None if i % 2 == 0 => f32::from_bits(w as u32),
                    None if i % 4 == 1 => (moderate(w) * 2.0).round() / 2.0,
                    None => moderate(w),
                };
                if s == DType::F32 {
                    out.extend(x.to_bits().to_le_bytes());
                } else {
                    // f16 edges: the f32 ones rounded, NaN payloads and
                    // subnormals as bit patterns, then random patterns
                    let bits = match i.checked_sub(edges.len()) {
                        Some(0) => 0x7c01,
                        Some(1) => 0xfd55,
                        Some(2) => 0x0001,
                        Some(3) => 0x83ff,
                        Some(4) => 0x0400,
                        Some(5) => 0x7bff,
                        Some(6) => 0xfbff,
                        Some(j) if j % 2 == 0 => (w >> 16) as u16,
                        _ => half::f16::from_f32(x).to_bits(),
                    };
                    out.extend(bits.to_le_bytes());
                }
            }
        }
        DType::Bool => {
            let edges = [0u8, 1, 2, 0x80, 0xff, 0, 1];
            for (i, &w) in rnd.iter().enumerate() {
                out.push(match edges.get(i) {
                    Some(&e) => e,
                    None if i % 3 == 0 => (w >> 32) as u8,
                    None => (w >> 32) as u8 & 1,
                });
            }
        }
        _ => {
            let edges = int_edges();
            for (i, &w) in rnd.iter().enumerate() {
                let v = match edges.get(i) {
                    Some(&e) => e,
                    // small magnitudes too, or nearly all would saturate
                    None if i % 2 == 0 => (w >> 48) as i16 as i64,
                    None => w as i64,
                };
                let b = v.to_le_bytes();
                out.extend(&b[..s.size_bytes()]);
            }
        }
    }
    out
}

/// Every `cast_host_<s>_<d>` (the 81 pairs of the nine dtypes) on 1037
/// elements with edge values and random bit patterns, compared bit for bit
/// with the host's `cast_numeric` and with Rust's `as` semantics written
/// out in [`expect_cast`] (the host follows Rust's `as`: float → int
/// saturates, NaN → 0, which numpy leaves undefined).
#[test]
fn cast_host_kernels_match_host_bit_for_bit() {
    let lib = lib(Family::Elementwise);
    let args = CastArgs {
        len: CAST_LEN as u32,
    };
    for (si, &s) in CAST_DTYPES.iter().enumerate() {
        let src = cast_source(s, 11 + si as u64);
        let ssz = s.size_bytes();
        for (di, &d) in CAST_DTYPES.iter().enumerate() {
            let kernel = format!("cast_host_{}_{}", s.name(), d.name());
            let dsz = d.size_bytes();
            let mut src_buf = src.clone();
            let mut dst = vec![0xA5u8; CAST_LEN * dsz];
            let tpg = [256u32, 96, 64][(si + di) % 3];
            lib.dispatch(
                &kernel,
                args.as_bytes(),
                &mut [&mut src_buf, &mut dst],
                Grid::d1((CAST_LEN as u32).div_ceil(tpg), tpg),
                &[],
            )
            .unwrap_or_else(|e| panic!("{kernel}: {e}"));
            let host = host_cast(s, d, &src);
            for i in 0..CAST_LEN {
                let x = &src[i * ssz..(i + 1) * ssz];
                let got = &dst[i * dsz..(i + 1) * dsz];
                let want = expect_cast(decode_val(s, x), d);
                assert_eq!(
                    got,
                    &host[i * dsz..(i + 1) * dsz],
                    "{kernel}[{i}] of {x:02x?}: kernel vs host"
                );
                assert_eq!(got, &want[..], "{kernel}[{i}] of {x:02x?}: vs Rust `as`");
            }
        }
    }
}
