//! Cooperative vs threaded lanes on a 128-lane `simd_sum` reduction over a
//! few thousand threadgroups (the shape of a GEMV row reduction).
//!
//! `cargo run --release -p msl-sim --example lanes_bench [GROUPS]`
//! prints the time per dispatch in each mode and their ratio; both modes
//! must produce the same sums, equal to a reference computed here.

use msl_sim::{Grid, Lanes, Library};
use std::time::Instant;

const KERNEL: &str = r#"
#include <metal_stdlib>
using namespace metal;

// Each threadgroup sums one row of `cols` floats: a strided partial sum per
// lane, simd_sum per simdgroup, then simdgroup 0 sums the partials.
kernel void row_sum(constant uint& cols [[buffer(0)]],
                    device const float* x [[buffer(1)]],
                    device float* out [[buffer(2)]],
                    uint row [[threadgroup_position_in_grid]],
                    uint lid [[thread_position_in_threadgroup]],
                    uint tpg [[threads_per_threadgroup]],
                    uint sid [[simdgroup_index_in_threadgroup]],
                    uint nsg [[simdgroups_per_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float partial[32];
    float acc = 0.0f;
    for (uint c = lid; c < cols; c += tpg) {
        acc += x[row * cols + c];
    }
    acc = simd_sum(acc);
    if (lane == 0) { partial[sid] = acc; }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sid == 0) {
        const float t = simd_sum(lane < nsg ? partial[lane] : 0.0f);
        if (lane == 0) { out[row] = t; }
    }
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: u32 = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 4096,
    };
    let (cols, tpg) = (512u32, 128u32);
    let lib = Library::from_source("lanes_bench.metal", KERNEL)?;
    // small integers: every summation order gives the exact sum
    let x: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
    let want: Vec<f32> = x
        .chunks(cols as usize)
        .map(|r| r.iter().sum::<f32>())
        .collect();
    let mut xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut secs = Vec::new();
    for lanes in [Lanes::Threads, Lanes::Coop] {
        let lib = lib.clone().with_lanes(lanes);
        let mut out = vec![0u8; rows as usize * 4];
        let t = Instant::now();
        lib.dispatch(
            "row_sum",
            &cols.to_le_bytes(),
            &mut [&mut xb, &mut out],
            Grid::d1(rows, tpg),
            &[],
        )?;
        let s = t.elapsed().as_secs_f64();
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if got != want {
            return Err(format!("{lanes:?}: wrong sums").into());
        }
        println!(
            "{lanes:?}: {rows} threadgroups x {tpg} lanes: {s:.3} s ({:.1} us per threadgroup)",
            s * 1e6 / f64::from(rows)
        );
        secs.push(s);
    }
    println!("coop is {:.1}x faster than threads", secs[0] / secs[1]);
    Ok(())
}
