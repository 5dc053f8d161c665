//! Normalisations: LayerNorm, RMSNorm, GroupNorm, LayerNorm2d, the fused
//! residual + norm thunks, DiT adaLN / gated residual, and the GDN gated
//! norm.
//!
//! Row norms work on `[rows, h]` with per-feature `g`/`b` of `[h]`; NCHW
//! norms on `[n, c, h, w]` with per-channel `g`/`b` of `[c]`. Every named
//! operand is read (RMSNorm's `b` included: lowering binds a zero row when
//! the op has no beta), except a bias whose `has_bias` flag is off.

use super::io::{bytes, nbytes, ThunkIo};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Rows of a DiT modulation tensor from a lead pack
/// `[lead_rank, x_lead[8], mod_lead[8]]`: the product of the first
/// `lead_rank` (at most 8) modulation lead dims. Scale / shift / gate read
/// `mod_rows · h` elements.
pub fn lead_pack_mod_rows(lead_pack: &[u32; 17]) -> usize {
    let rank = (lead_pack[0] as usize).min(8);
    super::io::numel(&lead_pack[9..9 + rank])
}

/// Shared description of row norms.
fn fmt_row_norm(
    f: &mut fmt::Formatter<'_>,
    rows: u32,
    h: u32,
    eps: f32,
    dt: HalfFlag,
) -> fmt::Result {
    write!(f, "rows={rows} h={h} eps={eps:e} {dt}")
}

/// Defines a row norm thunk `dst = norm(src) · g + b` over `[rows, h]`
/// (LayerNorm and RMSNorm share their operands and layout).
macro_rules! row_norm {
    ($(#[$doc:meta])* $name:ident, $kernel:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Input `[rows, h]`.
            pub src: usize,
            /// Gamma `[h]`.
            pub g: usize,
            /// Beta `[h]` (zeros when the model has none).
            pub b: usize,
            /// Output `[rows, h]`.
            pub dst: usize,
            /// Rows.
            pub rows: u32,
            /// Features per row.
            pub h: u32,
            /// Epsilon.
            pub eps: f32,
            /// Element type.
            pub dt: HalfFlag,
        }

        impl ThunkOp for $name {
            const NAME: &'static str = $kernel;
            fn io(&self) -> ThunkIo {
                let es = self.dt.size();
                affine_norm_io(
                    [self.src, self.g, self.b, self.dst],
                    bytes(&[self.rows, self.h], es),
                    bytes(&[self.h], es),
                )
            }
            fn safe_for_active_extent(&self) -> bool {
                true
            }
            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt_row_norm(f, self.rows, self.h, self.eps, self.dt)?;
                let (s, g, b, d) = (Off(self.src), Off(self.g), Off(self.b), Off(self.dst));
                write!(f, " src={s} g={g} b={b} dst={d}")
            }
        }
    };
}

/// io of a norm with an affine `g`, `b`: reads `x` bytes of `src` and `v`
/// bytes of each of `g` and `b`, writes `x` bytes of `dst`.
fn affine_norm_io([src, g, b, dst]: [usize; 4], x: usize, v: usize) -> ThunkIo {
    ThunkIo::new()
        .read(src, x)
        .read(g, v)
        .read(b, v)
        .write(dst, x)
}

row_norm!(
    /// `dst = (src - mean) / sqrt(var + eps) · g + b` per row.
    LayerNorm,
    "layer_norm"
);

row_norm!(
    /// `dst = src / sqrt(mean(src²) + eps) · g + b` per row.
    RmsNorm,
    "rms_norm"
);

