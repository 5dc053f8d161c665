//! Host-side thunks: user custom ops (host and raw-GPU), SPD-manifold ops,
//! general scans and nested-body ops run as one-op host evaluations,
//! random fills and vector-quantiser assignment.
//!
//! The seed binds these to its runtime (`Arc<dyn Kernel>`, the CPU
//! crate's descriptors); here they are plain data: a registered op name,
//! an [`rlx_ir::Op`], an [`rlx_ir::Graph`] body, and operand offsets with
//! sizes.

use super::io::{bytes, nbytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::ThunkOp;
use rlx_ir::{Graph, Op, Shape};
use serde::{Deserialize, Serialize};
use std::fmt;

/// `(byte offset, elements, shape)` of a custom-op operand.
pub type CustomOperand = (usize, u32, Shape);

/// Bytes of a custom operand: elements × the shape's dtype size.
fn custom_bytes(op: &CustomOperand) -> usize {
    bytes(&[op.1], op.2.dtype.size_bytes())
}

/// io of a custom op: every input read, the output written.
fn custom_io(inputs: &[CustomOperand], output: &CustomOperand) -> ThunkIo {
    inputs
        .iter()
        .fold(ThunkIo::new(), |io, i| io.read(i.0, custom_bytes(i)))
        .write(output.0, custom_bytes(output))
}

/// Shared description of operand lists.
fn fmt_operands(
    f: &mut fmt::Formatter<'_>,
    inputs: &[(usize, &Shape)],
    output: (usize, &Shape),
) -> fmt::Result {
    f.write_str("in=[")?;
    for (i, (off, shape)) in inputs.iter().enumerate() {
        let sep = if i > 0 { "," } else { "" };
        write!(f, "{sep}{}:{shape}", Off(*off))?;
    }
    write!(f, "] out={}:{}", Off(output.0), output.1)
}

/// Defines a custom-op thunk: a registered op `name` over `inputs` →
/// `output` with serialised `attrs` (host and GPU user ops share it).
macro_rules! custom_op {
    ($(#[$doc:meta])* $name:ident, $kernel:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Registered op name (resolved by the executor).
            pub name: String,
            /// `(offset, elements, shape)` per input.
            pub inputs: Vec<CustomOperand>,
            /// `(offset, elements, shape)` of the output.
            pub output: CustomOperand,
            /// Serialised attributes handed to the kernel.
            pub attrs: Vec<u8>,
        }

        impl ThunkOp for $name {
            const NAME: &'static str = $kernel;
            fn io(&self) -> ThunkIo {
                custom_io(&self.inputs, &self.output)
            }
            fn safe_for_active_extent(&self) -> bool {
                false
            }
            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} ", self.name)?;
                let ins: Vec<(usize, &Shape)> = self.inputs.iter().map(|i| (i.0, &i.2)).collect();
                fmt_operands(f, &ins, (self.output.0, &self.output.2))
            }
        }
    };
}

custom_op!(
    /// A user op registered from Python (`rlx.register_op`), run on the host
    /// against the arena after a device sync.
    CustomOp,
    "custom_op"
);

custom_op!(
    /// A user op with a raw GPU kernel, encoded on the active command stream
    /// without a host round trip.
    CustomGpuOp,
    "custom_gpu_op"
);

/// The attribute key under which `rlx.register_gpu_op` stores the kernel
/// of a [`CustomGpuOp`] (the rest of the attributes are the user's).
pub const GPU_KERNEL_KEY: &str = "__msl__";

/// The raw-GPU kernel of a [`CustomGpuOp`]: MSL source, the kernel's host
/// name and the dispatch shape. Binding convention: input `i` at
/// `[[buffer(i)]]`, the output at `[[buffer(inputs)]]`, the output's
/// element count as a `constant uint&` at `[[buffer(inputs + 1)]]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuKernelSpec {
    /// MSL source of the user's library.
    pub source: String,
    /// The `kernel` function to dispatch.
    pub kernel: String,
    /// Threadgroups per grid (x, y, z).
    pub grid: [u32; 3],
    /// Threads per threadgroup (x, y, z).
    pub threadgroup: [u32; 3],
}

