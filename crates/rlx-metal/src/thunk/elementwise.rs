//! Unary elementwise thunks: casts, activations and SwiGLU (binary and
//! ternary ops live in [`super::binary`]).
//!
//! All operands are dense buffers of `len` elements unless a struct says
//! otherwise. Thunks without a dtype field are f32.

use super::io::{bytes, ThunkIo, F32};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use rlx_ir::op::Activation;
use rlx_ir::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Defines a cast thunk `dst[i] = src[i] as dst_dt` over `len` elements
/// whose dtype fields are `$dt`, sized in bytes by `$dt::$size`.
macro_rules! cast_thunk {
    ($(#[$doc:meta])* $name:ident, $kernel:literal, $dt:ty, $size:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Source offset.
            pub src: usize,
            /// Destination offset.
            pub dst: usize,
            /// Elements.
            pub len: u32,
            #[doc = concat!("Source ", $what, ".")]
            pub src_dt: $dt,
            #[doc = concat!("Destination ", $what, ".")]
            pub dst_dt: $dt,
        }

        impl ThunkOp for $name {
            const NAME: &'static str = $kernel;
            fn io(&self) -> ThunkIo {
                ThunkIo::new()
                    .read(self.src, bytes(&[self.len], self.src_dt.$size()))
                    .write(self.dst, bytes(&[self.len], self.dst_dt.$size()))
            }
            fn safe_for_active_extent(&self) -> bool {
                true
            }
            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let (s, d) = (self.src_dt, self.dst_dt);
                write!(
                    f,
                    "len={} {s}->{d} src={} dst={}",
                    self.len,
                    Off(self.src),
                    Off(self.dst)
                )
            }
        }
    };
}

cast_thunk!(
    /// Cast between f32 and f16, same element count.
    Cast,
    "cast",
    HalfFlag,
    size,
    "element type"
);

cast_thunk!(
    /// Cast between any dtypes with their real widths (integer truncation /
    /// widening, bool), done on the host.
    CastHost,
    "cast_host",
    DType,
    size_bytes,
    "dtype (its real size is used)"
);

/// Defines an f32 → f32 unary thunk over `len` dense elements.
macro_rules! f32_unary {
    ($(#[$doc:meta])* $name:ident, $kernel:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Source offset (f32).
            pub src: usize,
            /// Destination offset (f32).
            pub dst: usize,
            /// Elements.
            pub len: u32,
        }

        impl ThunkOp for $name {
            const NAME: &'static str = $kernel;
            fn io(&self) -> ThunkIo {
                let n = bytes(&[self.len], F32);
                ThunkIo::new().read(self.src, n).write(self.dst, n)
            }
            fn safe_for_active_extent(&self) -> bool {
                true
            }
            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "len={} src={} dst={}",
                    self.len,
                    Off(self.src),
                    Off(self.dst)
                )
            }
        }
    };
}

f32_unary!(
    /// Truncate f32 toward zero into an f32 slot (integer semantics kept in a
    /// float arena).
    CastTruncF32,
    "cast_trunc_f32"
);

/// `data[i] = act(data[i])` in place.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivationInPlace {
    /// Buffer updated in place.
    pub data: usize,
    /// Elements.
    pub len: u32,
    /// The function.
    pub act: Activation,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for ActivationInPlace {
    const NAME: &'static str = "activation";
    fn io(&self) -> ThunkIo {
        ThunkIo::new().update(self.data, bytes(&[self.len], self.dt.size()))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let act = self.act.name();
        write!(
            f,
            "{act} len={} {} data={}",
            self.len,
            self.dt,
            Off(self.data)
        )
    }
}

/// `dst[i] = act(src[i])`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivationOut {
    /// Source offset.
    pub src: usize,
    /// Destination offset.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// The function.
    pub act: Activation,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for ActivationOut {
    const NAME: &'static str = "activation_out";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], self.dt.size());
        ThunkIo::new().read(self.src, n).write(self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let act = self.act.name();
        let (s, d) = (Off(self.src), Off(self.dst));
        write!(f, "{act} len={} {} src={s} dst={d}", self.len, self.dt)
    }
}

/// `dst[i] = gelu_tanh(src[i])`, f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeluApproxOut {
    /// Source offset (f32).
    pub src: usize,
    /// Destination offset (f32).
    pub dst: usize,
    /// Elements.
    pub len: u32,
}

impl ThunkOp for GeluApproxOut {
    const NAME: &'static str = "gelu_approx_out";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.len], F32);
        ThunkIo::new().read(self.src, n).write(self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "len={} src={} dst={}",
            self.len,
            Off(self.src),
            Off(self.dst)
        )
    }
}

f32_unary!(
    /// Host `dst[i] = gelu_tanh(src[i])`, f32 (for arenas the GPU kernels do
    /// not address).
    GeluApproxHost,
    "gelu_approx_host"
);

/// SwiGLU: `dst[r, i] = x[r, i] * silu(x[r, n_half + i])` (or the gate
/// half first). `total` is the number of *output* elements
/// (`rows · n_half`); the source holds `2 · total` elements in `src_dt`,
/// the destination `total` in `dst_dt`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedSwiGLU {
    /// Source `[rows, 2·n_half]`.
    pub src: usize,
    /// Destination `[rows, n_half]`.
    pub dst: usize,
    /// Half width of a source row.
    pub n_half: u32,
    /// Output elements (`rows · n_half`).
    pub total: u32,
    /// Source element type.
    pub src_dt: HalfFlag,
    /// Destination element type.
    pub dst_dt: HalfFlag,
    /// Gate is the first half of each row.
    pub gate_first: bool,
}

impl ThunkOp for FusedSwiGLU {
    const NAME: &'static str = "fused_swiglu";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.src, bytes(&[2, self.total], self.src_dt.size()))
            .write(self.dst, bytes(&[self.total], self.dst_dt.size()))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, d) = (Off(self.src), Off(self.dst));
        let gf = if self.gate_first { " gate_first" } else { "" };
        write!(
            f,
            "n_half={} total={} {}->{}{gf} src={s} dst={d}",
            self.n_half, self.total, self.src_dt, self.dst_dt
        )
    }
}
