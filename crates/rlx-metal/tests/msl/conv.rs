//! conv.metal: depthwise causal 1-D conv on BSC data, with and without
//! SiLU, odd channel counts / lengths / tap counts and partial
//! threadgroups, against an f64 reference.
//!
//! Tolerance `1e-6 + 1e-5·|ref|`: k ≤ 7 f32 products summed in tap order
//! (the host's order) vs f64.

use super::common::{assert_close, lib, uniform, Dt};
use msl_sim::Grid;
use rlx_metal::metal::args::{DwConv1dArgs, KernelArgs};
use rlx_metal::metal::kernels::Family;

#[test]
fn depthwise_conv1d_bsc_matches_reference() {
    let lib = lib(Family::Conv);
    // (batch, width, channels, k)
    for (n, &(batch, width, ch, k)) in [
        (1u32, 1u32, 1u32, 1u32),
        (1, 7, 33, 4),
        (2, 9, 31, 3),
        (1, 40, 100, 7),
        (3, 5, 17, 5),
    ]
    .iter()
    .enumerate()
    {
        for silu in [false, true] {
            let out_seq = width - k + 1;
            let x = uniform(n as u64 + 1, (batch * width * ch) as usize, -2.0, 2.0);
            let w = uniform(n as u64 + 2, (ch * k) as usize, -1.0, 1.0);
            let args = DwConv1dArgs {
                batch,
                width,
                out_seq,
                channels: ch,
                k,
                silu: silu as u32,
            };
            let total = batch * out_seq * ch;
            let mut dst = vec![0u8; 4 * total as usize];
            lib.dispatch(
                "depthwise_conv1d_bsc_f32",
                args.as_bytes(),
                &mut [&mut Dt::F32.encode(&x), &mut Dt::F32.encode(&w), &mut dst],
                Grid::d1(total.div_ceil(64), 64),
                &[],
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let (ch, k, width) = (ch as usize, k as usize, width as usize);
            let mut want = Vec::new();
            for b in 0..batch as usize {
                for t in 0..out_seq as usize {
                    for c in 0..ch {
                        let a: f64 = (0..k)
                            .map(|i| x[(b * width + t + i) * ch + c] as f64 * w[c * k + i] as f64)
                            .sum();
                        want.push(if silu { a / (1.0 + (-a).exp()) } else { a });
                    }
                }
            }
            assert_close(
                &format!("conv case {n} silu={silu}"),
                &Dt::F32.decode(&dst),
                &want,
                1e-6,
                1e-5,
            );
        }
    }
}
