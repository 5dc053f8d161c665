//! `batch_elementwise_regions`: independent [`ElementwiseRegion`]s that run
//! the same chain over the same number of elements, with outputs at a
//! constant stride, become one [`BatchElementwiseRegion`] (horizontal
//! fusion: one launch over all the slices), placed at the first member.
//!
//! Pattern: regions `r_0 … r_{k-1}` (schedule order `p = i_0 < … `), equal
//! in `len`, steps (`num_steps` and the chain words they use), inputs
//! (`num_inputs`, which is also the count the chain names), scalar mask and
//! broadcast moduli, none with a prologue; sorted by destination, the
//! destinations are `base + s · stride` with `stride ≥ len · 4` bytes, a
//! multiple of 4. Dispatches before → after: k → 1, `2 ≤ k ≤ 64 / n_in`
//! (the slice-major input table has 64 slots).
//!
//! Preconditions (each member `q` moves from `i_q` up to `p`), checked on
//! the shared [`Dataflow`]:
//! * no thunk strictly between `p` and `i_q` writes a byte `q` reads (its
//!   inputs are final at `p`) — this includes the other members, so no
//!   member feeds another; and no member's destination overlaps an input
//!   of any member (member `p` itself included);
//! * no thunk strictly between `p` and `i_q` reads or writes a byte of
//!   `q`'s destination: nothing sees the value early or overwrites it.
//!
//! The members are grouped greedily: per signature, in destination order,
//! the longest runs of equal stride whose members all satisfy the checks
//! against the run's first member.

use super::dataflow::Dataflow;
use super::{Pass, PassContext};
use crate::thunk::io::ByteRange;
use crate::thunk::region::{
    chain_input_count, BatchElementwiseRegion, ElementwiseRegion, BATCH_MAX_INPUT_SLOTS,
};
use crate::thunk::Thunk;
use std::collections::BTreeMap;

/// The pass. See the module docs.
pub struct BatchElementwiseRegions;

impl Pass for BatchElementwiseRegions {
    const NAME: &'static str = "batch_elementwise_regions";

    /// Groups are batched one signature at a time, each on a dataflow of
    /// the schedule as the previous groups left it.
    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        // signature → member indices
        let mut groups: BTreeMap<Vec<u32>, Vec<usize>> = BTreeMap::new();
        for (i, t) in thunks.iter().enumerate() {
            if let Thunk::ElementwiseRegion(r) = t {
                if let Some(sig) = signature(r) {
                    groups.entry(sig).or_default().push(i);
                }
            }
        }
        let mut matches = 0;
        for members in groups.into_values().filter(|m| m.len() >= 2) {
            let df = Dataflow::new(thunks, &cx.live_out);
            for run in runs(thunks, &df, members) {
                let Some(batch) = batch_of(thunks, &run) else {
                    continue;
                };
                let first = *run.iter().min().unwrap_or(&run[0]);
                for &q in &run {
                    thunks[q] = Thunk::Nop;
                }
                thunks[first] = Thunk::BatchElementwiseRegion(batch);
                matches += 1;
            }
        }
        matches
    }
}

/// What members of one batch share, or `None` when `r` cannot be batched.
fn signature(r: &ElementwiseRegion) -> Option<Vec<u32>> {
    let ns = r.num_steps as usize;
    let n_in = r.num_inputs as usize;
    let ok = r.prologue == 0
        && r.len > 0
        && (1..=32).contains(&ns)
        && n_in >= 1
        && chain_input_count(&r.chain, r.num_steps) == n_in
        && 2 * n_in <= BATCH_MAX_INPUT_SLOTS
        && crate::thunk::is_arena(r.dst)
        && r.dst.is_multiple_of(4);
    if !ok {
        return None;
    }
    let mut sig = vec![r.len, r.num_steps, r.num_inputs, r.scalar_input_mask];
    sig.extend_from_slice(&r.input_modulus);
    sig.extend_from_slice(&r.chain[..ns * 4]);
    Some(sig)
}

