//! Training gradients, f32 unless a `dt` field says otherwise: adaLN /
//! gated residual (packed outputs), RMSNorm (input, gamma, beta),
//! RoPE, cumsum, gather, max-pool and conv2d.
//!
//! Every operand a gradient thunk names is reported read, even where the
//! formula does not need it (RMSNorm's beta): that keeps the operand alive
//! for kernels that recompute the forward.

use super::conv::{conv_dims, ConvDims};
use super::io::{bytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// adaLN gradient. `rows = seq_per_mod · mod_rows` rows of `h`; x / dy
/// `[rows, h]`, scale `[mod_rows, h]`; out packed `[dx (rows·h) ∥ dscale
/// (mod_rows·h) ∥ dshift (mod_rows·h)]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaLayerNormBackward {
    /// Forward input.
    pub x: usize,
    /// Forward scale.
    pub scale: usize,
    /// Upstream gradient.
    pub dy: usize,
    /// Packed gradients.
    pub out: usize,
    /// Features per row.
    pub h: u32,
    /// Epsilon.
    pub eps: f32,
    /// LayerNorm (else RMSNorm).
    pub layer_norm: bool,
    /// Rows sharing one modulation row.
    pub seq_per_mod: u32,
    /// Modulation rows.
    pub mod_rows: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for AdaLayerNormBackward {
    const NAME: &'static str = "ada_layer_norm_backward";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let x = bytes(&[self.seq_per_mod, self.mod_rows, self.h], es);
        let m = bytes(&[self.mod_rows, self.h], es);
        ThunkIo::new()
            .read(self.x, x)
            .read(self.scale, m)
            .read(self.dy, x)
            .write(self.out, x.saturating_add(m.saturating_mul(2)))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.layer_norm { "ln" } else { "rms" };
        write!(
            f,
            "{kind} h={} seq_per_mod={} mod_rows={} {} x={} dy={} out={}",
            self.h,
            self.seq_per_mod,
            self.mod_rows,
            self.dt,
            Off(self.x),
            Off(self.dy),
            Off(self.out)
        )
    }
}

/// Gated-residual gradient: y / dy `[rows, h]` (`rows = seq_per_mod ·
/// mod_rows`), gate `[mod_rows, h]`; out packed `[dx (rows·h) ∥ dy_branch
/// (rows·h) ∥ dgate (mod_rows·h)]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatedResidualBackward {
    /// Forward branch output.
    pub y: usize,
    /// Forward gate.
    pub gate: usize,
    /// Upstream gradient.
    pub dy: usize,
    /// Packed gradients.
    pub out: usize,
    /// Features per row.
    pub h: u32,
    /// Rows sharing one gate row.
    pub seq_per_mod: u32,
    /// Gate rows.
    pub mod_rows: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for GatedResidualBackward {
    const NAME: &'static str = "gated_residual_backward";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let x = bytes(&[self.seq_per_mod, self.mod_rows, self.h], es);
        let m = bytes(&[self.mod_rows, self.h], es);
        ThunkIo::new()
            .read(self.y, x)
            .read(self.gate, m)
            .read(self.dy, x)
            .write(self.out, x.saturating_mul(2).saturating_add(m))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "h={} seq_per_mod={} mod_rows={} {} y={} dy={} out={}",
            self.h,
            self.seq_per_mod,
            self.mod_rows,
            self.dt,
            Off(self.y),
            Off(self.dy),
            Off(self.out)
        )
    }
}

/// Generates the three RMSNorm gradient thunks: same operands
/// (`x [rows, h]`, gamma / beta `[h]`, `dy [rows, h]`), a different output.
macro_rules! rms_norm_backward {
    ($(#[$doc:meta])* $name:ident, $label:literal, $out:ident, $out_doc:literal, full_rows: $full:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Forward input `[rows, h]`.
            pub x: usize,
            /// Gamma `[h]`.
            pub gamma: usize,
            /// Beta `[h]`.
            pub beta: usize,
            /// Upstream gradient `[rows, h]`.
            pub dy: usize,
            #[doc = $out_doc]
            pub $out: usize,
            /// Rows.
            pub rows: u32,
            /// Features per row.
            pub h: u32,
            /// Epsilon.
            pub eps: f32,
        }

        impl ThunkOp for $name {
            const NAME: &'static str = $label;
            fn io(&self) -> ThunkIo {
                let x = bytes(&[self.rows, self.h], F32);
                let v = bytes(&[self.h], F32);
                ThunkIo::new()
                    .read(self.x, x)
                    .read(self.gamma, v)
                    .read(self.beta, v)
                    .read(self.dy, x)
                    .write(self.$out, if $full { x } else { v })
            }
            fn safe_for_active_extent(&self) -> bool {
                true
            }
            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "rows={} h={} eps={:e} x={} dy={} {}={}",
                    self.rows,
                    self.h,
                    self.eps,
                    Off(self.x),
                    Off(self.dy),
                    stringify!($out),
                    Off(self.$out)
                )
            }
        }
    };
}