/// GroupNorm on NCHW: statistics over `c / num_groups` channels × `h·w`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupNorm {
    /// Input `[n, c, h, w]`.
    pub src: usize,
    /// Gamma `[c]`.
    pub g: usize,
    /// Beta `[c]`.
    pub b: usize,
    /// Output `[n, c, h, w]`.
    pub dst: usize,
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Height.
    pub h: u32,
    /// Width.
    pub w: u32,
    /// Groups (divides `c`).
    pub num_groups: u32,
    /// Epsilon.
    pub eps: f32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for GroupNorm {
    const NAME: &'static str = "group_norm";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        affine_norm_io(
            [self.src, self.g, self.b, self.dst],
            bytes(&[self.n, self.c, self.h, self.w], es),
            bytes(&[self.c], es),
        )
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, c, h, w) = (self.n, self.c, self.h, self.w);
        write!(
            f,
            "nchw=[{n},{c},{h},{w}] groups={} eps={:e} {}",
            self.num_groups, self.eps, self.dt
        )?;
        write!(f, " src={} dst={}", Off(self.src), Off(self.dst))
    }
}

/// LayerNorm across channels at each spatial position of NCHW.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerNorm2d {
    /// Input `[n, c, h, w]`.
    pub src: usize,
    /// Gamma `[c]`.
    pub g: usize,
    /// Beta `[c]`.
    pub b: usize,
    /// Output `[n, c, h, w]`.
    pub dst: usize,
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Height.
    pub h: u32,
    /// Width.
    pub w: u32,
    /// Epsilon.
    pub eps: f32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for LayerNorm2d {
    const NAME: &'static str = "layer_norm2d";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        affine_norm_io(
            [self.src, self.g, self.b, self.dst],
            bytes(&[self.n, self.c, self.h, self.w], es),
            bytes(&[self.c], es),
        )
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, c, h, w) = (self.n, self.c, self.h, self.w);
        write!(f, "nchw=[{n},{c},{h},{w}] eps={:e} {}", self.eps, self.dt)?;
        write!(f, " src={} dst={}", Off(self.src), Off(self.dst))
    }
}

/// Defines a fused residual row norm thunk `out = norm(x + res (+ bias),
/// g, b)` (the LayerNorm and RMSNorm forms share their operands).
macro_rules! residual_norm {
    ($(#[$doc:meta])* $name:ident, $kernel:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Input `[rows, h]`.
            pub x: usize,
            /// Residual `[rows, h]`.
            pub res: usize,
            /// Bias `[h]` (read only when `has_bias`).
            pub bias: usize,
            /// Gamma `[h]`.
            pub g: usize,
            /// Beta `[h]`.
            pub b: usize,
            /// Output `[rows, h]`.
            pub out: usize,
            /// Rows.
            pub rows: u32,
            /// Features per row.
            pub h: u32,
            /// Epsilon.
            pub eps: f32,
            /// Whether `bias` is present.
            pub has_bias: bool,
            /// Element type.
            pub dt: HalfFlag,
        }

        impl ThunkOp for $name {
            const NAME: &'static str = $kernel;
            fn io(&self) -> ThunkIo {
                let es = self.dt.size();
                let xb = bytes(&[self.rows, self.h], es);
                let v = bytes(&[self.h], es);
                ThunkIo::new()
                    .read(self.x, xb)
                    .read(self.res, xb)
                    .read_if(self.has_bias, self.bias, v)
                    .read(self.g, v)
                    .read(self.b, v)
                    .write(self.out, xb)
            }
            fn safe_for_active_extent(&self) -> bool {
                true
            }
            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt_row_norm(f, self.rows, self.h, self.eps, self.dt)?;
                let (x, r, o) = (Off(self.x), Off(self.res), Off(self.out));
                write!(f, " bias={} x={x} res={r} out={o}", self.has_bias)
            }
        }
    };
}

residual_norm!(
    /// `out = LayerNorm(x + res (+ bias), g, b)`.
    FusedResidualLN,
    "fused_residual_ln"
);

residual_norm!(
    /// `out = RmsNorm(x + res (+ bias), g, b)`.
    FusedResidualRmsNorm,
    "fused_residual_rms_norm"
);