fn region(t: &Thunk) -> &ElementwiseRegion {
    match t {
        Thunk::ElementwiseRegion(r) => r,
        _ => unreachable!("batch members are regions"),
    }
}

/// Runs of `members` (same signature) to batch: sorted by destination,
/// consecutive members at one stride, each legal to move to the run's
/// first member in schedule order.
fn runs(thunks: &[Thunk], df: &Dataflow, mut members: Vec<usize>) -> Vec<Vec<usize>> {
    if members.len() < 2 {
        return Vec::new();
    }
    let len_bytes = region(&thunks[members[0]]).len as usize * 4;
    let n_in = region(&thunks[members[0]]).num_inputs as usize;
    let max_slices = BATCH_MAX_INPUT_SLOTS / n_in;
    members.sort_by_key(|&i| (region(&thunks[i]).dst, i));
    let mut out = Vec::new();
    let mut k = 0;
    while k + 1 < members.len() {
        let d0 = region(&thunks[members[k]]).dst;
        let stride = region(&thunks[members[k + 1]]).dst - d0;
        let mut run = vec![members[k]];
        let mut j = k + 1;
        if stride >= len_bytes && stride.is_multiple_of(4) && u32::try_from(stride / 4).is_ok() {
            while j < members.len() && run.len() < max_slices {
                let d = region(&thunks[members[j]]).dst;
                if d != d0 + run.len() * stride {
                    break;
                }
                run.push(members[j]);
                if !legal(df, &run) {
                    run.pop();
                    break;
                }
                j += 1;
            }
        }
        if run.len() >= 2 {
            out.push(run);
            k = j;
        } else {
            k += 1;
        }
    }
    out
}

/// True when every member of `run` can move to the earliest of them.
fn legal(df: &Dataflow, run: &[usize]) -> bool {
    let p = *run.iter().min().unwrap_or(&0);
    let dsts: Vec<ByteRange> = run.iter().map(|&q| df.io(q).writes[0]).collect();
    for &q in run {
        let io = df.io(q);
        if io.writes.len() != 1 {
            return false;
        }
        for rd in &io.reads {
            if dsts.iter().any(|d| d.overlaps(rd)) || df.written_between(p, q, rd) {
                return false;
            }
        }
        let dst = io.writes[0];
        if q != p && (df.read_between(p, q, &dst) || df.written_between(p, q, &dst)) {
            return false;
        }
    }
    true
}

