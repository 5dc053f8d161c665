//! Depthwise causal 1-D convolution → `conv.metal`. Shapes the host
//! rejects (`out_seq != width - k + 1`, no taps) and outputs overlapping
//! the inputs stay on the host.

use super::shape::u32_of;
use super::{aliased, elementwise, kernel, Lowered};
use crate::metal::args::DwConv1dArgs;
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// `depthwise_conv1d_bsc_f32`, one thread per output.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let Thunk::FusedDepthwiseConv1dBsc(c) = t else {
        return None;
    };
    if c.k == 0 || c.out_seq as u64 + c.k as u64 != c.width as u64 + 1 {
        return None;
    }
    if t.io().writes.is_empty() {
        return Some(Lowered::Skip);
    }
    if aliased(t) {
        return None;
    }
    let args = DwConv1dArgs {
        batch: c.batch,
        width: c.width,
        out_seq: c.out_seq,
        channels: c.channels,
        k: c.k,
        silu: c.silu as u32,
    };
    let total = u32_of(c.batch as u64 * c.out_seq as u64 * c.channels as u64)?;
    let k = kernel(Family::Conv, "depthwise_conv1d_bsc_f32".into());
    let offs = [c.src, c.weight, c.dst];
    Some(Lowered::Dispatch(elementwise(i, k, &args, &offs, total)))
}
