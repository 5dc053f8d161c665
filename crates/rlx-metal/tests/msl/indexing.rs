//! indexing.metal: gathers per word width (unsigned embedding lookup and
//! signed axis gather), scatter_add_f32 (duplicates accumulate in index
//! order) and the in-place scatter_nd (later duplicates win), against
//! plain index-arithmetic references. Gathers and scatter_nd move bytes:
//! bit-exact. scatter_add sums in the host's order from 0: bit-exact too
//! (the reference is the host's own f32 sequence, checked against an f64
//! sum within 1e-5 as a sanity check).
//!
//! scatter_nd_f32_f16 / _f16_f32 convert on write: bit-exact against the
//! `half` crate's round-to-nearest-even conversion (numpy's astype).
//!
//! Out-of-range indices (the host fails the run): gathers write zeros,
//! scatter_add ignores the update, scatter_nd skips the tuple.

use super::common::uniform;
use msl_sim::Grid;
use rlx_metal::metal::args::{GatherArgs, KernelArgs, ScatterAddArgs, ScatterNdArgs};
use rlx_metal::metal::kernels::Family;

const WORDS: [(usize, &str); 5] = [(1, "u8"), (2, "u16"), (4, "u32"), (8, "u64"), (16, "u128")];

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    uniform(seed, n, 0.0, 256.0)
        .into_iter()
        .map(|v| v as u8)
        .collect()
}

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(kernel: &str, args: &[u8], bufs: &mut [&mut [u8]], groups: u32, tpg: u32) {
    let lib = super::common::lib(Family::Indexing);
    lib.dispatch(kernel, args, bufs, Grid::d1(groups, tpg), &[])
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
}

#[test]
fn gather_copies_rows_and_zeroes_bad_ones() {
    // (outer, axis_dim, trailing words, indices, signed)
    let cases: [(usize, usize, usize, &[i32], bool); 5] = [
        (1, 7, 33, &[3, 0, 6, 3], false),
        (1, 5, 1, &[4, -1, 5, 2], false), // -1 and 5 out of range unsigned
        (3, 4, 5, &[-1, 0, 3, -4], true), // negatives from the end
        (2, 3, 31, &[2, 3, -4, 1], true), // 3 and -4 out of range
        (1, 100, 7, &[99; 31], false),
    ];
    for (w, sfx) in WORDS {
        for (k, &(outer, axis, tr, idx, signed)) in cases.iter().enumerate() {
            let table = bytes(k as u64 + 1, outer * axis * tr * w);
            let n = idx.len();
            let mut dst = vec![0xAAu8; outer * n * tr * w];
            let args = GatherArgs {
                outer: outer as u32,
                axis_dim: axis as u32,
                num_idx: n as u32,
                trailing: tr as u32,
                signed_idx: signed as u32,
                ..Default::default()
            };
            let total = (outer * n * tr) as u32;
            let kname = format!("gather_{sfx}");
            run(
                &kname,
                args.as_bytes(),
                &mut [&mut table.clone(), &mut i32s(idx), &mut dst],
                total.div_ceil(64),
                64,
            );
            let row = tr * w;
            let mut want = Vec::new();
            for o in 0..outer {
                for &i in idx {
                    let i = if signed && i < 0 { i + axis as i32 } else { i };
                    if i < 0 || i >= axis as i32 {
                        want.extend(std::iter::repeat_n(0u8, row));
                    } else {
                        let s = (o * axis + i as usize) * row;
                        want.extend_from_slice(&table[s..s + row]);
                    }
                }
            }
            assert_eq!(dst, want, "{kname} case {k}");
        }
    }
}