impl CustomGpuOp {
    /// The kernel stored in the attributes, if they hold a well-formed one.
    pub fn kernel_spec(&self) -> Option<GpuKernelSpec> {
        let v: serde_json::Value = serde_json::from_slice(&self.attrs).ok()?;
        serde_json::from_value(v.get(GPU_KERNEL_KEY)?.clone()).ok()
    }
}

/// An SPD-manifold op (`Op::Spd` / `Op::SpdBackward`) evaluated on the
/// host in f64. The shapes carry each operand's dtype as the arena stores
/// it (f32, f64 or f16), so an operand spans `elements · dtype size` bytes;
/// the kernel widens to f64 and rounds the result back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpdHost {
    /// The op.
    pub op: Op,
    /// `(offset, elements, f64 shape)` per input.
    pub inputs: Vec<CustomOperand>,
    /// `(offset, elements, f64 shape)` of the output.
    pub output: CustomOperand,
}

impl ThunkOp for SpdHost {
    const NAME: &'static str = "spd_host";
    fn io(&self) -> ThunkIo {
        custom_io(&self.inputs, &self.output)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.op {
            Op::Spd { kind, .. } => format!("{kind:?}"),
            Op::SpdBackward { kind, .. } => format!("{kind:?}_backward"),
            other => format!("{other:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or("op")
                .to_string(),
        };
        write!(f, "{kind} ")?;
        let ins: Vec<(usize, &Shape)> = self.inputs.iter().map(|i| (i.0, &i.2)).collect();
        fmt_operands(f, &ins, (self.output.0, &self.output.2))
    }
}

/// `(byte offset, bytes, shape)` of a host-evaluated operand.
pub type HostOperand = (usize, usize, Shape);

/// A general scan run on the host: the body graph is evaluated `length`
/// times over the carries and slices of the scanned operands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanHostDesc {
    /// The body: `num_carry` carries then one slice per scanned operand in,
    /// `num_carry` new carries then `y` out.
    pub body: Graph,
    /// Carried values.
    pub num_carry: usize,
    /// Steps.
    pub length: usize,
    /// Scan from the end.
    pub reverse: bool,
    /// Initial carries then scanned operands.
    pub operands: Vec<HostOperand>,
    /// Stacked output `[length, ..]`.
    pub output: HostOperand,
}

/// Host scan thunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanHost {
    /// What to run.
    pub desc: ScanHostDesc,
}

impl ThunkOp for ScanHost {
    const NAME: &'static str = "scan_host";
    fn io(&self) -> ThunkIo {
        let d = &self.desc;
        d.operands
            .iter()
            .fold(ThunkIo::new(), |io, o| io.read(o.0, o.1))
            .write(d.output.0, d.output.1)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.desc;
        let rev = if d.reverse { " reverse" } else { "" };
        write!(
            f,
            "length={} carry={} body={}{rev} ",
            d.length,
            d.num_carry,
            d.body.len()
        )?;
        let ins: Vec<(usize, &Shape)> = d.operands.iter().map(|o| (o.0, &o.2)).collect();
        fmt_operands(f, &ins, (d.output.0, &d.output.2))
    }
}

/// One op (typically with a nested body, e.g. `Op::ScanBackward`)
/// evaluated on the host. Operand shapes are static; a dense buffer of
/// each shape is read / written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostOpDesc {
    /// The op.
    pub op: Op,
    /// `(offset, shape)` per operand.
    pub inputs: Vec<(usize, Shape)>,
    /// `(offset, shape)` of the result.
    pub output: (usize, Shape),
}

/// Bytes of a static shape (a symbolic shape, which lowering never emits,
/// counts as empty).
fn shape_bytes(s: &Shape) -> usize {
    s.numel().map_or(0, |n| nbytes(n, s.dtype.size_bytes()))
}

/// Host one-op thunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostOp {
    /// What to run.
    pub desc: HostOpDesc,
}