/// The batch thunk of `run` (members sorted by destination).
fn batch_of(thunks: &[Thunk], run: &[usize]) -> Option<BatchElementwiseRegion> {
    let r0 = region(&thunks[run[0]]);
    let n_in = r0.num_inputs as usize;
    let stride = region(&thunks[*run.get(1)?]).dst - r0.dst;
    let mut offs = [0u32; BATCH_MAX_INPUT_SLOTS];
    for (s, &q) in run.iter().enumerate() {
        let r = region(&thunks[q]);
        offs[s * n_in..(s + 1) * n_in].copy_from_slice(&r.input_offs[..n_in]);
    }
    Some(BatchElementwiseRegion {
        slice_len: r0.len,
        num_batch: u32::try_from(run.len()).ok()?,
        num_steps: r0.num_steps,
        base_dst: r0.dst,
        slice_elems: u32::try_from(stride / 4).ok()?,
        batch_input_offs: offs,
        chain: r0.chain,
        scalar_input_mask: r0.scalar_input_mask,
        input_modulus: r0.input_modulus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::run_only;
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::region::STEP_OPERAND;
    use crate::thunk::HalfFlag;
    use rlx_ir::op::BinaryOp;

    const N: u32 = 12;
    const B: usize = N as usize * 4;

    /// `exp(sin(in0) · in1)` over inputs at byte offsets `a`, `b`.
    fn region(a: usize, b: usize, dst: usize) -> Thunk {
        let mut input_offs = [0u32; 16];
        input_offs[0] = (a / 4) as u32;
        input_offs[1] = (b / 4) as u32;
        let mut chain = [0u32; 128];
        chain[..12].copy_from_slice(&[
            0,
            12,
            0,
            0,
            2,
            2,
            STEP_OPERAND,
            1,
            0,
            6,
            STEP_OPERAND | 1,
            0,
        ]);
        Thunk::ElementwiseRegion(ElementwiseRegion {
            len: N,
            num_inputs: 2,
            num_steps: 3,
            dst,
            input_offs,
            chain,
            scalar_input_mask: 0,
            input_modulus: [0; 16],
            prologue: 0,
            out_n: 0,
            out_c: 0,
            out_h: 0,
            out_w: 0,
            prologue_input: 0,
        })
    }

    fn live(offs: &[usize]) -> Vec<ByteRange> {
        offs.iter().map(|&o| ByteRange::new(o, B)).collect()
    }

    #[test]
    fn three_regions_at_one_stride_become_one_batch() {
        // outputs at 20B, 22B, 24B (stride 2B > len): given out of order
        let t = vec![
            region(0, B, 22 * B),
            region(2 * B, 3 * B, 20 * B),
            region(4 * B, 5 * B, 24 * B),
        ];
        let (kinds, matches, out) = run_only(
            BatchElementwiseRegions::NAME,
            t,
            &live(&[20 * B, 22 * B, 24 * B]),
        );
        assert_eq!((kinds, matches), (vec!["batch_elementwise_region"], 1));
        let Thunk::BatchElementwiseRegion(b) = &out[0] else {
            unreachable!()
        };
        assert_eq!((b.base_dst, b.slice_elems, b.num_batch), (20 * B, 2 * N, 3));
        // slice order follows the destinations: slice 0 is the second region
        let e = |x: usize| (x / 4) as u32;
        assert_eq!(
            b.batch_input_offs[..6],
            [e(2 * B), e(3 * B), e(0), e(B), e(4 * B), e(5 * B)]
        );
    }

    #[test]
    fn dependent_or_clobbered_regions_stay() {
        // the second region reads the first one's output
        let t = vec![region(0, B, 20 * B), region(20 * B, 3 * B, 21 * B)];
        let (kinds, m, _) = run_only(BatchElementwiseRegions::NAME, t, &live(&[21 * B]));
        assert_eq!((kinds.len(), m), (2, 0));
        // a thunk between them writes the second one's input
        let add = Thunk::BinaryFull(BinaryFull {
            lhs: 0,
            rhs: B,
            dst: 3 * B,
            len: N,
            op: BinaryOp::Add,
            dt: HalfFlag::F32,
        });
        let t = vec![
            region(0, B, 20 * B),
            add.clone(),
            region(2 * B, 3 * B, 21 * B),
        ];
        let (_, m, _) = run_only(BatchElementwiseRegions::NAME, t, &live(&[20 * B, 21 * B]));
        assert_eq!(m, 0);
        // ... or reads the second one's destination (its old value)
        let reader = Thunk::BinaryFull(BinaryFull {
            lhs: 21 * B,
            rhs: B,
            dst: 30 * B,
            ..match add {
                Thunk::BinaryFull(b) => b,
                _ => unreachable!(),
            }
        });
        let t = vec![region(0, B, 20 * B), reader, region(2 * B, 3 * B, 21 * B)];
        let (_, m, _) = run_only(
            BatchElementwiseRegions::NAME,
            t,
            &live(&[20 * B, 21 * B, 30 * B]),
        );
        assert_eq!(m, 0);
        // overlapping destinations (stride below the length) stay too
        let t = vec![region(0, B, 20 * B), region(2 * B, 3 * B, 20 * B + 8)];
        let (_, m, _) = run_only(BatchElementwiseRegions::NAME, t, &live(&[20 * B]));
        assert_eq!(m, 0);
    }
}
