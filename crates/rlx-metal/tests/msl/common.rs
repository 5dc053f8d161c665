//! Shared helpers: compiled libraries per family, f32 / f16 encoding,
//! deterministic inputs and the tolerance check.

use msl_sim::{Grid, Library};
use rlx_metal::metal::kernels::{source, Family};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The family's self-contained source compiled by msl-sim (once per process).
pub fn lib(f: Family) -> Library {
    static LIBS: OnceLock<Mutex<HashMap<Family, Library>>> = OnceLock::new();
    let mut libs = LIBS.get_or_init(Default::default).lock().unwrap();
    libs.entry(f)
        .or_insert_with(|| {
            Library::from_source(f.file(), &source(f)).unwrap_or_else(|e| panic!("{e}"))
        })
        .clone()
}

/// Element type of a kernel variant, with its stated tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dt {
    F32,
    F16,
}

pub const DTS: [Dt; 2] = [Dt::F32, Dt::F16];

impl Dt {
    /// F16 when `f16`, else F32.
    pub fn of(f16: bool) -> Dt {
        if f16 {
            Dt::F16
        } else {
            Dt::F32
        }
    }

    pub fn suffix(self) -> &'static str {
        match self {
            Dt::F32 => "f32",
            Dt::F16 => "f16",
        }
    }

    /// Values as this type would hold them (inputs are rounded first so
    /// that the reference starts from the kernel's exact inputs).
    pub fn round(self, v: &[f32]) -> Vec<f32> {
        match self {
            Dt::F32 => v.to_vec(),
            Dt::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        }
    }

    pub fn encode(self, v: &[f32]) -> Vec<u8> {
        match self {
            Dt::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Dt::F16 => v
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
        }
    }

    pub fn decode(self, b: &[u8]) -> Vec<f32> {
        match self {
            Dt::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            Dt::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f32())
                .collect(),
        }
    }
}

impl Dt {
    /// [`Dt::decode`] widened to f64 (exact).
    pub fn decode_f64(self, b: &[u8]) -> Vec<f64> {
        self.decode(b).into_iter().map(f64::from).collect()
    }
}

/// One `#[test]` per `name => GgmlType variant`, each calling the invoking
/// module's `check_type(GgmlType::$ty)`.
#[macro_export]
macro_rules! ggml_type_tests {
    ($($name:ident => $ty:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            check_type(GgmlType::$ty);
        }
    )*};
}

/// Deterministic uniform values in [lo, hi) (xorshift; no rand dependency).
pub fn uniform(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// `|got - want| <= atol + rtol * |want|` elementwise (NaN must match NaN).
pub fn assert_close(what: &str, got: &[f32], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || g.is_nan() {
            assert!(w.is_nan() && g.is_nan(), "{what}[{i}]: got {g}, want {w}");
            continue;
        }
        if w.is_infinite() {
            assert_eq!(g as f64, w, "{what}[{i}]");
            continue;
        }
        let err = (g as f64 - w).abs() - (atol + rtol * w.abs());
        if err > worst.0 {
            worst = (err, i);
        }
    }
    let i = worst.1;
    assert!(
        worst.0 <= 0.0,
        "{what}[{i}]: got {}, want {} (atol {atol:e}, rtol {rtol:e})",
        got[i],
        want[i]
    );
}

/// Dispatches `kernel` of `lib` over `grid` with `inputs` encoded as `dt`
/// and a zeroed `n`-element output bound after them (panicking with the
/// kernel's name on a failure); returns the decoded output.
pub fn run_dense(
    lib: &Library,
    kernel: &str,
    args: &[u8],
    dt: Dt,
    inputs: &[&[f32]],
    n: usize,
    grid: Grid,
) -> Vec<f32> {
    let mut bufs: Vec<Vec<u8>> = inputs.iter().map(|v| dt.encode(v)).collect();
    bufs.push(dt.encode(&vec![0.0; n]));
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    lib.dispatch(kernel, args, &mut refs, grid, &[])
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    dt.decode(&bufs[inputs.len()])
}

/// Threads per threadgroup for a row of `n` elements: min(1024, n rounded
/// up to 32), the host's choice.
pub fn row_threads(n: u32) -> u32 {
    n.div_ceil(32).clamp(1, 32) * 32
}
