//! Fused elementwise regions: one dispatch interpreting a short chain of
//! unary / binary steps per element.
//!
//! # Chain encoding (the seed's)
//!
//! `chain` holds up to 32 steps of four `u32` words `[kind, sub, a, b]`.
//! `kind` 0 is a unary step (`sub` = activation code, operand `a`), kind 2 a
//! binary step (`sub` = 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min, 6 pow,
//! operands `a`, `b`). An operand word with bit 31 clear names region input
//! `a`; with bit 31 set it names the result of step `a & 0x7fff_ffff`.
//! The last step's value is written.
//!
//! # Input offsets are `u32` element indices
//!
//! As in the seed, input operands are stored as f32 *element* indices into
//! the arena (`byte = index · 4`), not byte offsets, so a region input must
//! start below 16 GiB (2³² f32 elements). The destination is an ordinary
//! `usize` byte offset. Lowering must fall back to unfused thunks for
//! inputs beyond that limit. Regions are f32.

use super::io::{nbytes, ThunkIo, F32};
use super::offsets::{offset_add, Off};
use super::ThunkOp;
use rlx_ir::op::{Activation, BinaryOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Most inputs a region reads.
pub const REGION_MAX_INPUTS: usize = 16;
/// Most steps in a chain.
pub const REGION_MAX_STEPS: usize = 32;
/// Slots of [`BatchElementwiseRegion::batch_input_offs`].
pub const BATCH_MAX_INPUT_SLOTS: usize = 64;

/// Bit of an operand word marking a step result rather than an input.
pub const STEP_OPERAND: u32 = 0x8000_0000;

/// Activation code of a unary step (`sub`), also the `RlxAct` code of the
/// Metal kernels (`kernels/args.h`): `rlx_ir::op::Activation` order.
pub fn act_code(a: Activation) -> u32 {
    use Activation::*;
    match a {
        Gelu => 0,
        GeluApprox => 1,
        Silu => 2,
        Relu => 3,
        Sigmoid => 4,
        Tanh => 5,
        Exp => 6,
        Log => 7,
        Sqrt => 8,
        Rsqrt => 9,
        Neg => 10,
        Abs => 11,
        Sin => 12,
        Cos => 13,
        Tan => 14,
        Atan => 15,
        Round => 16,
    }
}

/// Binary-op code of a binary step (`sub`), also the `RlxBin` code of the
/// Metal kernels: `rlx_ir::op::BinaryOp` order.
pub fn binop_code(b: BinaryOp) -> u32 {
    match b {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Max => 4,
        BinaryOp::Min => 5,
        BinaryOp::Pow => 6,
    }
}

/// Byte offset of an input stored as an f32 element index.
pub fn input_byte_offset(elem_index: u32) -> usize {
    elem_index as usize * F32
}

/// Elements input `i` contributes per output element block: 1 for a scalar
/// (bit `i` of `scalar_mask`), `modulus[i]` for a trailing-shape broadcast,
/// else the full `len`.
fn input_elems(i: usize, len: u32, scalar_mask: u32, modulus: &[u32; 16]) -> usize {
    if i < 32 && scalar_mask & (1 << i) != 0 {
        1
    } else {
        match modulus.get(i) {
            Some(&m) if m > 0 => m as usize,
            _ => len as usize,
        }
    }
}

/// Number of distinct region inputs a chain can name: one more than the
/// largest input index among the first `num_steps` steps' operands
/// (`a` for unary steps, `a` and `b` for binary ones).
pub fn chain_input_count(chain: &[u32; 128], num_steps: u32) -> usize {
    let mut count = 0usize;
    for step in chain.chunks_exact(4).take(num_steps as usize) {
        let operands: &[u32] = if step[0] == 2 {
            &step[2..4]
        } else {
            &step[2..3]
        };
        for &w in operands {
            if w & STEP_OPERAND == 0 {
                count = count.max(w as usize + 1);
            }
        }
    }
    count.min(REGION_MAX_INPUTS)
}

/// Fused N-ary elementwise chain over `len` f32 elements.
///
/// Input `i < num_inputs` reads, at `input_offs[i] · 4`: one element if
/// bit `i` of `scalar_input_mask` is set, else `input_modulus[i]` elements
/// if that is nonzero (trailing-shape broadcast), else `len`. With
/// `prologue == 1` (nearest 2× upsample of NCHW) the input
/// `prologue_input` is the pre-upsample tensor and reads
/// `out_n · out_c · (out_h / 2) · (out_w / 2)` elements. `dst` gets `len`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElementwiseRegion {
    /// Output elements.
    pub len: u32,
    /// Inputs used (≤ 16).
    pub num_inputs: u32,
    /// Steps used (≤ 32).
    pub num_steps: u32,
    /// Destination byte offset.
    pub dst: usize,
    /// Input offsets as f32 element indices (see the module docs).
    pub input_offs: [u32; 16],
    /// Encoded steps (see the module docs).
    #[serde(with = "fixed_array")]
    pub chain: [u32; 128],
    /// Bit `i` set: input `i` is a single element broadcast everywhere.
    pub scalar_input_mask: u32,
    /// Per input: 0 = dense, `m > 0` = read element `gid % m`.
    pub input_modulus: [u32; 16],
    /// Prologue transform: 0 none, 1 nearest 2× upsample (NCHW).
    pub prologue: u32,
    /// Output batch (prologue geometry).
    pub out_n: u32,
    /// Output channels (prologue geometry).
    pub out_c: u32,
    /// Output height (prologue geometry).
    pub out_h: u32,
    /// Output width (prologue geometry).
    pub out_w: u32,
    /// Input the prologue transforms.
    pub prologue_input: u32,
}