rms_norm_backward!(
    /// RMSNorm gradient w.r.t. the input: writes `dx [rows, h]`.
    RmsNormBackwardInput, "rms_norm_backward_input", dx, "Input gradient `[rows, h]`.", full_rows: true
);
rms_norm_backward!(
    /// RMSNorm gradient w.r.t. gamma: writes `dgamma [h]`.
    RmsNormBackwardGamma, "rms_norm_backward_gamma", dgamma, "Gamma gradient `[h]`.", full_rows: false
);
rms_norm_backward!(
    /// RMSNorm gradient w.r.t. beta: writes `dbeta [h]`.
    RmsNormBackwardBeta, "rms_norm_backward_beta", dbeta, "Beta gradient `[h]`.", full_rows: false
);

/// RoPE gradient (inverse rotation) on dense `[batch, seq, hidden]`;
/// cos / sin are f32 tables of `cos_len` elements each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeBackward {
    /// Upstream gradient.
    pub dy: usize,
    /// cos table.
    pub cos: usize,
    /// sin table.
    pub sin: usize,
    /// Input gradient.
    pub dx: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Row width.
    pub hidden: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Rotated dims per head.
    pub n_rot: u32,
    /// Elements in each of cos and sin.
    pub cos_len: u32,
}

impl ThunkOp for RopeBackward {
    const NAME: &'static str = "rope_backward";
    fn io(&self) -> ThunkIo {
        let x = bytes(&[self.batch, self.seq, self.hidden], F32);
        let t = bytes(&[self.cos_len], F32);
        ThunkIo::new()
            .read(self.dy, x)
            .read(self.cos, t)
            .read(self.sin, t)
            .write(self.dx, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b={} s={} hidden={} d={} n_rot={} dy={} dx={}",
            self.batch,
            self.seq,
            self.hidden,
            self.head_dim,
            self.n_rot,
            Off(self.dy),
            Off(self.dx)
        )
    }
}

/// Cumsum gradient (reverse prefix sum) over `[rows, cols]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CumsumBackward {
    /// Upstream gradient.
    pub dy: usize,
    /// Input gradient.
    pub dx: usize,
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
    /// The forward was exclusive.
    pub exclusive: bool,
}

impl ThunkOp for CumsumBackward {
    const NAME: &'static str = "cumsum_backward";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.rows, self.cols], F32);
        ThunkIo::new().read(self.dy, n).write(self.dx, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ex = if self.exclusive { " exclusive" } else { "" };
        write!(
            f,
            "rows={} cols={}{ex} dy={} dx={}",
            self.rows,
            self.cols,
            Off(self.dy),
            Off(self.dx)
        )
    }
}

/// GatherAxis gradient: `dst [outer, axis_dim, trailing]` = zeros with
/// `dy [outer, num_idx, trailing]` rows added at i32 `indices [num_idx]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherBackward {
    /// Upstream gradient.
    pub dy: usize,
    /// Indices i32.
    pub indices: usize,
    /// Table gradient.
    pub dst: usize,
    /// Product of dims before the axis.
    pub outer: u32,
    /// Table axis length.
    pub axis_dim: u32,
    /// Indices.
    pub num_idx: u32,
    /// Product of dims after the axis.
    pub trailing: u32,
}

impl ThunkOp for GatherBackward {
    const NAME: &'static str = "gather_backward";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.dy,
                bytes(&[self.outer, self.num_idx, self.trailing], F32),
            )
            .read(self.indices, bytes(&[self.num_idx], IDX))
            .write(
                self.dst,
                bytes(&[self.outer, self.axis_dim, self.trailing], F32),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outer={} axis={} num_idx={} trailing={} dy={} dst={}",
            self.outer,
            self.axis_dim,
            self.num_idx,
            self.trailing,
            Off(self.dy),
            Off(self.dst)
        )
    }
}