/// DiT adaLN-Zero: `out = norm(x) · (1 + scale) + shift`; scale / shift
/// are `[mod_rows, h]` broadcast over x's lead dims as `lead_pack` says
/// (see [`lead_pack_mod_rows`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdaLayerNorm {
    /// Input `[rows, h]`.
    pub x: usize,
    /// Scale `[mod_rows, h]`.
    pub scale: usize,
    /// Shift `[mod_rows, h]`.
    pub shift: usize,
    /// Output `[rows, h]`.
    pub out: usize,
    /// Rows of `x`.
    pub rows: u32,
    /// Features per row.
    pub h: u32,
    /// Epsilon.
    pub eps: f32,
    /// LayerNorm (else RMSNorm).
    pub layer_norm: bool,
    /// `[lead_rank, x_lead[8], mod_lead[8]]`.
    pub lead_pack: [u32; 17],
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for AdaLayerNorm {
    const NAME: &'static str = "ada_layer_norm";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let x = bytes(&[self.rows, self.h], es);
        let m = nbytes(lead_pack_mod_rows(&self.lead_pack), bytes(&[self.h], es));
        ThunkIo::new()
            .read(self.x, x)
            .read(self.scale, m)
            .read(self.shift, m)
            .write(self.out, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_row_norm(f, self.rows, self.h, self.eps, self.dt)?;
        let kind = if self.layer_norm { "ln" } else { "rms" };
        let mods = lead_pack_mod_rows(&self.lead_pack);
        write!(
            f,
            " {kind} mod_rows={mods} x={} out={}",
            Off(self.x),
            Off(self.out)
        )
    }
}

/// DiT gated residual: `out = x + gate · y`, gate `[mod_rows, h]`
/// broadcast as `lead_pack` says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatedResidual {
    /// Residual stream `[rows, h]`.
    pub x: usize,
    /// Branch output `[rows, h]`.
    pub y: usize,
    /// Gate `[mod_rows, h]`.
    pub gate: usize,
    /// Output `[rows, h]`.
    pub out: usize,
    /// Rows.
    pub rows: u32,
    /// Features per row.
    pub h: u32,
    /// `[lead_rank, x_lead[8], mod_lead[8]]`.
    pub lead_pack: [u32; 17],
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for GatedResidual {
    const NAME: &'static str = "gated_residual";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let x = bytes(&[self.rows, self.h], es);
        let m = nbytes(lead_pack_mod_rows(&self.lead_pack), bytes(&[self.h], es));
        ThunkIo::new()
            .read(self.x, x)
            .read(self.y, x)
            .read(self.gate, m)
            .write(self.out, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mods = lead_pack_mod_rows(&self.lead_pack);
        let (x, y, g, o) = (Off(self.x), Off(self.y), Off(self.gate), Off(self.out));
        write!(
            f,
            "rows={} h={} mod_rows={mods} {} x={x} y={y} gate={g} out={o}",
            self.rows, self.h, self.dt
        )
    }
}

/// GDN gated norm: `out = rms_norm(x, g, b) · silu(z)`, all `[rows, h]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedRmsNormMulSilu {
    /// Input `[rows, h]`.
    pub x: usize,
    /// Gamma `[h]`.
    pub g: usize,
    /// Beta `[h]`.
    pub b: usize,
    /// Gate input `[rows, h]`.
    pub z: usize,
    /// Output `[rows, h]`.
    pub out: usize,
    /// Rows.
    pub rows: u32,
    /// Features per row.
    pub h: u32,
    /// Epsilon.
    pub eps: f32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for FusedRmsNormMulSilu {
    const NAME: &'static str = "fused_rms_norm_mul_silu";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let x = bytes(&[self.rows, self.h], es);
        let v = bytes(&[self.h], es);
        ThunkIo::new()
            .read(self.x, x)
            .read(self.g, v)
            .read(self.b, v)
            .read(self.z, x)
            .write(self.out, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_row_norm(f, self.rows, self.h, self.eps, self.dt)?;
        let (x, z, o) = (Off(self.x), Off(self.z), Off(self.out));
        write!(f, " x={x} z={z} out={o}")
    }
}