impl ThunkOp for ElementwiseRegion {
    const NAME: &'static str = "elementwise_region";
    fn io(&self) -> ThunkIo {
        let mut io = ThunkIo::new();
        let n_in = (self.num_inputs as usize).min(REGION_MAX_INPUTS);
        for (i, &off) in self.input_offs.iter().enumerate().take(n_in) {
            let elems = if self.prologue == 1 && i == self.prologue_input as usize {
                super::io::numel(&[self.out_n, self.out_c, self.out_h / 2, self.out_w / 2])
            } else {
                input_elems(i, self.len, self.scalar_input_mask, &self.input_modulus)
            };
            io = io.read(input_byte_offset(off), nbytes(elems, F32));
        }
        io.write(self.dst, nbytes(self.len as usize, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n_in = (self.num_inputs as usize).min(REGION_MAX_INPUTS);
        let ins: Vec<String> = self.input_offs[..n_in]
            .iter()
            .map(|&o| Off(input_byte_offset(o)).to_string())
            .collect();
        write!(
            f,
            "len={} inputs={} steps={} prologue={} in=[{}] dst={}",
            self.len,
            self.num_inputs,
            self.num_steps,
            self.prologue,
            ins.join(","),
            Off(self.dst)
        )
    }
}

/// Horizontal fusion: `num_batch` slices run the same chain in one launch.
///
/// Layout (decided here; the seed leaves it implicit): each slice has
/// `n_in = chain_input_count(chain, num_steps)` inputs, slice `s`'s input
/// `i` at element index `batch_input_offs[s · n_in + i]` (slots past 64
/// are ignored). A slice computes `slice_len` elements; input `i` reads 1,
/// `input_modulus[i]` or `slice_len` elements as in [`ElementwiseRegion`].
/// Slice `s` writes `slice_len` f32 at `base_dst + s · slice_elems · 4`
/// (`slice_elems` is the slice stride, `slice_len ≤ slice_elems` under an
/// active extent). When the slices are back to back the write is one range.
/// At most 64 slices run (see [`BatchElementwiseRegion::slices`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchElementwiseRegion {
    /// Elements computed per slice.
    pub slice_len: u32,
    /// Number of slices.
    pub num_batch: u32,
    /// Steps used.
    pub num_steps: u32,
    /// Byte offset of slice 0's output.
    pub base_dst: usize,
    /// Output stride between slices, in elements.
    pub slice_elems: u32,
    /// Slice-major input offsets as f32 element indices.
    #[serde(with = "fixed_array")]
    pub batch_input_offs: [u32; 64],
    /// Encoded steps shared by all slices.
    #[serde(with = "fixed_array")]
    pub chain: [u32; 128],
    /// Bit `i` set: input `i` of every slice is a single element.
    pub scalar_input_mask: u32,
    /// Per input: 0 = dense, `m > 0` = trailing broadcast of `m` elements.
    pub input_modulus: [u32; 16],
}

impl BatchElementwiseRegion {
    /// Slices run: `num_batch`, at most [`BATCH_MAX_INPUT_SLOTS`] (one
    /// input slot per slice is the least a slice can use).
    pub fn slices(&self) -> usize {
        (self.num_batch as usize).min(BATCH_MAX_INPUT_SLOTS)
    }
}

impl ThunkOp for BatchElementwiseRegion {
    const NAME: &'static str = "batch_elementwise_region";
    fn io(&self) -> ThunkIo {
        let mut io = ThunkIo::new();
        let n_in = chain_input_count(&self.chain, self.num_steps);
        let slices = self.slices();
        for s in 0..slices {
            for i in 0..n_in {
                let Some(&off) = self.batch_input_offs.get(s * n_in + i) else {
                    break;
                };
                let elems = input_elems(
                    i,
                    self.slice_len,
                    self.scalar_input_mask,
                    &self.input_modulus,
                );
                io = io.read(input_byte_offset(off), nbytes(elems, F32));
            }
        }
        let slice_bytes = nbytes(self.slice_len as usize, F32);
        if self.slice_len == self.slice_elems {
            io.write(self.base_dst, slice_bytes.saturating_mul(slices))
        } else {
            let stride = nbytes(self.slice_elems as usize, F32);
            for s in 0..slices {
                io = io.write(
                    offset_add(self.base_dst, s.saturating_mul(stride)),
                    slice_bytes,
                );
            }
            io
        }
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slices={} slice_len={} slice_elems={} steps={} inputs/slice={} dst={}",
            self.num_batch,
            self.slice_len,
            self.slice_elems,
            self.num_steps,
            chain_input_count(&self.chain, self.num_steps),
            Off(self.base_dst)
        )
    }
}

/// Serde for `[u32; N]` beyond serde's built-in 32-element arrays: a plain
/// sequence on the wire.
mod fixed_array {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer, const N: usize>(a: &[u32; N], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(a.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        d: D,
    ) -> Result<[u32; N], D::Error> {
        let v = Vec::<u32>::deserialize(d)?;
        let n = v.len();
        v.try_into()
            .map_err(|_| D::Error::invalid_length(n, &"a fixed-length u32 array"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_count_from_chain() {
        let mut chain = [0u32; 128];
        // step 0: add(in0, in2); step 1: relu(step0); step 2: mul(step1, in1)
        chain[..12].copy_from_slice(&[
            2,
            0,
            0,
            2,
            0,
            3,
            STEP_OPERAND,
            0,
            2,
            2,
            STEP_OPERAND | 1,
            1,
        ]);
        assert_eq!(chain_input_count(&chain, 3), 3);
        assert_eq!(chain_input_count(&chain, 2), 3);
        // a unary step's b word is ignored
        let mut c2 = [0u32; 128];
        c2[..4].copy_from_slice(&[0, 2, 0, 9]);
        assert_eq!(chain_input_count(&c2, 1), 1);
        assert_eq!(chain_input_count(&c2, 0), 0);
    }
}