#[test]
fn scatter_add_accumulates_in_order() {
    // (out_dim, trailing, indices); 9 is out of range for out_dim 5
    let cases: [(usize, usize, &[i32]); 4] = [
        (5, 33, &[1, 3, 1, 0, 1, 4]),
        (1, 1, &[0, 0, 0]),
        (7, 100, &[6, 2, 2, 5, 0, 0, 3]),
        (5, 3, &[2, 9, -1, 2]),
    ];
    for (k, &(out_dim, tr, idx)) in cases.iter().enumerate() {
        let n = idx.len();
        let upd = uniform(k as u64 + 21, n * tr, -3.0, 3.0);
        let mut dst = vec![0xFFu8; out_dim * tr * 4];
        let args = ScatterAddArgs {
            num: n as u32,
            out_dim: out_dim as u32,
            trailing: tr as u32,
        };
        let updb: Vec<u8> = upd.iter().flat_map(|x| x.to_le_bytes()).collect();
        let total = (out_dim * tr) as u32;
        run(
            "scatter_add_f32",
            args.as_bytes(),
            &mut [&mut updb.clone(), &mut i32s(idx), &mut dst],
            total.div_ceil(32),
            32,
        );
        let got: Vec<f32> = dst
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let (mut want, mut exact) = (vec![0f32; out_dim * tr], vec![0f64; out_dim * tr]);
        for (i, &r) in idx.iter().enumerate() {
            if r < 0 || r as usize >= out_dim {
                continue;
            }
            for j in 0..tr {
                want[r as usize * tr + j] += upd[i * tr + j];
                exact[r as usize * tr + j] += upd[i * tr + j] as f64;
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "scatter_add case {k}");
        for (g, e) in got.iter().zip(&exact) {
            assert!(
                (*g as f64 - e).abs() <= 1e-5 * (1.0 + e.abs()),
                "case {k}: {g} vs {e}"
            );
        }
    }
}

#[test]
fn scatter_nd_writes_blocks_in_place() {
    // (data dims, q, tuples flattened); later duplicates win, bad tuples skip
    let cases: [(&[u32], usize, &[i32]); 4] = [
        (&[9, 33], 1, &[4, 0, 8]),    // KV-cache rows [C, kv_dim]
        (&[6, 5], 1, &[2, -1, 2, 7]), // -1 = row 5; 2 twice; 7 skipped
        (&[3, 4, 7], 2, &[0, 1, 2, 3, -1, -4, 1, 9]),
        (&[5, 2], 2, &[4, 1, 0, 0, 4, 1]), // element-wise, duplicate tuple
    ];
    for (w, sfx) in WORDS {
        for (k, &(dims, q, ind)) in cases.iter().enumerate() {
            let tuples = ind.len() / q;
            let block: usize = dims[q..].iter().map(|&d| d as usize).product();
            let total: usize = dims.iter().map(|&d| d as usize).product();
            let data = bytes(k as u64 + 40, total * w);
            let upd = bytes(k as u64 + 50, tuples * block * w);
            let mut args = ScatterNdArgs {
                tuples: tuples as u32,
                q: q as u32,
                block: block as u32,
                ..Default::default()
            };
            args.dims[..q].copy_from_slice(&dims[..q]);
            let mut dst = data.clone();
            let kname = format!("scatter_nd_{sfx}");
            let tpg = (block as u32).div_ceil(32).clamp(1, 32) * 32;
            run(
                &kname,
                args.as_bytes(),
                &mut [&mut i32s(ind), &mut upd.clone(), &mut dst],
                tuples as u32,
                tpg,
            );
            let mut want = data.clone();
            let bw = block * w;
            for t in 0..tuples {
                let mut b = 0i64;
                let mut ok = true;
                for j in 0..q {
                    let d = dims[j] as i64;
                    let mut i = ind[t * q + j] as i64;
                    if i < 0 {
                        i += d;
                    }
                    ok &= (0..d).contains(&i);
                    b = b * d + i;
                }
                if ok {
                    let b = b as usize;
                    want[b * bw..(b + 1) * bw].copy_from_slice(&upd[t * bw..(t + 1) * bw]);
                }
            }
            assert_eq!(dst, want, "{kname} case {k}");
        }
    }
}

/// f32 values that probe f16 rounding: ties to even either way, the largest
/// finite half, overflow to ±inf just past its rounding edge, subnormals
/// (and one rounding to zero), signed zero, infinities and NaN.
fn f16_probes() -> Vec<f32> {
    let ulp1 = 1.0 / 1024.0;
    vec![
        1.0 + ulp1 / 2.0,  // tie → 1.0 (even)
        1.0 + 1.5 * ulp1,  // tie → 1 + 2 ulp (even)
        1.0 + ulp1 * 0.51, // just above a tie → up
        65504.0,
        65519.99, // rounds down to 65504
        65520.0,  // tie at the overflow edge → inf
        -70000.0, // → -inf
        6.0e-8,   // subnormal
        2.0e-8,   // → +0
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3.140_625_3,
        -1.0e-5,
    ]
}

/// `scatter_nd_f32_f16` / `scatter_nd_f16_f32`: f32 rows rounded to half
/// (nearest even, what `half` — and numpy's `astype(float16)` — give) into
/// an f16 cache, and half rows widened into an f32 one, with odd block
/// lengths, duplicates (the later wins) and an out-of-range tuple skipped.
#[test]
fn scatter_nd_converts_float_and_half() {
    use half::f16;
    // (rows, block, tuples)
    let cases: [(u32, usize, &[i32]); 3] =
        [(5, 15, &[3, 0, -1]), (4, 33, &[1, 1, 9]), (7, 1, &[6, 2])];
    for (k, &(rows, block, ind)) in cases.iter().enumerate() {
        let tuples = ind.len();
        let probes = f16_probes();
        let rnd = uniform(k as u64 + 60, tuples * block, -9.0, 9.0);
        // probes first, then random values over 1e-4 .. 1e4
        let upd: Vec<f32> = (0..tuples * block)
            .map(|i| match probes.get(i) {
                Some(&p) => p,
                None => rnd[i] * 10f32.powi((i % 9) as i32 - 4),
            })
            .collect();
        let mut args = ScatterNdArgs {
            tuples: tuples as u32,
            q: 1,
            block: block as u32,
            ..Default::default()
        };
        args.dims[0] = rows;
        let total = rows as usize * block;
        let row_of = |t: usize| {
            let i = ind[t] as i64 + if ind[t] < 0 { rows as i64 } else { 0 };
            let later = ind[t + 1..].iter().any(|&u| u == ind[t]);
            ((0..rows as i64).contains(&i) && !later).then_some(i as usize)
        };
        let tpg = (block as u32).div_ceil(32).clamp(1, 32) * 32;
        // f32 → f16 cache
        let cache: Vec<f16> = (0..total).map(|i| f16::from_f32(i as f32 * 0.25)).collect();
        let mut dst: Vec<u8> = cache.iter().flat_map(|h| h.to_le_bytes()).collect();
        let mut ub: Vec<u8> = upd.iter().flat_map(|v| v.to_le_bytes()).collect();
        run(
            "scatter_nd_f32_f16",
            args.as_bytes(),
            &mut [&mut i32s(ind), &mut ub, &mut dst],
            tuples as u32,
            tpg,
        );
        let mut want = cache.clone();
        for t in 0..tuples {
            if let Some(r) = row_of(t) {
                for j in 0..block {
                    want[r * block + j] = f16::from_f32(upd[t * block + j]);
                }
            }
        }
        let want: Vec<u8> = want.iter().flat_map(|h| h.to_le_bytes()).collect();
        assert_eq!(dst, want, "scatter_nd_f32_f16 case {k}");
        // f16 → f32 cache (exact widening)
        let hupd: Vec<f16> = upd.iter().map(|&v| f16::from_f32(v)).collect();
        let cache: Vec<f32> = (0..total).map(|i| i as f32 - 0.5).collect();
        let mut dst: Vec<u8> = cache.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut ub: Vec<u8> = hupd.iter().flat_map(|h| h.to_le_bytes()).collect();
        run(
            "scatter_nd_f16_f32",
            args.as_bytes(),
            &mut [&mut i32s(ind), &mut ub, &mut dst],
            tuples as u32,
            tpg,
        );
        let mut want = cache.clone();
        for t in 0..tuples {
            if let Some(r) = row_of(t) {
                for j in 0..block {
                    want[r * block + j] = hupd[t * block + j].to_f32();
                }
            }
        }
        let want: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(dst, want, "scatter_nd_f16_f32 case {k}");
    }
}