impl ThunkOp for HostOp {
    const NAME: &'static str = "host_op";
    fn io(&self) -> ThunkIo {
        let d = &self.desc;
        d.inputs
            .iter()
            .fold(ThunkIo::new(), |io, (off, s)| io.read(*off, shape_bytes(s)))
            .write(d.output.0, shape_bytes(&d.output.1))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.desc;
        let name = format!("{:?}", d.op);
        let name = name.split([' ', '{', '(']).next().unwrap_or("op");
        write!(f, "{name} ")?;
        let ins: Vec<(usize, &Shape)> = d.inputs.iter().map(|(o, s)| (*o, s)).collect();
        fmt_operands(f, &ins, (d.output.0, &d.output.1))
    }
}

/// Normal fill of `len` f32: `mean + scale · philox_normal(key, offset, i)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RngNormal {
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// Mean.
    pub mean: f32,
    /// Standard deviation.
    pub scale: f32,
    /// Philox key (see `rlx_ir::rng`).
    pub key: u64,
    /// Philox counter words 2–3 (the stream offset, `RngOptions::counter`).
    #[serde(default)]
    pub offset: u64,
    /// A seed that overrides `key` (`key = op_seed as u64`, saturating),
    /// as the seed's thunk carries it; lowering leaves it `None`.
    pub op_seed: Option<f32>,
}

impl ThunkOp for RngNormal {
    const NAME: &'static str = "rng_normal";
    fn io(&self) -> ThunkIo {
        ThunkIo::new().write(self.dst, bytes(&[self.len], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "len={} mean={} std={} key={:#x} offset={} dst={}",
            self.len,
            self.mean,
            self.scale,
            self.key,
            self.offset,
            Off(self.dst)
        )
    }
}

/// Uniform fill of `len` f32 in `[low, high)`:
/// `low + (high - low) · philox_uniform(key, offset, i)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RngUniform {
    /// Destination.
    pub dst: usize,
    /// Elements.
    pub len: u32,
    /// Lower bound.
    pub low: f32,
    /// Upper bound.
    pub high: f32,
    /// Philox key.
    pub key: u64,
    /// Philox counter words 2–3 (the stream offset).
    #[serde(default)]
    pub offset: u64,
    /// A seed that overrides `key` (as [`RngNormal::op_seed`]).
    pub op_seed: Option<f32>,
}

impl ThunkOp for RngUniform {
    const NAME: &'static str = "rng_uniform";
    fn io(&self) -> ThunkIo {
        ThunkIo::new().write(self.dst, bytes(&[self.len], F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "len={} low={} high={} key={:#x} offset={} dst={}",
            self.len,
            self.low,
            self.high,
            self.key,
            self.offset,
            Off(self.dst)
        )
    }
}

/// Nearest codebook row: f32 `x [n, d]`, `cb [k, d]` → i32 `out [n]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VqAssign {
    /// Vectors.
    pub x: usize,
    /// Codebook.
    pub cb: usize,
    /// Assignments i32.
    pub out: usize,
    /// Vectors.
    pub n: u32,
    /// Dimension.
    pub d: u32,
    /// Codebook rows.
    pub k: u32,
    /// Distance: 0 L2, 1 dot, 2 cosine.
    pub metric: u32,
}

impl ThunkOp for VqAssign {
    const NAME: &'static str = "vq_assign";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.x, bytes(&[self.n, self.d], F32))
            .read(self.cb, bytes(&[self.k, self.d], F32))
            .write(self.out, bytes(&[self.n], IDX))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} d={} k={} metric={} x={} cb={} out={}",
            self.n,
            self.d,
            self.k,
            self.metric,
            Off(self.x),
            Off(self.cb),
            Off(self.out)
        )
    }
}

/// The Philox key a fill uses: `op_seed` (truncated toward zero,
/// saturating, as Rust's `as u64`) when set, else `key`.
pub fn rng_key(key: u64, op_seed: Option<f32>) -> u64 {
    op_seed.map_or(key, |s| s as u64)
}
