//! indexing.metal `gather_elements_{u8,u16,u32,u64}` (ONNX GatherElements)
//! against a plain coordinate-arithmetic reference written from the ONNX
//! definition (`out[p] = data[p with axis ← idx[p]]`, negative indices
//! from the end). Bytes move unchanged: bit-exact. Shapes: the MoE router
//! gather ([7, 5] probabilities, [7, 3] chosen experts, axis 1), a rank-3
//! gather along axis 0 whose indices are smaller than data off the axis,
//! and rank 1. An out-of-range index (the host fails the run) gives a zero
//! element.

use super::common::uniform;
use msl_sim::Grid;
use rlx_metal::metal::args::{GatherElemArgs, KernelArgs};
use rlx_metal::metal::kernels::Family;

const WORDS: [(usize, &str); 4] = [(1, "u8"), (2, "u16"), (4, "u32"), (8, "u64")];

/// `(data dims, indices dims, axis)`.
type Case = (&'static [usize], &'static [usize], usize);

const CASES: [Case; 3] = [
    (&[7, 5], &[7, 3], 1),
    (&[4, 3, 6], &[5, 2, 5], 0),
    (&[9], &[13], 0),
];

/// The ONNX definition, element by element; `None` for a bad index.
fn reference(data: &[usize], ids: &[usize], axis: usize, idx: &[i32]) -> Vec<Option<usize>> {
    let n: usize = ids.iter().product();
    (0..n)
        .map(|p| {
            let mut coord = vec![0usize; ids.len()];
            let mut q = p;
            for d in (0..ids.len()).rev() {
                coord[d] = q % ids[d];
                q /= ids[d];
            }
            let i = i64::from(idx[p]);
            let i = if i < 0 { i + data[axis] as i64 } else { i };
            if i < 0 || i >= data[axis] as i64 {
                return None;
            }
            coord[axis] = i as usize;
            Some(coord.iter().zip(data).fold(0, |o, (&c, &d)| o * d + c))
        })
        .collect()
}

#[test]
fn gather_elements_matches_the_onnx_definition() {
    let lib = super::common::lib(Family::Indexing);
    for (w, sfx) in WORDS {
        for (c, &(data_dims, ids, axis)) in CASES.iter().enumerate() {
            let nd: usize = data_dims.iter().product();
            let n: usize = ids.iter().product();
            let a_dim = data_dims[axis] as f32;
            let mut idx: Vec<i32> = uniform(c as u64 + 3, n, -a_dim, a_dim)
                .iter()
                .map(|&v| v.floor() as i32)
                .collect();
            idx[n / 2] = data_dims[axis] as i32; // out of range
            let mut data: Vec<u8> = uniform(c as u64 + 9, nd * w, 0.0, 256.0)
                .iter()
                .map(|&v| v as u8)
                .collect();
            let mut ib: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut dst = vec![0xAAu8; n * w];
            let mut args = GatherElemArgs {
                len: n as u32,
                rank: data_dims.len() as u32,
                axis: axis as u32,
                axis_dim: data_dims[axis] as u32,
                ..Default::default()
            };
            let mut stride = 1;
            for d in (0..data_dims.len()).rev() {
                args.idx_dims[d] = ids[d] as u32;
                args.data_strides[d] = stride as u32;
                stride *= data_dims[d];
            }
            let kname = format!("gather_elements_{sfx}");
            lib.dispatch(
                &kname,
                args.as_bytes(),
                &mut [&mut data, &mut ib, &mut dst],
                Grid::d1((n as u32).div_ceil(256), 256),
                &[],
            )
            .unwrap_or_else(|e| panic!("{kname}: {e}"));
            for (p, r) in reference(data_dims, ids, axis, &idx).iter().enumerate() {
                let want = match r {
                    Some(o) => &data[o * w..o * w + w],
                    None => &[0u8; 8][..w],
                };
                assert_eq!(&dst[p * w..p * w + w], want, "{kname} case {c} p {p}");
            }
        }
    }
}