/// Max-pool gradient: x `[n, c, h, w]`, dy `[n, c, h_out, w_out]` → dx
/// `[n, c, h, w]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxPool2dBackward {
    /// Forward input.
    pub x: usize,
    /// Upstream gradient.
    pub dy: usize,
    /// Input gradient.
    pub dx: usize,
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Window height.
    pub kh: u32,
    /// Window width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
}

impl ThunkOp for MaxPool2dBackward {
    const NAME: &'static str = "maxpool2d_backward";
    fn io(&self) -> ThunkIo {
        let x = bytes(&[self.n, self.c, self.h, self.w], F32);
        ThunkIo::new()
            .read(self.x, x)
            .read(
                self.dy,
                bytes(&[self.n, self.c, self.h_out, self.w_out], F32),
            )
            .write(self.dx, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{},{},{},{}] out={}x{} k={}x{} x={} dy={} dx={}",
            self.n,
            self.c,
            self.h,
            self.w,
            self.h_out,
            self.w_out,
            self.kh,
            self.kw,
            Off(self.x),
            Off(self.dy),
            Off(self.dx)
        )
    }
}

/// Conv2d gradient w.r.t. the input: dy `[n, c_out, h_out, w_out]`, weight
/// `[c_out, c_in / groups, kh, kw]` → dx `[n, c_in, h, w_in]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv2dBackwardInput {
    /// Upstream gradient.
    pub dy: usize,
    /// Forward weight.
    pub w: usize,
    /// Input gradient.
    pub dx: usize,
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w_in: u32,
    /// Output channels.
    pub c_out: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Kernel height.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
    /// Dilation along h.
    pub dh: u32,
    /// Dilation along w.
    pub dw: u32,
    /// Groups.
    pub groups: u32,
}

conv_dims!(Conv2dBackwardInput, [dy, w, dx], w_in, dw);

impl ThunkOp for Conv2dBackwardInput {
    const NAME: &'static str = "conv2d_backward_input";
    fn io(&self) -> ThunkIo {
        let d = self.dims();
        ThunkIo::new()
            .read(self.dy, d.y_bytes(F32))
            .read(self.w, d.weight_bytes(F32))
            .write(self.dx, d.x_bytes(F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{},{},{},{}]<-[{},{},{}] k={}x{} g={} dy={} w={} dx={}",
            self.n,
            self.c_in,
            self.h,
            self.w_in,
            self.c_out,
            self.h_out,
            self.w_out,
            self.kh,
            self.kw,
            self.groups,
            Off(self.dy),
            Off(self.w),
            Off(self.dx)
        )
    }
}

/// Conv2d gradient w.r.t. the weight: x `[n, c_in, h, w]`, dy `[n, c_out,
/// h_out, w_out]` → dw `[c_out, c_in / groups, kh, kw]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv2dBackwardWeight {
    /// Forward input.
    pub x: usize,
    /// Upstream gradient.
    pub dy: usize,
    /// Weight gradient.
    pub dw: usize,
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output channels.
    pub c_out: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Kernel height.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
    /// Dilation along h.
    pub dh: u32,
    /// Dilation along w.
    pub dw_dil: u32,
    /// Groups.
    pub groups: u32,
}

conv_dims!(Conv2dBackwardWeight, [x, dy, dw], w, dw_dil);

impl ThunkOp for Conv2dBackwardWeight {
    const NAME: &'static str = "conv2d_backward_weight";
    fn io(&self) -> ThunkIo {
        let d = self.dims();
        ThunkIo::new()
            .read(self.x, d.x_bytes(F32))
            .read(self.dy, d.y_bytes(F32))
            .write(self.dw, d.weight_bytes(F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{},{},{},{}] c_out={} k={}x{} g={} x={} dy={} dw={}",
            self.n,
            self.c_in,
            self.h,
            self.w,
            self.c_out,
            self.kh,
            self.kw,
            self.groups,
            Off(self.x),
            Off(self.dy),
            Off(self.dw)
        )
    }
}
